"""``jina-ocr convert``: PDFs and images to Markdown or per-page JSON.

Each input becomes ``<stem>.md`` or ``<stem>.json`` in the output folder. Without ``-o``, Markdown
goes to stdout as pages finish (each document preceded by ``<!-- document: PATH -->`` when there are
several) and JSON goes to stdout as one line per document (JSON Lines). In Markdown every page
starts with the line ``<!-- page N -->``; a page that failed is replaced by
``<!-- page N: not converted: REASON -->``. Outputs are written to a temporary file and renamed, so an
interrupted run leaves finished files and no half-written ones. The exit status is 0 when every page
of every input converted, 1 when some input or page failed (each reported on stderr), 2 for a usage
error such as a malformed ``--pages``, an unusable ``-o``, a ``--model`` that is not a jina-ocr model
folder or a ``--device`` the machine lacks, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from jina_ocr.commands import _endpoint
from jina_ocr.commands._options import add_runtime_arguments
from jina_ocr.conversion import DEFAULT_BATCH_SIZE, DEFAULT_MAX_NEW_TOKENS, PAGE_MARKER, Converter, PageResult
from jina_ocr.documents import (
    DEFAULT_MAX_PIXELS,
    DocumentError,
    PageSelection,
    PasswordError,
    find_documents,
    open_document,
)
from jina_ocr.errors import UserError

NAME = "convert"
HELP = "Convert PDFs and images to Markdown (or per-page JSON)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="PDF or image files, or folders (their documents, sorted)"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="OUT_DIR",
        help="folder for <stem>.md / <stem>.json (default: stdout)",
    )
    parser.add_argument("--pages", help="pages to convert, counted from 1, e.g. 1-3,7,10- (default: all)")
    parser.add_argument("--password", help="password of encrypted PDFs")
    parser.add_argument(
        "--model", help="exported model folder (default: $JINA_OCR_MODEL, else the bundled model)"
    )
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
    add_runtime_arguments(parser)
    _endpoint.add_arguments(parser)


def _expand(inputs: list[str]) -> list[Path]:
    """Files as given, folders replaced by their documents; a folder without any is a usage error."""
    paths = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = find_documents(path)
            if not found:
                raise UserError(f"{path}: folder contains no PDF or image files")
            paths.extend(found)
        else:
            paths.append(path)
    return paths


def _check_output_names(paths: list[Path], suffix: str) -> None:
    owners: dict[str, Path] = {}
    for path in paths:
        name = path.stem + suffix
        if name in owners and owners[name] != path:
            raise UserError(f"{owners[name]} and {path} would both be written to {name}")
        owners[name] = path


def _report(message: str) -> None:
    from tqdm import tqdm

    tqdm.write(f"jina-ocr convert: {message}", file=sys.stderr)


def _comment(text: str) -> str:
    """An HTML comment holding ``text``; a "--" inside would end the comment early."""
    return f"<!-- {text.replace('--', '- -')} -->"


def _markdown(results: list[PageResult]) -> str:
    parts = []
    for result in results:
        if result.ok:
            parts.append(f"{PAGE_MARKER.format(page=result.page)}\n\n{result.markdown.strip()}\n")
        else:
            parts.append(_comment(f"page {result.page}: not converted: {result.error}") + "\n")
    return "\n".join(parts)


def _json(source: str, results: list[PageResult]) -> str:
    return json.dumps(
        {"source": source, "pages": [r.to_dict() for r in results]}, ensure_ascii=False, indent=2
    )


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and an atomic rename."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes the file private; the output is an ordinary file
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


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


def run(args: argparse.Namespace) -> int:
    from jina_ocr.conversion import resolve_device

    _endpoint.check_arguments(args)
    selection = PageSelection.parse(args.pages) if args.pages is not None else None
    suffix = ".md" if args.format == "md" else ".json"
    if args.output is not None:
        _check_output_folder(args.output)
    resolve_device(args.device)  # a device this machine lacks is a usage error, before any work
    paths = _expand(args.inputs)
    if args.output is not None:
        _check_output_names(paths, suffix)
    for name in ("batch_size", "max_new_tokens", "dpi", "max_pixels"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")

    # Open every input once up front: bad files and page ranges are reported before the model loads,
    # and the progress bar knows the total.
    failed = False
    jobs: list[tuple[Path, list[int]]] = []
    for path in paths:
        try:
            with open_document(
                path, password=args.password, dpi=args.dpi, max_pixels=args.max_pixels
            ) as document:
                jobs.append((path, document.select(selection)))
        except PasswordError as error:
            _report(f"error: {error}" + ("" if args.password else "; pass it with --password"))
            failed = True
        except DocumentError as error:
            _report(f"error: {error}")
            failed = True
    if not jobs:
        return 1

    converter = None  # a local model is loaded only without --endpoint
    if args.endpoint:
        converter, jobs = _endpoint.prepare(args, jobs, suffix)
    try:
        converter = converter or Converter.from_pretrained(
            args.model,
            device=args.device,
            dtype=args.dtype,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            use_mtp=False if args.no_mtp else None,
            prompt=args.prompt,
            dpi=args.dpi,
            mode=args.mode,
            max_pixels=args.max_pixels,
        )
    except KeyboardInterrupt:
        _report("interrupted while loading the model; nothing was written")
        return 130
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
    try:
        failed |= _convert_all(converter, jobs, args, suffix)
    except KeyboardInterrupt:
        _report("interrupted; files already written are complete, the current one was not written")
        return 130
    finally:
        if args.endpoint:
            converter.close()
    return 1 if failed else 0


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


def _convert_all(converter: Converter, jobs: list[tuple[Path, list[int]]], args, suffix: str) -> bool:
    """Convert every job, writing each output as soon as its document is done; True if anything failed."""
    from tqdm import tqdm

    failed = False
    to_stdout = args.output is None
    with tqdm(total=sum(len(numbers) for _, numbers in jobs), unit="page", file=sys.stderr) as bar:
        meter = _TokenMeter(bar)
        live = isinstance(converter, Converter)
        if live:
            converter = converter.with_options(progress=meter.add)
        for path, numbers in jobs:
            if to_stdout and args.format == "md" and len(jobs) > 1:
                sys.stdout.write(_comment(f"document: {path}") + "\n\n")
            results = []
            try:
                stream = converter.convert(path, numbers, password=args.password)
            except DocumentError as error:  # changed since it was first opened
                _report(f"error: {error}")
                failed = True
                bar.update(len(numbers))
                continue
            for result in stream:
                results.append(result)
                if not result.ok:
                    failed = True
                    _report(f"error: {path}, page {result.page}: {result.error}")
                elif not live:
                    meter.tokens += result.tokens
                bar.set_postfix_str(meter.text(), refresh=False)
                bar.update(1)
                if to_stdout and args.format == "md":
                    sys.stdout.write(_markdown([result]) + "\n")
                    sys.stdout.flush()
            if to_stdout and args.format == "json":
                sys.stdout.write(
                    json.dumps({"source": str(path), "pages": [r.to_dict() for r in results]}) + "\n"
                )
                sys.stdout.flush()
            elif not to_stdout:
                text = _markdown(results) if args.format == "md" else _json(str(path), results) + "\n"
                write_atomic(args.output / (path.stem + suffix), text)
    return failed
