"""``jina-ocr convert``: PDFs and images to Markdown or per-page JSON.

Each input becomes ``<stem>.md`` or ``<stem>.json`` in the output folder (or ``s3://`` prefix); an
input may be an http(s) URL, fetched within limits (:mod:`jina_ocr.services.fetch`), whose stem is the
last segment of its path, or an ``s3://`` object or prefix (:mod:`jina_ocr.services.storage`).
Inputs that would share a name are numbered (``report.md``, ``report-2.md``); a file given more than
once is converted once. Without ``-o``, Markdown goes to stdout as pages finish (each document
preceded by ``<!-- document: PATH -->`` when there are several) and JSON goes to stdout as one line
per document (JSON Lines). In Markdown every page starts with the line ``<!-- page N -->``; a page
that failed is replaced by ``<!-- page N: not converted: REASON -->``, and with ``--min-confidence X``
a page whose confidence is below X is followed by ``<!-- low confidence: C, finish_reason: R -->``
and reported on stderr (which does not change the exit status). Outputs are written to a
temporary file and renamed, so an interrupted run leaves finished files and no half-written ones.

Pages run through the model here, through ``--endpoint`` servers, or on Ray (``--ray``: pages drawn in
Ray tasks, read by model actors; :mod:`jina_ocr.services.ray_pages`). With ``-o``, every run records
its options for ``--resume`` (:mod:`~jina_ocr.commands._resume`) and ends with a summary
(:mod:`~jina_ocr.commands._summary`); ``--shard I/N`` takes a part of the documents
(:mod:`~jina_ocr.commands._shard`).

The exit status is 0 when every document converted, 1 when some document failed (it could not be
opened, its output could not be written, or more than ``--max-page-error-rate`` of its pages failed;
each reported on stderr), 2 for a usage error such as a malformed ``--pages``, an unusable ``-o``, an
output that would replace an input, a ``--model`` that is not a jina-ocr model folder or a
``--device`` the machine lacks, 130 when interrupted."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from jina_ocr.commands import _endpoint, _resume, _shard
from jina_ocr.commands._options import (
    add_fetch_arguments,
    add_model_arguments,
    add_runtime_arguments,
    check_positive,
    fetch_policy,
)
from jina_ocr.commands._output import Outputs
from jina_ocr.commands._summary import RunSummary
from jina_ocr.errors import UserError
from jina_ocr.runtime import render_worker
from jina_ocr.runtime.documents import (
    DEFAULT_MAX_PIXELS,
    DOCUMENT_SUFFIXES,
    Document,
    DocumentError,
    PageSelection,
    PasswordError,
    find_documents,
    open_selection,
)
from jina_ocr.services import endpoints, storage
from jina_ocr.services.conversion import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_NEW_TOKENS,
    LOW_CONFIDENCE,
    Converter,
    document_markdown,
    document_record,
    html_comment,
)
from jina_ocr.services.fetch import FetchError, fetch, looks_like_url, redact_url, url_stem

NAME = "convert"
HELP = "Convert PDFs and images to Markdown (or per-page JSON)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="PDF or image files, folders (their documents, sorted), or http(s) URLs of documents",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUT_DIR",
        help="folder (or s3://bucket/prefix/) for <stem>.md / <stem>.json, numbered <stem>-2.md... where "
        "names collide (default: stdout)",
    )
    parser.add_argument("--pages", help="pages to convert, counted from 1, e.g. 1-3,7,10- (default: all)")
    parser.add_argument("--password", help="password of encrypted PDFs")
    add_model_arguments(parser)
    parser.add_argument("--format", choices=("md", "json"), default="md", help="output format (default: md)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="pages per generate call (default: %(default)s)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        help="limit per page (default: %(default)s)",
    )
    parser.add_argument("--prompt", help="instruction replacing the default transcription prompt")
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=DEFAULT_MAX_PIXELS,
        help="largest page bitmap in pixels; bigger pages are reported and skipped (default: %(default)s)",
    )
    parser.add_argument(
        "--min-confidence",
        type=float,
        metavar="X",
        help="mark pages whose confidence (0 to 1, see docs/output.md) is below X in the Markdown and "
        "on stderr (default: none marked)",
    )
    parser.add_argument(
        "--retry-truncated",
        type=int,
        default=0,
        metavar="N",
        help="generate pages cut short (at the token limit or by the loop guard) again with sampling at "
        "rising temperatures, up to N times, keeping the first that ends; trades the exact greedy text "
        "for a finished page (default: 0, off)",
    )
    add_runtime_arguments(parser)
    add_fetch_arguments(parser, max_fetch_mb=True)
    runs = parser.add_argument_group("large runs")
    runs.add_argument(
        "--resume",
        action="store_true",
        help="skip documents already converted in OUT_DIR by an earlier run with the same options",
    )
    runs.add_argument(
        "--shard",
        metavar="I/N",
        help="convert only the I-th of N parts of the documents (for job arrays; each document falls in "
        "exactly one part)",
    )
    runs.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="convert on Ray: pages drawn in CPU tasks, read by model actors; no ADDRESS starts a local "
        "Ray (or joins $RAY_ADDRESS), else the cluster there (auto, ray://HOST:10001); write --ray=ADDRESS "
        "or put it after the inputs (needs jina-ocr[ray])",
    )
    runs.add_argument(
        "--workers", type=int, default=1, help="with --ray: model actors (default: %(default)s)"
    )
    runs.add_argument(
        "--gpus-per-worker",
        type=float,
        default=0.0,
        metavar="G",
        help="with --ray: GPUs each model actor takes, such as 1 or 0.5 (default: %(default)s, CPU)",
    )
    runs.add_argument(
        "--max-page-error-rate",
        type=float,
        default=0.0,
        metavar="R",
        help="a document fails when more than this share of its pages fails (default: 0, any page); "
        "its output is written either way",
    )
    _endpoint.add_arguments(parser)


@dataclass
class Job:
    """One document to convert: the document, its name, its output file name and its pages."""

    document: Document
    """Opened once, when the inputs are checked before the model loads, and converted as it is (with
    ``--ray`` closed at once: the tasks that draw its pages open it again)."""
    label: str
    """How messages and outputs name the document: the path or the URL as given."""
    output: str
    """File name in ``-o``, such as ``report.md``."""
    numbers: list[int]


def _expand(inputs: list[str]) -> list[Path | str]:
    """Files and URLs as given, folders (and ``s3://`` prefixes ending in ``/``) replaced by their
    documents; a folder without any, or one that cannot be listed, is a usage error. A URL is an input
    that starts with ``scheme://``; ``s3://`` objects are read from storage, and the fetch refuses all
    but http(s). A path that cannot even be looked at (a loop of symbolic links, a name
    too long) counts as a file, so that opening it reports it with the other inputs."""
    items: list[Path | str] = []
    for item in inputs:
        if storage.is_object_url(item) and item.endswith("/"):
            found = storage.list_documents(item)
            if not found:
                raise UserError(f"{item}: holds no PDF or image objects")
            items.extend(found)
            continue
        if looks_like_url(item):
            items.append(item)
            continue
        path = Path(item)
        if os.path.isdir(path):
            try:
                found = find_documents(path)
            except OSError as error:
                raise UserError(f"{path}: cannot list the folder ({error.strerror or error})") from None
            if not found:
                raise UserError(f"{path}: folder contains no PDF or image files")
            items.extend(found)
        else:
            items.append(path)
    return items


def _identity(path: Path) -> tuple[int, int] | None:
    """The file ``path`` leads to (device and inode: one for every name of a file), or None when it
    leads to none."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    return info.st_dev, info.st_ino


def _distinct(items: list[Path | str]) -> list[Path | str]:
    """``items`` with each file once, at its first mention: a file named twice (again, through a link,
    or by a folder and by itself) would be converted twice into two outputs of the same text. Each
    repeat is reported in one line. URLs are kept as given: only a fetch says what they hold."""
    first: dict[tuple[int, int], Path] = {}
    kept: list[Path | str] = []
    for item in items:
        identity = _identity(item) if isinstance(item, Path) else None
        if identity is not None and identity in first:
            _report(f"{item}: the same file as {first[identity]}, converted once")
            continue
        if identity is not None:
            first[identity] = item
        kept.append(item)
    return kept


def _check_inputs_survive(folder: Path, items: list[Path | str], names: list[str]) -> None:
    """Refuse outputs that would replace an input, such as a PNG named ``scan.md`` converted into its
    own folder: the rename that writes the output would destroy the document. Compared by resolved
    path, which sees ``-o sub/..`` before ``sub`` exists, and by file identity, which sees hard links
    and file systems that ignore case."""
    paths = [item for item in items if isinstance(item, Path)]
    by_path = {os.path.realpath(path): path for path in paths}
    by_identity = {identity: path for path in paths if (identity := _identity(path)) is not None}
    for name in names:
        output = folder / name
        overwritten = by_path.get(os.path.realpath(output)) or by_identity.get(_identity(output))
        if overwritten is not None:
            raise UserError(f"{output}: would overwrite the input {overwritten}")


def output_names(items: list[Path | str], suffix: str) -> list[str]:
    """The output file name of each input: ``<stem><suffix>``, a URL's stem taken from the last
    segment of its path (see :func:`jina_ocr.services.fetch.url_stem`). Where different inputs would share a
    name (compared without case, as some file systems do), the first keeps it and the others are
    numbered ``<stem>-2``, ``<stem>-3``... in input order, skipping names another input has."""
    stems = [url_stem(item) if isinstance(item, str) else item.stem for item in items]
    owners: dict[str, str] = {}
    names: list[str | None] = []
    for item, stem in zip(items, stems, strict=True):
        claimed = owners.setdefault((stem + suffix).casefold(), str(item))
        names.append(stem + suffix if claimed == str(item) else None)
    for index, (item, stem) in enumerate(zip(items, stems, strict=True)):
        number = 2
        while names[index] is None:
            name = f"{stem}-{number}{suffix}"
            if owners.setdefault(name.casefold(), str(item)) == str(item):
                names[index] = name
            number += 1
    return names


def _report(message: str) -> None:
    from tqdm import tqdm

    tqdm.write(f"jina-ocr convert: {message}", file=sys.stderr)


def _show(text: str) -> None:
    """Write ``text`` to stdout with the progress bar cleared first and drawn again after: on a
    terminal, where stdout and the bar's stderr meet, text written as it is would continue the bar's
    line."""
    from tqdm import tqdm

    tqdm.write(text, file=sys.stdout, end="")
    sys.stdout.flush()


def _check_output_folder(folder: Path) -> None:
    """``-o`` must be a folder that can be written, or one that can be made: checked before anything
    loads, because the first write comes only after the model has loaded and converted a document."""
    existing = folder.absolute()
    while not existing.exists():  # Path.exists is False below a file too
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == folder.absolute() else f"lies under {existing}, which is a file"
        raise UserError(f"-o {folder}: {where}, not a folder")
    try:  # a real write, which also sees read-only file systems and ACLs; it leaves nothing behind
        os.rmdir(tempfile.mkdtemp(prefix=".jina-ocr-probe-", dir=existing))
    except OSError as error:
        raise UserError(f"-o {folder}: cannot write in {existing} ({error.strerror})") from None


def _allow_open_documents(count: int) -> None:
    """Let ``count`` documents be open at once: each input stays open (one file descriptor) from its
    check before the model loads to the end of its conversion, and the soft limit on open files is
    1024 on many systems, 256 on macOS. It is raised as far as the hard limit allows."""
    try:
        import resource
    except ImportError:  # Windows, whose C runtime allows thousands of open files
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 256  # the interpreter's own files, the model's, sockets
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):  # refused: inputs past the limit fail to open
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _open_jobs(items: list[Path | str], names: list[str], selection, args, summary: RunSummary) -> list[Job]:
    """Every input opened once (URLs fetched first), so that bad files, refused URLs and page ranges
    are reported before the model loads and the progress bar knows the total; inputs that fail are
    counted in ``summary``. Fetched documents stay in memory until they are converted."""
    policy = fetch_policy(args, max_bytes=int(args.max_fetch_mb * 1024 * 1024))
    _allow_open_documents(len(items))
    jobs: list[Job] = []
    for item, output in zip(items, names, strict=True):
        label = redact_url(str(item))  # a URL's credentials are never shown
        try:
            if storage.is_object_url(item):
                source = storage.read_document(item)
            else:
                source = fetch(item, policy) if isinstance(item, str) else item
            document, numbers = open_selection(
                source,
                selection,
                name=label,
                password=args.password,
                dpi=args.dpi,
                max_pixels=args.max_pixels,
            )
            if args.ray is not None:  # opened again where its pages are drawn: not kept (nor its bytes)
                document.close()
            jobs.append(Job(document, label, output, numbers))
        except PasswordError as error:
            _report(f"error: {error}" + ("" if args.password else "; pass it with --password"))
            summary.unreadable(label, error.reason)
        except (DocumentError, FetchError) as error:
            _report(f"error: {error}")
            summary.unreadable(label, getattr(error, "reason", str(error)))
    return jobs


def _check_ray(args: argparse.Namespace, items: list[Path | str]) -> None:
    """Usage errors of ``--ray`` and its options, before any input is opened."""
    if args.ray is None:
        if args.workers != 1 or args.gpus_per_worker:
            raise UserError("--workers and --gpus-per-worker work with --ray")
        return
    check_positive(args, "workers")
    if args.gpus_per_worker < 0:
        raise UserError(f"--gpus-per-worker must be 0 or more, got {args.gpus_per_worker}")
    if args.ray and (os.path.exists(args.ray) or Path(args.ray).suffix.lower() in DOCUMENT_SUFFIXES):
        raise UserError(
            f"--ray {args.ray}: this looks like an input, not a Ray address; write --ray=ADDRESS, or put "
            "--ray after the inputs"
        )
    fetched = [item for item in items if isinstance(item, str) and not storage.is_object_url(item)]
    if fetched:
        raise UserError(
            f"{redact_url(fetched[0])}: with --ray, documents are read where their pages are drawn: give "
            "paths every node can read or s3:// URLs"
        )


def run(args: argparse.Namespace) -> int:
    from jina_ocr.loading import resolve_device

    _endpoint.check_arguments(args)
    selection = PageSelection.parse(args.pages) if args.pages is not None else None
    suffix = ".md" if args.format == "md" else ".json"
    outputs = Outputs(args.output) if args.output is not None else None
    if outputs is not None and not outputs.remote:
        _check_output_folder(outputs.where)
    resolve_device(args.device)  # a device this machine lacks is a usage error, before any work
    items = _expand(args.inputs)
    check_positive(args, "batch_size", "max_new_tokens", "dpi", "max_pixels")
    if not args.max_fetch_mb > 0:
        raise UserError("--max-fetch-mb must be positive")
    if args.min_confidence is not None and not 0 <= args.min_confidence <= 1:
        raise UserError(f"--min-confidence must be from 0 to 1, got {args.min_confidence}")
    if not 0 <= args.max_page_error_rate <= 1:
        raise UserError(f"--max-page-error-rate must be from 0 to 1, got {args.max_page_error_rate}")
    if args.retry_truncated < 0:
        raise UserError(f"--retry-truncated must be 0 or more, got {args.retry_truncated}")
    if args.resume and args.output is None:
        raise UserError("--resume needs -o OUT_DIR")
    shard = _shard.parse(args.shard) if args.shard is not None else None
    _check_ray(args, items)
    items = _distinct(items)
    names = output_names(items, suffix)  # over all inputs, so that every shard names a document alike
    if shard is not None:
        items, names = _shard.select(items, names, shard)
    if outputs is not None and not outputs.remote:
        _check_inputs_survive(outputs.where, items, names)
    if not items:
        _report(f"shard {args.shard} holds none of the documents; nothing to do")
        return 0
    summary = RunSummary(args.max_page_error_rate, shard)
    jobs = _open_jobs(items, names, selection, args, summary)
    try:
        if jobs and _run_jobs(jobs, args, summary, outputs) == 130:
            return 130
    finally:
        for job in jobs:  # a converted document is closed already; closing it again does nothing
            job.document.close()
    if not jobs:  # every input was refused, each in its line
        return 1
    _report(summary.line())
    if outputs is not None:
        try:
            summary.write(outputs)
        except OSError as error:
            _report(f"error: {outputs}: the run summary cannot be written ({error.strerror or error})")
            return 1
    return 1 if summary.failed else 0


def _run_jobs(jobs: list[Job], args: argparse.Namespace, summary: RunSummary, outputs: Outputs | None) -> int:
    """Load the model (or reach the endpoints, or start Ray) and convert ``jobs`` into ``outputs``
    (None: stdout), counting them in ``summary``; 130 when interrupted, else 0 (failures are the
    summary's). The ``--resume`` record is written once the model is ready and before any page goes
    out, so a run that cannot start writes nothing."""
    converter, ready = None, False
    try:
        if args.ray is not None:
            converter = _ray_converter(args)
        elif args.endpoint:
            converter = _endpoint.converter(args)
        if outputs is not None:
            options = _resume.text_options(args, _served_model(args, converter))
            if args.resume:
                jobs = _remaining(jobs, outputs, options, summary)
                if not jobs:  # nothing to load the model for
                    return 0
        converter = converter or Converter.from_pretrained(
            args.model,
            revision=args.revision,
            device=args.device,
            dtype=args.dtype,
            quantize=args.quantize,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            use_mtp=False if args.no_mtp else None,
            prompt=args.prompt,
            dpi=args.dpi,
            mode=args.mode,
            max_pixels=args.max_pixels,
            retry_truncated=args.retry_truncated,
        )
        if outputs is not None:
            _resume.write_record(outputs, options)
        if args.ray is not None:
            converter.schedule([(_ray_source(job), job.numbers) for job in jobs])
        elif args.endpoint:
            converter.schedule([(job.document, job.numbers) for job in jobs])
        ready = True
    except KeyboardInterrupt:
        _report("interrupted while loading the model; nothing was written")
        return 130
    finally:
        if not ready and converter is not None and not isinstance(converter, Converter):
            converter.close()  # endpoint clients, Ray
    try:
        _convert_all(converter, jobs, args, summary, outputs)
        return 0
    except KeyboardInterrupt:
        render_worker.POOL.close()  # pages drawing in other threads fail now rather than at their limit
        _report("interrupted; files already written are complete, the current one was not written")
        return 130
    finally:
        if not isinstance(converter, Converter):
            converter.close()


def _ray_converter(args: argparse.Namespace):
    """The Ray converter of the options: model actors running ``--model``, or endpoint clients. Ray
    Data's own notices (progress bars off, each run's timing) are kept off stderr, which reports pages."""
    import logging

    from jina_ocr.services.ray_pages import RayConverter

    logging.getLogger("ray.data").setLevel(logging.ERROR)

    common = dict(
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        dpi=args.dpi,
        max_pixels=args.max_pixels,
        retry_truncated=args.retry_truncated,
        password=args.password,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
    )
    if args.endpoint:
        return RayConverter(
            args.ray or None,
            endpoints=args.endpoint,
            served_model=args.served_model,
            api_key=args.api_key,
            concurrency=args.concurrency,
            policy=endpoints.RetryPolicy(retries=args.retries, timeout=args.timeout, cooldown=args.cooldown),
            **common,
        )
    return RayConverter(
        args.ray or None,
        model=args.model,
        revision=args.revision,
        device=args.device,
        dtype=str(args.dtype),  # plain values: the options' default markers need not travel to the actors
        quantize=args.quantize,
        batch_size=int(args.batch_size),
        use_mtp=False if args.no_mtp else None,
        mode=args.mode,
        **common,
    )


def _served_model(args: argparse.Namespace, converter) -> str | None:
    """The endpoints' model, for the ``--resume`` record: the one they named, or, where their clients
    run on Ray actors, the ``--served-model`` asked for (else the endpoints); None for a local model."""
    if not args.endpoint:
        return None
    if isinstance(converter, endpoints.EndpointConverter):
        return converter.served_model
    return args.served_model or " ".join(args.endpoint)


def _ray_source(job: Job) -> str:
    """Where a Ray task finds the job's document: its URL, or its absolute path (tasks do not run in
    this process's folder)."""
    return job.label if storage.is_object_url(job.label) else os.path.abspath(job.label)


def _remaining(jobs: list[Job], outputs: Outputs, options: dict, summary: RunSummary) -> list[Job]:
    """``--resume``: the jobs an earlier run into ``outputs`` (with the same ``options``) did not finish."""
    todo = _resume.remaining(outputs, options, jobs)
    summary.skipped = len(jobs) - len(todo)
    if summary.skipped:
        _report(f"resuming: {summary.skipped} of {len(jobs)} documents already converted")
    return todo


class _TokenMeter:
    """The progress bar's token count and rate, beside its count of finished pages.

    A local model reports every decoding step (``Converter.progress``), so the count moves while a
    batch decodes; redraws are limited to a few a second. Results from endpoints report their
    tokens when each page comes back.
    """

    REDRAW_SECONDS = 0.2

    def __init__(self, bar):
        self.bar = bar
        self.tokens = 0
        self.start = self.drawn = time.monotonic()

    def add(self, count: int) -> None:
        self.tokens += count
        now = time.monotonic()
        if now - self.drawn >= self.REDRAW_SECONDS:
            self.drawn = now
            self.bar.set_postfix_str(self.text(now))

    def text(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self.start
        return f"{self.tokens:,} tokens, {self.tokens / elapsed if elapsed else 0.0:.1f} tok/s"


def _convert_all(
    converter: Converter, jobs: list[Job], args, summary: RunSummary, outputs: Outputs | None
) -> None:
    """Convert every job, writing each output into ``outputs`` (None: stdout) as soon as its document
    is done, and counting it in ``summary``."""
    from tqdm import tqdm

    to_stdout = outputs is None
    with tqdm(total=sum(len(job.numbers) for job in jobs), unit="page", file=sys.stderr) as bar:
        meter = _TokenMeter(bar)
        live = isinstance(converter, Converter)
        if live:  # the pages of several small documents share batches
            converter = converter.with_options(progress=meter.add)
            shared = (
                result for _, result in converter.convert_documents([(j.document, j.numbers) for j in jobs])
            )
        for job in jobs:
            if to_stdout and args.format == "md" and len(jobs) > 1:
                _show(html_comment(f"document: {job.label}") + "\n\n")
            results = []
            if live:
                pages = itertools.islice(shared, len(job.numbers))
            else:  # endpoints have the open document; Ray's tasks open it again
                pages = converter.convert(job.document if args.ray is None else _ray_source(job), job.numbers)
            for result in pages:
                results.append(result)
                if not result.ok:
                    _report(f"error: {job.label}, page {result.page}: {result.error}")
                elif not live:
                    meter.tokens += result.tokens
                if result.doubtful(args.min_confidence):
                    _report(f"{job.label}, page {result.page}: {LOW_CONFIDENCE.format_map(vars(result))}")
                bar.set_postfix_str(meter.text(), refresh=False)
                bar.update(1)
                if to_stdout and args.format == "md":
                    _show(document_markdown([result], args.min_confidence) + "\n")
            failure = summary.add(job.label, results)
            if failure is not None and args.max_page_error_rate:
                _report(f"error: {job.label}: {failure}")
            if to_stdout and args.format == "json":
                _show(json.dumps(document_record(job.label, results)) + "\n")
            elif not to_stdout:
                record = json.dumps(document_record(job.label, results), ensure_ascii=False, indent=2)
                text = (
                    document_markdown(results, args.min_confidence) if args.format == "md" else record + "\n"
                )
                target = outputs.location(job.output)
                try:  # a full disk, a quota, a folder removed meanwhile: this output only, the old file kept
                    outputs.write(job.output, text)
                except OSError as error:
                    summary.fail(job.label, f"{target} cannot be written")
                    _report(f"error: {target}: cannot be written ({error.strerror or error})")
