"""Converting on a Ray cluster: pages rendered by CPU tasks, read by model actors, streamed back.

An archive of millions of pages outgrows one machine, and within one machine rendering and the model
want different resources (CPU cores and a GPU). A :class:`RayConverter` runs a Ray Data pipeline:

1. one row per selected page: ``(item, source, page)``, where ``source`` is a path every node can read
   or an ``s3://`` URL (:mod:`jina_ocr.services.storage`); the driver ships names, never documents;
2. rendering in CPU tasks, which open the source themselves (a worker keeps its last few documents
   open) and turn each page into a lossless PNG, or into the reason it could not be drawn;
3. ``workers`` model actors (``gpus_per_worker`` GPUs each) that load the model once and convert
   pages in batches, as :class:`~jina_ocr.services.conversion.Converter` does
   (``Converter._convert_rendered``: the same blank pages and render errors); or, given
   ``endpoints``, actors that send the pages to OpenAI-compatible servers such as vLLM replicas,
   as :class:`~jina_ocr.services.endpoints.EndpointConverter` does;
4. the driver reads results as they come (Ray Data's streaming window bounds what is in flight) and
   hands each document its pages in page order, keeping those of later documents that come early.

It speaks the protocol of :class:`~jina_ocr.services.endpoints.EndpointConverter`: :meth:`schedule`
the documents, then :meth:`convert` each in that order, then :meth:`close`. The results equal a local
run's page for page (the same pixels, the same model, greedy decoding).

A machine lost mid-run costs time, not pages: a model actor whose process dies is restarted and its
batches retried, as are render tasks whose worker dies (Ray Data's defaults for map workers:
``max_restarts=-1``, ``max_task_retries=-1``, tasks ``max_retries=-1``; passing them is deprecated);
a page that comes back twice is passed on once. A page is never retried for what it is: drawing runs
in :mod:`~jina_ocr.runtime.render_worker` processes with time and memory limits, and a page the
model fails on fails alone, so only the machinery dies and is retried.

Ray is imported only here: ``pip install "jina-ocr[ray]"``. Every node needs jina-ocr installed and
the model (a folder there, or a Hub id it downloads).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from PIL import Image

from jina_ocr.errors import UserError
from jina_ocr.generation_defaults import DEFAULT_MAX_NEW_TOKENS
from jina_ocr.runtime.checks import positive_int
from jina_ocr.runtime.documents import (
    DEFAULT_DPI,
    DEFAULT_MAX_PIXELS,
    Document,
    DocumentError,
    PagesArgument,
    open_document,
    open_selection,
)
from jina_ocr.runtime.results import PageResult
from jina_ocr.services import storage
from jina_ocr.services.conversion import DEFAULT_BATCH_SIZE, Converter, RenderedPage
from jina_ocr.services.endpoints import (
    DEFAULT_CONCURRENCY,
    EndpointPool,
    RetryPolicy,
    answer_page,
    png_bytes,
)

RENDER_BATCH = 4
"""Pages a render task draws: enough to spread the cost of a task, few enough to keep many in flight."""
RENDER_CALLS = 500
"""Render tasks a worker process runs before Ray replaces it: what MuPDF and Pillow keep of their
largest bitmaps is given back, and rendering never fuses into the model actors (whose remote arguments
differ), where it would wait for the model instead of running beside it."""
OPEN_DOCUMENTS = 4
"""Documents a render worker keeps open, so that the next batch of the same document does not reopen
(or download again) what the last one opened."""

MODEL_OPTIONS = ("model", "revision", "device", "dtype", "quantize", "batch_size", "use_mtp", "mode")
"""Options that choose the model and how it runs: with ``endpoints``, the servers' business."""


def _ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise UserError(f"--ray needs Ray Data: {storage.INSTALL_HINT}") from None
    return ray


def open_source(
    source: str, *, password: str | None = None, dpi: int = DEFAULT_DPI, max_pixels: int = DEFAULT_MAX_PIXELS
) -> Document:
    """A document by path or ``s3://`` URL, named by it; an object that cannot be read is a
    :class:`DocumentError` as a file that cannot be read is."""
    data = storage.read_document(source) if storage.is_object_url(source) else source
    return open_document(data, name=source, password=password, dpi=dpi, max_pixels=max_pixels)


_open: OrderedDict[tuple, Document] = OrderedDict()
"""The documents this render worker has open, the most recently used last (see :data:`OPEN_DOCUMENTS`)."""


def _document(source: str, **options) -> Document:
    key = (source, *sorted(options.items()))
    if key not in _open:
        _open[key] = open_source(source, **options)
        while len(_open) > OPEN_DOCUMENTS:
            _open.popitem(last=False)[1].close()
    _open.move_to_end(key)
    return _open[key]


def _render(batch, *, password: str | None, dpi: int, max_pixels: int):
    """Render task: each page as PNG bytes, or the reason it could not be drawn (the document's own
    reason when it cannot be opened at all), and the seconds it took."""
    import pyarrow

    rows = []
    for row in batch.to_pylist():
        start = time.perf_counter()
        png, error = None, None
        try:
            document = _document(row["source"], password=password, dpi=dpi, max_pixels=max_pixels)
            png = png_bytes(document.render(row["page"]))
        except DocumentError as failure:
            error = failure.reason
        rows.append({**row, "png": png, "error": error, "seconds": time.perf_counter() - start})
    return pyarrow.Table.from_pylist(rows, schema=_schema(pyarrow, "rendered"))


def _schema(pyarrow, stage: str):
    """The columns of a stage's output, fixed so that a batch of only failed (or only drawn) pages
    has the same types as the others."""
    page = [("item", pyarrow.int64()), ("source", pyarrow.string()), ("page", pyarrow.int64())]
    if stage == "rendered":
        extra = [("png", pyarrow.binary()), ("error", pyarrow.string()), ("seconds", pyarrow.float64())]
    else:
        extra = [("result", pyarrow.string())]
    return pyarrow.schema(page + extra)


class _PageModel:
    """Model actor: loads the model (or connects to the endpoints) once, then converts batches."""

    def __init__(self, recipe: dict):
        self.endpoints = recipe.pop("endpoints")
        if self.endpoints is None:
            self.converter = Converter.from_pretrained(**recipe)
        else:
            self.prompt, self.max_new_tokens = recipe["prompt"], recipe["max_new_tokens"]
            self.retry_truncated = recipe["retry_truncated"]
            self.pool = EndpointPool(
                self.endpoints, recipe["policy"], recipe["api_key"], recipe["served_model"]
            )
            self.pool.describe()
            self.threads = ThreadPoolExecutor(recipe["concurrency"], "jina-ocr-ray-endpoint")

    def __call__(self, batch):
        import pyarrow

        rows = batch.to_pylist()
        pages = [_rendered_page(row) for row in rows]
        results = self._convert(pages)
        table = [
            {"item": row["item"], "source": row["source"], "page": row["page"], "result": _encode(result)}
            for row, result in zip(rows, results, strict=True)
        ]
        return pyarrow.Table.from_pylist(table, schema=_schema(pyarrow, "converted"))

    def _convert(self, pages: list[RenderedPage]) -> list[PageResult]:
        if self.endpoints is None:
            return self.converter._convert_rendered(pages)
        futures = [
            self.threads.submit(
                answer_page,
                self.pool,
                png_bytes(page.image),
                page.source,
                page.number,
                page.seconds,
                self.prompt,
                self.max_new_tokens,
                self.retry_truncated,
            )
            if page.inked
            else None
            for page in pages
        ]
        return [
            page.unread_result() if future is None else future.result()
            for page, future in zip(pages, futures, strict=True)
        ]


def _rendered_page(row: dict) -> RenderedPage:
    """A render task's row as the page the local converter would have rendered."""
    source, number = row["source"], row["page"]
    if row["error"] is not None:
        return RenderedPage(source, number, None, row["seconds"], DocumentError(source, row["error"], number))
    image = Image.open(io.BytesIO(row["png"]))
    image.load()
    return RenderedPage(source, number, image, row["seconds"])


def _encode(result: PageResult) -> str:
    """Every field at full precision (``PageResult.to_dict`` rounds, and drops the source)."""
    return json.dumps(dataclasses.asdict(result))


@dataclass
class _Scheduled:
    """A document of the plan: its results that came early, and the pages already passed on."""

    item: int
    source: str
    numbers: list[int]
    early: dict[int, PageResult] = field(default_factory=dict)
    delivered: set[int] = field(default_factory=set)


class RayConverter:
    """The Ray counterpart of :class:`~jina_ocr.services.endpoints.EndpointConverter` (see the module).

    ``address`` None starts a local Ray (or uses the one this process started already), else joins the
    cluster there (``auto``, ``ray://host:10001``, ...). The model options are those of
    :meth:`Converter.from_pretrained` and are refused with ``endpoints``; the endpoint options are those
    of :class:`EndpointConverter`, ``concurrency`` counting the requests of each actor. Each of the
    ``workers`` actors takes ``gpus_per_worker`` GPUs and ``cpus_per_worker`` CPUs, each render task
    ``render_cpus`` CPUs.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        model: str | os.PathLike | None = None,
        revision: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        quantize: str | None = None,
        batch_size: int | None = None,
        use_mtp: bool | None = None,
        mode: str | None = None,
        prompt: str | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        dpi: int = DEFAULT_DPI,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        retry_truncated: int = 0,
        password: str | None = None,
        endpoints: Sequence[str] | None = None,
        served_model: str | None = None,
        api_key: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        policy: RetryPolicy | None = None,
        workers: int = 1,
        gpus_per_worker: float = 0,
        cpus_per_worker: float = 1,
        render_cpus: float = 1,
    ):
        chosen = (model, revision, device, dtype, quantize, batch_size, use_mtp, mode)
        local = dict(zip(MODEL_OPTIONS, chosen, strict=True))
        numbers = dict(max_new_tokens=max_new_tokens, dpi=dpi, max_pixels=max_pixels, workers=workers)
        numbers["concurrency"] = concurrency
        for name, value in numbers.items():
            positive_int(name, value)
        if gpus_per_worker < 0 or cpus_per_worker < 0 or render_cpus < 0:
            raise UserError("gpus_per_worker, cpus_per_worker and render_cpus must be 0 or more")
        if endpoints is None:
            self._batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
            positive_int("batch_size", self._batch_size)
            recipe = dict(
                local,
                batch_size=self._batch_size,
                max_new_tokens=max_new_tokens,
                prompt=prompt,
                retry_truncated=retry_truncated,
                endpoints=None,
            )
            recipe.update(dpi=dpi, max_pixels=max_pixels, model=None if model is None else os.fspath(model))
        else:
            given = [name for name, value in local.items() if value is not None]
            if given:
                raise UserError(f"{', '.join(given)}: set on the servers, not with endpoints")
            if not endpoints:
                raise UserError("give at least one endpoint URL")
            self._batch_size = concurrency
            recipe = dict(
                endpoints=list(endpoints),
                served_model=served_model,
                api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
                policy=policy or RetryPolicy(),
                concurrency=concurrency,
                prompt=prompt,
                max_new_tokens=max_new_tokens,
                retry_truncated=retry_truncated,
            )
        self._recipe = recipe
        self._render_options = dict(password=password, dpi=dpi, max_pixels=max_pixels)
        self._resources = dict(
            workers=workers,
            gpus_per_worker=gpus_per_worker,
            cpus_per_worker=cpus_per_worker,
            render_cpus=render_cpus,
        )
        self._plan: deque[_Scheduled] = deque()
        self._rows: Iterator[dict] | None = None
        ray = _ray()
        self._started = not ray.is_initialized()
        if self._started:
            local = {} if address is not None else {"include_dashboard": False}
            try:
                ray.init(address=address, log_to_driver=False, logging_level="WARNING", **local)
            except ConnectionError as error:
                raise UserError(f"--ray {address}: cannot connect ({error})") from None
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the command draws its own
        context.print_on_execution_start = False

    def close(self) -> None:
        """Stop the pipeline; a Ray this converter started (or joined) is shut down too."""
        self._stop()
        if self._started:
            self._started = False
            _ray().shutdown()

    def __enter__(self) -> RayConverter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def schedule(self, work: Iterable[tuple[str | os.PathLike, Sequence[int]]]) -> None:
        """Start converting ``(source, page numbers)`` in that order, replacing any earlier plan; the
        :meth:`convert` calls that follow ask for them in the same order."""
        self._stop()
        self._plan = deque(
            _Scheduled(item, os.fspath(source), list(numbers)) for item, (source, numbers) in enumerate(work)
        )
        rows = [{"item": e.item, "source": e.source, "page": n} for e in self._plan for n in e.numbers]
        if rows:
            self._rows = iter(self._pipeline(rows).iter_rows())

    def _pipeline(self, rows: list[dict]):
        ray = _ray()
        resources = self._resources
        rendered = ray.data.from_items(rows).map_batches(
            _render,
            batch_size=RENDER_BATCH,
            batch_format="pyarrow",
            fn_kwargs=self._render_options,
            compute=ray.data.TaskPoolStrategy(),
            num_cpus=resources["render_cpus"],
            max_calls=RENDER_CALLS,
        )
        return rendered.map_batches(
            _PageModel,
            batch_size=self._batch_size,
            batch_format="pyarrow",
            fn_constructor_kwargs={"recipe": dict(self._recipe)},
            compute=ray.data.ActorPoolStrategy(size=resources["workers"]),
            num_cpus=resources["cpus_per_worker"],
            num_gpus=resources["gpus_per_worker"],
        )

    def _stop(self) -> None:
        if self._rows is not None:
            close = getattr(self._rows, "close", None)
            if close is not None:
                close()
            self._rows = None
        self._plan.clear()

    def convert(
        self, source: str | os.PathLike | Document, pages: PagesArgument = None
    ) -> Iterator[PageResult]:
        """The results of the next scheduled document, in page order. ``source`` is its path or URL, or
        a :class:`Document` of that name (which is closed: the pages are rendered by the tasks); asked
        for with other pages, or out of turn, it is converted alone and the plan is dropped."""
        name = source.source if isinstance(source, Document) else os.fspath(source)
        head = self._plan[0] if self._plan else None
        if head is None or head.source != name or isinstance(pages, str) or list(pages or ()) != head.numbers:
            if isinstance(source, Document):
                numbers = source.select(pages)
            else:
                options = self._render_options
                document, numbers = open_selection(open_source(name, **options), pages)
                document.close()
            self.schedule([(name, numbers)])
            head = self._plan[0]
        if isinstance(source, Document):
            source.close()
        return self._stream(head)

    def _stream(self, entry: _Scheduled) -> Iterator[PageResult]:
        try:
            for number in entry.numbers:
                while number not in entry.early:
                    self._receive()
                entry.delivered.add(number)
                yield entry.early.pop(number)
        finally:
            if self._plan and self._plan[0] is entry:
                self._plan.popleft()

    def _receive(self) -> None:
        """Take the next result off the pipeline and keep it with its document; one already passed on,
        or of a document already done, is a retry's duplicate and is dropped."""
        ray = _ray()
        try:
            row = next(self._rows) if self._rows is not None else None
        except StopIteration:
            row = None
        except ray.exceptions.RayError as error:  # a model actor that cannot start (a bad --model), ...
            lines = str(error).strip().splitlines() or [type(error).__name__]
            raise UserError(f"the Ray pipeline failed: {lines[-1].strip()}") from error
        if row is None:
            raise RuntimeError("the Ray pipeline ended before every scheduled page came back")
        first = self._plan[0].item
        if row["item"] < first:
            return
        entry = self._plan[row["item"] - first]
        if row["page"] not in entry.delivered and row["page"] not in entry.early:
            entry.early[row["page"]] = PageResult(**json.loads(row["result"]))
