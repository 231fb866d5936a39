"""Documents to Markdown, page by page: the Python API behind ``jina-ocr convert`` and ``jina-ocr serve``.

>>> import jina_ocr
>>> for page in jina_ocr.convert("paper.pdf", pages="1-3", model="path/to/jina-ocr-v1"):
...     print(page.page, page.markdown)

Pages render lazily (see :mod:`jina_ocr.runtime.documents`) and go through the model in batches of up to
``batch_size``, run by the batch driver (:mod:`jina_ocr.runtime.batching`); results stream out
as each batch finishes, so memory holds one batch of pages at a time whatever the length of the
document. A page that cannot be rendered or generated comes back with ``error`` set and the others
still convert; errors about the whole document (unreadable file, wrong password, page out of range)
are raised when :func:`convert` is called, before any work.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from jina_ocr.errors import UserError
from jina_ocr.generation_defaults import DEFAULT_MAX_NEW_TOKENS
from jina_ocr.loading import load
from jina_ocr.runtime.batching import BatchDriver, Generation, Page, batches
from jina_ocr.runtime.checks import positive_int
from jina_ocr.runtime.confidence import STOP, cut_short
from jina_ocr.runtime.documents import (
    DEFAULT_DPI,
    DEFAULT_MAX_PIXELS,
    Document,
    DocumentError,
    PagesArgument,
    is_blank,
    open_selection,
)
from jina_ocr.runtime.results import PageResult, blank_generation, retry_temperature
from jina_ocr.services.endpoints import EndpointConverter, RetryPolicy, closing_stream
from jina_ocr.services.fetch import FetchPolicy, fetch, looks_like_url, redact_url

DEFAULT_BATCH_SIZE = 4

PAGE_MARKER = "<!-- page {page} -->"
"""Line that starts each page in Markdown output: an HTML comment, invisible when rendered, that keeps
the page number of every chunk (page selections make numbers non-consecutive)."""


def document_record(source: str, results: Sequence[PageResult]) -> dict:
    """One document's JSON object: ``convert --format json``, ``POST /v1/documents`` and ``GET /{url}``."""
    return {"source": source, "pages": [result.to_dict() for result in results]}


def html_comment(text: str) -> str:
    """An HTML comment holding ``text``; a "--" inside would end the comment early."""
    return f"<!-- {text.replace('--', '- -')} -->"


LOW_CONFIDENCE = "low confidence: {confidence:.2f}, finish_reason: {finish_reason}"
"""What marks a page below ``convert --min-confidence``: in an HTML comment on the line after its
:data:`PAGE_MARKER`, and on stderr."""


def document_markdown(results: Sequence[PageResult], min_confidence: float | None = None) -> str:
    """Pages as Markdown: each converted page after its :data:`PAGE_MARKER` line (an empty page is the
    line alone), each failed page as ``<!-- page N: not converted: REASON -->`` (the output of
    ``convert`` and of ``GET /{url}``). A page whose confidence is below ``min_confidence`` has the
    line ``<!-- low confidence: 0.42, finish_reason: stop -->`` (:data:`LOW_CONFIDENCE`) right after
    its marker."""
    parts = []
    for result in results:
        if result.ok:
            body = result.markdown.strip()
            marker = PAGE_MARKER.format(page=result.page)
            if result.doubtful(min_confidence):
                marker += "\n" + html_comment(LOW_CONFIDENCE.format_map(vars(result)))
            parts.append(f"{marker}\n" + (f"\n{body}\n" if body else ""))
        else:
            parts.append(html_comment(f"page {result.page}: not converted: {result.error}") + "\n")
    return "\n".join(parts)


@dataclass
class RenderedPage:
    """A page on its way to the model: its document's name, its number, its image or the error that
    kept it from rendering, and (in a conversion of several documents) which document it is of."""

    source: str
    number: int
    image: Image.Image | None
    seconds: float
    error: DocumentError | None = None
    item: int = 0
    inked: bool = field(init=False)
    """Whether the model has something to read here: the page rendered and is not blank."""

    def __post_init__(self):
        self.inked = self.error is None and not is_blank(self.image)

    def unread_result(self) -> PageResult:
        """The result of a page the model does not see: its render error, or a blank page's."""
        if self.error is not None:
            return PageResult(self.source, self.number, seconds=self.seconds, error=self.error.reason)
        return PageResult.converted(self.source, self.number, blank_generation(), self.seconds)


def render_batches(
    document: Document, numbers: Sequence[int], batch_size: int
) -> Iterator[list[RenderedPage]]:
    """Render pages lazily and group them, in page order, into batches of up to ``batch_size`` pages.

    A page that fails to render stays in its batch with ``error`` set and no image, so results keep
    page order. The grouping is the batch driver's (``batches``): a batch's pages are released before
    the next page is rendered, so at most ``batch_size`` rendered pages are alive at a time.
    """
    return render_documents([(document, numbers)], batch_size)


def render_documents(
    work: Iterable[tuple[Document, Sequence[int]]], batch_size: int
) -> Iterator[list[RenderedPage]]:
    """:func:`render_batches` over several documents in turn: the pages of consecutive documents share
    batches, so that a folder of one-page scans fills every batch as one long document would."""

    def render(item: int, document: Document, number: int) -> RenderedPage:
        start = time.perf_counter()
        try:
            image = document.render(number)
        except DocumentError as error:
            return RenderedPage(document.source, number, None, time.perf_counter() - start, error, item)
        return RenderedPage(document.source, number, image, time.perf_counter() - start, item=item)

    pages = (
        render(item, document, number) for item, (document, numbers) in enumerate(work) for number in numbers
    )
    return batches(pages, batch_size)


@dataclass
class Converter:
    """A loaded model and processor plus the options of a conversion; reuse one for many documents."""

    model: Any
    processor: Any
    batch_size: int = DEFAULT_BATCH_SIZE
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    use_mtp: bool | None = None
    """FastMTP on or off; None follows the checkpoint's generation config (on when it has a head)."""
    prompt: str | None = None
    dpi: int = DEFAULT_DPI
    max_pixels: int = DEFAULT_MAX_PIXELS
    mode: str | None = None
    """Resolution mode of the processor (``tiny`` 512 px ... ``gundam`` 1024 px plus 640 px tiles);
    None keeps the model's own, which for jina-ocr-v1 is ``gundam``. Smaller modes trade accuracy on
    dense pages for speed."""
    progress: Callable[[int], None] | None = None
    """Told the tokens every decoding step adds (over the pages of the batch), so a progress display
    moves while a batch decodes rather than only when it ends."""
    retry_truncated: int = 0
    """Times a page that reached ``max_new_tokens`` is generated again with sampling, at rising
    temperatures (:func:`~jina_ocr.runtime.results.retry_temperature`), until one try ends with the end
    token; if none does, the greedy text stays. Off (0) by default: it trades the exact greedy text
    for a finished page."""

    def __post_init__(self):
        for name in ("batch_size", "max_new_tokens", "dpi", "max_pixels"):
            positive_int(name, getattr(self, name))
        if self.retry_truncated < 0:
            raise UserError(f"retry_truncated must be 0 or more, got {self.retry_truncated}")

    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike | None = None,
        *,
        revision=None,
        device=None,
        dtype=None,
        quantize=None,
        **options,
    ) -> Converter:
        """Load ``model`` (a folder or a Hub id at ``revision``, see :func:`jina_ocr.loading.load`) onto
        ``device`` in ``dtype``, its decoder in ``quantize`` ("int8", "int4") if given."""
        loaded_model, processor = load(
            model, revision=revision, device=device, dtype=dtype, quantize=quantize
        )
        return cls(loaded_model, processor, **options)

    def with_options(self, **options) -> Converter:
        """The same loaded model with some options changed (options given as None keep their value)."""
        changes = {key: value for key, value in options.items() if value is not None}
        return dataclasses.replace(self, **changes) if changes else self

    def driver(self, temperature: float = 0.0) -> BatchDriver:
        """The batch driver with this converter's model and options: what every conversion runs, greedy,
        or sampling at ``temperature`` (without FastMTP, which is greedy)."""
        if temperature:
            decoding = {
                "do_sample": True,
                "temperature": temperature,
                "top_p": 1.0,
                "top_k": 0,
                "use_mtp": False,
            }
        else:
            decoding = {} if self.use_mtp is None else {"use_mtp": self.use_mtp}
        return BatchDriver(
            self.model,
            self.processor,
            prompt=self.prompt,
            mode=self.mode,
            max_new_tokens=self.max_new_tokens,
            progress=self.progress,
            **decoding,
        )

    def generate(
        self,
        images: Sequence[Image.Image],
        *,
        prompt: str | None = None,
        max_new_tokens: int | Sequence[int] | None = None,
    ) -> list[Generation]:
        """Run one batch of page images through the model; raises if the batch fails.

        ``max_new_tokens`` may differ per image (the server batches requests with different
        ``max_tokens``): each page stops at its own limit while the others go on, which under greedy
        decoding equals generating it alone with that limit.
        """
        if isinstance(max_new_tokens, Sequence):
            limits = list(max_new_tokens)
        else:
            limits = [max_new_tokens or self.max_new_tokens] * len(images)
        pages = [Page(image, limit) for image, limit in zip(images, limits, strict=True)]
        return self.driver().generate(pages, prompt)

    def convert(
        self,
        source: str | os.PathLike | bytes | Document,
        pages: PagesArgument = None,
        *,
        password: str | None = None,
        name: str | None = None,
    ) -> Iterator[PageResult]:
        """Open ``source`` and check ``pages`` now (raising :class:`DocumentError`), then stream results.

        A :class:`Document` opened already is converted as it is (its own dpi and pixel limit; see
        :func:`~jina_ocr.runtime.documents.open_selection`); either way the document is closed when
        the results end."""
        document, numbers = open_selection(
            source, pages, name=name, password=password, dpi=self.dpi, max_pixels=self.max_pixels
        )
        return self._stream(document, numbers)

    def _stream(self, document: Document, numbers: list[int]) -> Iterator[PageResult]:
        with document:
            yield from self.convert_pages(document, numbers)

    def convert_pages(self, document: Document, numbers: Sequence[int]) -> Iterator[PageResult]:
        """Render ``numbers`` of an open document one by one and convert them in batches, in page order
        (see :func:`render_batches`: at most ``batch_size`` rendered pages exist at a time)."""
        for batch in render_batches(document, numbers, self.batch_size):
            yield from self._convert_rendered(batch)

    def convert_documents(
        self, work: Sequence[tuple[Document, Sequence[int]]]
    ) -> Iterator[tuple[int, PageResult]]:
        """``(index into work, result)`` for each selected page of each open document, in order, the
        pages of consecutive documents sharing batches (:func:`render_documents`). Each document is
        closed once its last result is out (all of them if the results stop early)."""
        left = [len(numbers) for _, numbers in work]
        try:
            for batch in render_documents(work, self.batch_size):
                for page, result in zip(batch, self._convert_rendered(batch), strict=True):
                    left[page.item] -= 1
                    if not left[page.item]:
                        work[page.item][0].close()
                    yield page.item, result
        finally:
            for document, _ in work:
                document.close()

    def _convert_rendered(self, batch: list[RenderedPage]) -> list[PageResult]:
        """Results of one batch in page order; pages that failed to render keep their error, and blank
        pages convert to empty Markdown without the model (:func:`blank_generation`)."""
        converted = iter(self._convert_batch([page for page in batch if page.inked]))
        return [next(converted) if page.inked else page.unread_result() for page in batch]

    def _convert_batch(self, batch: list[RenderedPage]) -> list[PageResult]:
        """Generate a batch (a failed batch is retried page by page by the driver's ``run_batch``), then
        the pages cut short (at the token limit or by the loop guard) again with sampling,
        ``retry_truncated`` times at most."""
        if not batch:
            return []
        outcomes = self.driver().run_batch([Page(page.image) for page in batch])
        temperatures = [0.0] * len(batch)
        for attempt in range(1, self.retry_truncated + 1):
            cut = [
                i for i, outcome in enumerate(outcomes) if cut_short(getattr(outcome, "finish_reason", None))
            ]
            if not cut:
                break
            temperature = retry_temperature(attempt)
            retried = self.driver(temperature).run_batch([Page(batch[i].image) for i in cut])
            for index, outcome in zip(cut, retried, strict=True):
                if getattr(outcome, "finish_reason", None) == STOP:
                    outcomes[index], temperatures[index] = outcome, temperature
        return [
            PageResult(
                page.source, page.number, seconds=page.seconds, error=f"{type(outcome).__name__}: {outcome}"
            )
            if isinstance(outcome, Exception)
            else PageResult.converted(page.source, page.number, outcome, page.seconds, temperature)
            for page, outcome, temperature in zip(batch, outcomes, temperatures, strict=True)
        ]


def convert(
    source: str | os.PathLike | bytes,
    pages: PagesArgument = None,
    model: str | os.PathLike | Converter | None = None,
    *,
    revision: str | None = None,
    password: str | None = None,
    name: str | None = None,
    device=None,
    dtype=None,
    quantize: str | None = None,
    batch_size: int | None = None,
    max_new_tokens: int | None = None,
    use_mtp: bool | None = None,
    prompt: str | None = None,
    dpi: int | None = None,
    max_pixels: int | None = None,
    mode: str | None = None,
    endpoint: str | Sequence[str] | None = None,
    served_model: str | None = None,
    api_key: str | None = None,
    concurrency: int | None = None,
    retries: int | None = None,
    retry_truncated: int | None = None,
    fetch_policy: FetchPolicy | None = None,
) -> Iterator[PageResult]:
    """Convert a PDF or image (a path, bytes or an http(s) URL) to Markdown, yielding a
    :class:`PageResult` per page.

    ``pages`` selects pages (``"1-3,7,10-"``, a list of numbers, or None for all). ``model`` is a model
    folder, a :class:`Converter` to reuse, or None for the default (see :func:`resolve_model`); a folder
    is loaded once and cached for the next call with the same folder, device, dtype and ``quantize``
    ("int8" or "int4": the decoder's weights, see :mod:`jina_ocr.quantization`). Whole-document
    problems raise :class:`~jina_ocr.runtime.documents.DocumentError` here; page problems come back as results
    with ``error`` set. Options left as None use the converter's values.

    With ``endpoint`` (one OpenAI ``base_url`` or several) pages are sent to those servers instead
    (see :mod:`jina_ocr.services.endpoints`); the options that belong to the server are refused.
    ``retry_truncated`` N generates pages cut short again with sampling, up to N times (see
    :attr:`Converter.retry_truncated`).

    A URL (``scheme://...``) is fetched first, within ``fetch_policy`` (default: :class:`FetchPolicy`,
    which refuses private addresses; see :mod:`jina_ocr.services.fetch`), and named by the URL unless ``name``
    is given; a URL that cannot be fetched raises :class:`~jina_ocr.services.fetch.FetchError`.
    """
    if looks_like_url(source):
        name = name or redact_url(source)  # named by the URL, its credentials not shown
        source = fetch(source, fetch_policy)
    if endpoint is None:
        client_side = dict(
            served_model=served_model, api_key=api_key, concurrency=concurrency, retries=retries
        )
        given = [name for name, value in client_side.items() if value is not None]
        if given:
            raise UserError(f"{', '.join(given)}: only with endpoint=")
    else:
        server_side = dict(
            model=model,
            revision=revision,
            device=device,
            dtype=dtype,
            quantize=quantize,
            batch_size=batch_size,
            use_mtp=use_mtp,
            mode=mode,
        )
        given = [name for name, value in server_side.items() if value is not None]
        if given:
            raise UserError(f"{', '.join(given)}: set on the server, not with endpoint=")
    options = dict(
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        retry_truncated=retry_truncated,
        use_mtp=use_mtp,
        prompt=prompt,
        dpi=dpi,
        max_pixels=max_pixels,
        mode=mode,
    )
    if isinstance(model, Converter):
        return model.with_options(**options).convert(source, pages, password=password, name=name)
    # Opened once, before the model loads or the endpoints are asked, so that a bad file or page
    # range fails fast; the converter then takes the open document.
    document, numbers = open_selection(
        source,
        pages,
        name=name,
        password=password,
        dpi=DEFAULT_DPI if dpi is None else dpi,
        max_pixels=DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels,
    )
    try:
        if endpoint is None:
            converter = Converter.from_pretrained(
                model, revision=revision, device=device, dtype=dtype, quantize=quantize
            )
            converter = converter.with_options(**options)
            return converter.convert(document, numbers)
        given = dict(
            concurrency=concurrency,
            max_new_tokens=max_new_tokens,
            dpi=dpi,
            max_pixels=max_pixels,
            retry_truncated=retry_truncated,
        )
        remote = EndpointConverter(
            endpoint,
            served_model=served_model,
            api_key=api_key,
            policy=RetryPolicy() if retries is None else RetryPolicy(retries=retries),
            prompt=prompt,
            **{key: value for key, value in given.items() if value is not None},
        )
    except BaseException:
        document.close()
        raise
    try:
        results = remote.convert(document, numbers)
    except BaseException:
        remote.close()
        raise
    return closing_stream(remote, results)
