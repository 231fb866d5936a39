"""``jina-ocr serve``: an OpenAI-compatible HTTP server (FastAPI on uvicorn) around one loaded model.

Endpoints:

- ``POST /v1/chat/completions``: OpenAI chat format. The last user message carries one or more
  ``image_url`` parts as ``data:`` URLs (each image, or each page of a PDF sent the same way, is one
  page) and optionally text parts, which replace the default transcription prompt. ``max_tokens``
  (or ``max_completion_tokens``) limits tokens per page. With ``"stream": true`` the answer comes as
  server-sent events, one content chunk per page as it finishes (the model is batched across
  requests, which per-token streaming would prevent). Sampling parameters are ignored: decoding is
  greedy. System messages are ignored: the model knows one instruction. A ``model`` that is not
  the one ``/v1/models`` lists is a 404; a request may leave it out. With several pages each page
  starts with ``<!-- page N -->``, numbered 1 to n through the request (as ``jina-ocr convert``
  marks the pages of a document); a one-page answer is the page's text alone, as the model's own
  API answers, which ``jina-ocr convert --endpoint`` (one page per request) relies on. With
  ``"logprobs": true`` the choice (each page's chunk, when streamed) carries ``logprobs.content``:
  every generated token (end token included) with its log-probability under the model's raw logits,
  as OpenAI's format has it, with empty ``top_logprobs``. ``finish_reason`` is ``length`` when a page
  ran to its token limit (a loop included), else ``stop``.
- ``POST /v1/documents``: multipart upload of a PDF (or image) as ``file``, with optional form
  fields ``pages`` (``1-3,7,10-``), ``password``, ``prompt`` and ``max_tokens``; answers
  ``{"source", "pages": [{"page", "markdown", "tokens", "seconds", "finish_reason", "confidence",
  "mean_logprob", "min_logprob", "temperature", "fastmtp", "error"}]}`` as ``jina-ocr convert --format json`` does
  (docs/output.md), a page that fails carrying its ``error`` (a page over the pixel limit is refused
  with 413 before any work, as on chat).
- ``GET /{url}`` (with ``--allow-urls``), e.g. ``GET /https://example.org/report.pdf``: the document
  at that URL, fetched within limits (see :mod:`jina_ocr.services.fetch`). An optional ``X-Page`` header
  selects pages (``3``, ``2-5``, ``1,4``). The answer is the Markdown of ``jina-ocr convert``
  (``text/markdown``), or with ``Accept: application/json`` the JSON of ``/v1/documents``.
- ``GET /health`` and ``GET /v1/models``.

With an API key (``--api-key``) every endpoint but ``/health`` answers 401 unless the request
carries ``Authorization: Bearer KEY``. A URL is shown (in errors, ``source`` and the access log)
with its credentials redacted.

Pages from all requests go through one queue; a worker thread takes up to ``batch_size`` pages that
share a prompt and runs them as one ``generate`` call through the batch driver
(:mod:`jina_ocr.runtime.batching`). A request is answered as soon as its own pages are done, while the batch goes
on with the others; a request whose client hangs up is cancelled, and its pages stop generating
within a step (or never start). Each request keeps at most ``batch_size`` rendered pages in flight,
so a long PDF does not fill memory. Limits (body size, pages per request, page pixels, queued pages)
are answered with 4xx and an OpenAI-style error body. Without ``--allow-urls`` image URLs other than
``data:`` are refused and the server fetches nothing; with it, ``http(s)`` image URLs are fetched too,
and the documents one request brings, uploaded or fetched, add up to at most the request body limit.
A URL that is refused or too large is a 400 or 413, a server that cannot be reached or answers with
an error a 502, one that is too slow a 504.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import dataclasses
import functools
import hmac
import json
import logging
import queue
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated

import h11
import uvicorn
from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from PIL import Image
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from jina_ocr.errors import UserError
from jina_ocr.runtime.batching import Cancelled, Generation, Page
from jina_ocr.runtime.confidence import STOP
from jina_ocr.runtime.documents import (
    SERVER_MAX_PIXELS,
    Document,
    DocumentError,
    PixelLimitError,
    is_blank,
    open_document,
)
from jina_ocr.runtime.results import PageResult, blank_generation
from jina_ocr.services.conversion import PAGE_MARKER, Converter, document_markdown, document_record
from jina_ocr.services.fetch import (
    BodyTooLarge,
    FetchCancel,
    FetchError,
    FetchPolicy,
    FetchTimeout,
    RefusedURL,
    UpstreamError,
    fetch,
    looks_like_url,
    redact_url,
)

DISCONNECT_POLL_SECONDS = 0.2
"""How often a request waiting for its pages checks that its client is still connected."""

CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client hung up (nginx's convention); nobody receives it."""


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; everything beyond is answered with a 4xx and a message."""

    max_request_bytes: int = 32 * 1024 * 1024
    max_pages: int = 64
    max_pixels: int = SERVER_MAX_PIXELS
    max_queued_pages: int = 512


@dataclass(frozen=True)
class Connections:
    """How many connections the HTTP server holds and for how long, so that clients that open many,
    or send a request slowly or never finish it, cannot take the server from everyone else.

    A connection over ``max_connections`` open ones is answered 503 and closed as soon as it is
    accepted, so that a flood of connections costs the server a file descriptor for an instant, not
    until its requests come. A connection whose request line and headers are not all in
    ``header_seconds`` after it opened (or after its last answer) is closed, so half-sent requests
    cannot hold those places, and so is one whose body is not whole ``body_seconds`` after that; an idle
    kept-alive one is closed after ``keep_alive_seconds``; request headers over ``max_header_bytes``
    are a 400.
    """

    max_connections: int = 256
    header_seconds: float = 10.0
    keep_alive_seconds: int = 5
    max_header_bytes: int = 64 * 1024
    body_seconds: float = 120.0


_FULL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol with deadlines for each request's headers and body, which uvicorn lacks
    (its keep-alive timeout starts only after an answer, so a connection that sends a header or body
    byte now and then would stay open for ever), and a cap on open connections at accept time (its
    ``limit_concurrency`` answers 503 only once a request has come whole)."""

    def __init__(self, *args, header_seconds: float, body_seconds: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.header_seconds = header_seconds
        self.body_seconds = body_seconds
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if self.limit_concurrency is not None and len(self.connections) > self.limit_concurrency:
            transport.write(_FULL)
            transport.close()
            return
        self._start_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._start_header_timer()

    def connection_lost(self, exc) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _start_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self.header_seconds, self._close_if_no_request)

    def _close_if_no_request(self) -> None:
        """Close the connection if the client's request headers have still not come whole (h11 sees the
        client IDLE until the request line and every header arrived); give a body that is on its way
        ``body_seconds`` more."""
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE:
            self.transport.close()
        elif self.conn.their_state is h11.SEND_BODY:
            self._header_timer = self.loop.call_later(self.body_seconds, self._close_if_body_unfinished)

    def _close_if_body_unfinished(self) -> None:
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self.transport.close()


class _RedactedAccessLog(logging.Filter):
    """Credentials in a ``GET /{url}`` path are redacted in uvicorn's access log, as everywhere else."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_url(arg) if isinstance(arg, str) else arg for arg in record.args)
        return True


_REDACTED_ACCESS_LOG = _RedactedAccessLog()


class RequestError(HTTPException):
    """A request the client must change, with the HTTP status that says how (400, 413, 429)."""


class _BodyTooLarge(BaseException):
    """Raised from ``receive`` when a streamed body passes the limit. A BaseException so that body
    parsers which turn any Exception into "400 error parsing the body" let it reach :class:`BodyLimit`."""


def _error_body(status: int, message: str) -> dict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


class BodyLimit:
    """ASGI middleware refusing bodies over ``max_bytes`` with 413, by header or while streaming.

    A declared ``Content-Length`` over the limit is refused before the body is read; a chunked body is
    counted as it arrives, so neither form can make the server buffer more than the limit.
    """

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        message = f"request body over the limit of {self.max_bytes:,} bytes"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await JSONResponse(_error_body(413, message), status_code=413)(scope, receive, send)
        received = 0
        started = False

        async def counting_receive():
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return event

        async def tracking_send(event):
            nonlocal started
            started = started or event["type"] == "http.response.start"
            await send(event)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if started:
                raise
            await JSONResponse(_error_body(413, message), status_code=413)(scope, receive, send)


class ApiKey:
    """ASGI middleware answering 401 to any request but ``GET /health`` that lacks ``Authorization:
    Bearer KEY``. It sits outside the other middleware so that a stranger's body is never read; the
    key is compared in constant time so that timing does not reveal how much of a guess was right."""

    def __init__(self, app, key: str):
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] == "/health":
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        message = "missing or wrong API key: send the header Authorization: Bearer <key>"
        response = JSONResponse(
            _error_body(401, message), status_code=401, headers={"WWW-Authenticate": "Bearer"}
        )
        await response(scope, receive, send)


@dataclass
class _Job:
    image: Image.Image
    prompt: str | None
    max_new_tokens: int
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Give the page up: dropped if it is still queued, stopped at the next step if it is running."""
        self.cancelled.set()
        self.future.cancel()

    def settle(self, outcome: Generation | Exception) -> None:
        """The driver's ``done`` callback, called on the worker thread as soon as the page is done."""
        if not self.future.done():
            if isinstance(outcome, Exception):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)


class BatchQueue:
    """Pages from concurrent requests, batched into ``generate`` calls by one worker thread.

    The worker takes the oldest page, waits up to ``wait_seconds`` for more, and runs up to
    ``batch_size`` pages with the same prompt together (the processor takes one prompt per batch);
    pages with another prompt wait for the next batch, in arrival order. One thread owns the model,
    which is not safe to call concurrently. The converter's batch driver runs each batch: it resolves
    a page's future as soon as the page is done, skips and stops cancelled pages, and retries a failed
    batch page by page. ``tokens`` counts the tokens generated so far, ``cancelled`` the pages given
    up before they were done.
    """

    def __init__(self, converter: Converter, batch_size: int, wait_seconds: float, max_queued: int):
        self.driver = converter.with_options(progress=self._count_tokens).driver()
        self.batch_size = batch_size
        self.wait_seconds = wait_seconds
        self.max_queued = max_queued
        self.batches = 0
        self.largest_batch = 0
        self.pages = 0
        self.tokens = 0
        self.cancelled = 0
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._waiting: deque[_Job] = deque()
        self._thread = threading.Thread(target=self._work, name="jina-ocr-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join()

    @property
    def queued(self) -> int:
        return self._jobs.qsize() + len(self._waiting)

    def submit(self, image: Image.Image, prompt: str | None, max_new_tokens: int) -> _Job:
        if self.queued >= self.max_queued:
            raise RequestError(429, f"server busy: {self.queued} pages are queued; retry later")
        job = _Job(image, prompt, max_new_tokens)
        self._jobs.put(job)
        return job

    def _count_tokens(self, count: int) -> None:
        self.tokens += count

    def _next(self, timeout: float | None) -> _Job | None:
        if self._waiting:
            return self._waiting.popleft()
        return self._jobs.get(timeout=timeout)

    def _work(self) -> None:
        while True:
            first = self._next(None)
            if first is None:
                return
            batch = [first]
            passed_over: list[_Job] = []
            deadline = time.monotonic() + self.wait_seconds
            stopping = False
            while len(batch) < self.batch_size:
                try:
                    job = self._next(max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    break
                (batch if job.prompt == first.prompt else passed_over).append(job)
            self._waiting.extendleft(reversed(passed_over))
            running = [job for job in batch if job.future.set_running_or_notify_cancel()]
            self.cancelled += len(batch) - len(running)
            self._run(running)
            if stopping:
                self._jobs.put(None)

    def _run(self, batch: list[_Job]) -> None:
        if not batch:
            return
        pages = [Page(job.image, job.max_new_tokens, job.cancelled.is_set, job.settle) for job in batch]
        outcomes = self.driver.run_batch(pages, batch[0].prompt)
        self.batches += 1
        self.pages += len(batch)
        self.largest_batch = max(self.largest_batch, len(batch))
        self.cancelled += sum(isinstance(outcome, Cancelled) for outcome in outcomes)


class ClientGone(Exception):
    """The client of a request hung up while it waited for its pages."""


@dataclass
class _Page:
    """One page of a request: its document, its number and how long it took to render."""

    document: Document
    number: int
    render_seconds: float = 0.0


_FETCH_STATUS = ((BodyTooLarge, 413), (FetchTimeout, 504), (UpstreamError, 502), (RefusedURL, 400))
"""The HTTP status of each way a fetch fails: the client's URL is refused (400) or too large (413);
the server behind it failed (502) or was too slow (504)."""


FETCH_THREADS = 16
"""Fetches that run at once; more wait their turn. They have threads of their own: in the threads that
render every request's pages, 45 fetches of servers that trickle their answers stalled everyone."""


class OCRService:
    """The request-independent state of a server: the converter, its queue, the limits, and the fetch
    policy (None: URLs are refused) with the threads its fetches run in."""

    def __init__(
        self,
        converter: Converter,
        model_id: str,
        limits: Limits,
        batch_wait_seconds: float,
        fetching: FetchPolicy | None = None,
    ):
        self.converter = converter
        self.model_id = model_id
        self.limits = limits
        self.fetching = fetching
        self.fetchers = ThreadPoolExecutor(FETCH_THREADS, "jina-ocr-fetch") if fetching is not None else None
        self.queue = BatchQueue(converter, converter.batch_size, batch_wait_seconds, limits.max_queued_pages)
        self.created = int(time.time())

    def max_new_tokens(self, value, field: str = "max_tokens") -> int:
        """The client's token limit, capped at the server's; None means the server's."""
        if value is None:
            return self.converter.max_new_tokens
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RequestError(400, f"{field} must be a positive integer, not {value!r}")
        return min(value, self.converter.max_new_tokens)

    def open(self, data: bytes, name: str, password: str | None = None) -> Document:
        try:
            return open_document(
                data, name=name, password=password, dpi=self.converter.dpi, max_pixels=self.limits.max_pixels
            )
        except PixelLimitError as error:
            raise RequestError(413, str(error)) from None
        except DocumentError as error:
            raise RequestError(400, str(error)) from None

    async def fetch(self, url: str, budget: int, request: Request) -> bytes:
        """The document at ``url``, at most ``budget`` bytes, fetched in a worker thread so that the
        event loop keeps serving; a failure is a :class:`RequestError` with its status. The fetch stops
        when the client hangs up (and when this request is cancelled), not at its deadline."""
        if budget < 1:
            raise RequestError(
                413,
                f"{redact_url(url)}: the documents of this request already fill the limit of "
                f"{self.limits.max_request_bytes:,} bytes",
            )
        policy = dataclasses.replace(self.fetching, max_bytes=budget)
        cancel = FetchCancel()
        work = asyncio.get_running_loop().run_in_executor(self.fetchers, fetch, url, policy, cancel)
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=DISCONNECT_POLL_SECONDS)
                if not work.done() and await request.is_disconnected():
                    cancel.cancel()
            return work.result()
        except FetchError as error:
            status = next((code for kind, code in _FETCH_STATUS if isinstance(error, kind)), 502)
            raise RequestError(status, str(error)) from None
        finally:
            cancel.cancel()

    async def convert(
        self,
        request: Request,
        document: Document,
        numbers: list[int],
        prompt: str | None,
        max_new_tokens: int,
    ) -> list[PageResult]:
        """The results of pages of an open document in page order, a failed page carrying its error;
        raises :class:`ClientGone` (its pages cancelled) when the client of ``request`` hangs up."""
        results = []
        pages = [_Page(document, n) for n in numbers]
        async with aclosing(
            self.run_pages(request, pages, prompt, max_new_tokens, blank_pages_empty=True)
        ) as outcomes:
            async for page, outcome in outcomes:
                if isinstance(outcome, Generation):
                    results.append(
                        PageResult.converted(document.source, page.number, outcome, page.render_seconds)
                    )
                else:
                    reason = (
                        outcome.reason
                        if isinstance(outcome, DocumentError)
                        else f"{type(outcome).__name__}: {outcome}"
                    )
                    results.append(
                        PageResult(document.source, page.number, seconds=page.render_seconds, error=reason)
                    )
        return results

    def select(self, document: Document, pages: str | None) -> list[int]:
        """The pages a selection names, within the page limit; a bad selection is a 400."""
        try:
            numbers = document.select(pages)
        except UserError as error:  # a malformed selection or a page out of range
            raise RequestError(400, str(error)) from None
        self.check_page_count(len(numbers))
        self.refuse_oversized_pages(document, numbers)
        return numbers

    def check_model(self, model) -> None:
        """A request may name the served model or none; another name is a 404, as OpenAI answers."""
        if model is not None and model != self.model_id:
            raise RequestError(
                404, f"model {model!r} is not served here; this server serves {self.model_id!r}"
            )

    def check_page_count(self, count: int) -> None:
        if count > self.limits.max_pages:
            raise RequestError(
                413,
                f"{count} pages in one request, over the limit of {self.limits.max_pages}; send fewer pages",
            )

    def refuse_oversized_pages(self, document: Document, numbers: list[int]) -> None:
        """413 for a request holding a page over the pixel limit, from page sizes alone, before any work
        (a page broken in another way is left to fail on its own, as that page's error)."""
        for number in numbers:
            try:
                document.check_page(number)
            except PixelLimitError as error:
                raise RequestError(413, str(error)) from None
            except DocumentError:
                continue

    async def run_pages(
        self,
        request: Request,
        pages: list[_Page],
        prompt: str | None,
        max_new_tokens: int,
        blank_pages_empty: bool = False,
    ) -> AsyncIterator[tuple[_Page, Generation | Exception]]:
        """Render and convert pages in order, keeping at most ``batch_size`` of this request in flight.

        Raises :class:`ClientGone` when the client hangs up; however this ends (answered, failed,
        client gone), the pages still queued or running are cancelled. With ``blank_pages_empty`` (the
        document endpoints, as ``jina-ocr convert``) a page without ink is answered by
        :func:`blank_generation` without the model; chat completions run the model on every image they
        are sent, as the model's own API.
        """
        window: deque[tuple[_Page, _Job | Generation | Exception]] = deque()

        async def oldest() -> tuple[_Page, Generation | Exception]:
            outcome = await _settle(request, *window[0])  # still in the window, cancelled if this ends
            window.popleft()
            return outcome

        try:
            for page in pages:
                if len(window) >= self.converter.batch_size:
                    yield await oldest()
                start = time.perf_counter()
                try:
                    image = await run_in_threadpool(page.document.render, page.number)
                except DocumentError as error:
                    window.append((page, error))
                    continue
                finally:
                    page.render_seconds = time.perf_counter() - start
                if blank_pages_empty and await run_in_threadpool(is_blank, image):
                    window.append((page, blank_generation()))
                else:
                    window.append((page, self.queue.submit(image, prompt, max_new_tokens)))
                del image
            while window:
                yield await oldest()
        finally:
            for _, pending in window:
                if isinstance(pending, _Job):
                    pending.cancel()


async def _settle(
    request: Request, page: _Page, pending: _Job | Generation | Exception
) -> tuple[_Page, Generation | Exception]:
    """The page's outcome once its job is done, checking meanwhile that the client is still there."""
    if not isinstance(pending, _Job):
        return page, pending
    waiter = asyncio.wrap_future(pending.future)
    while not (await asyncio.wait({waiter}, timeout=DISCONNECT_POLL_SECONDS))[0]:
        if await request.is_disconnected():
            waiter.cancel()  # nobody will read the outcome
            raise ClientGone
    try:
        return page, waiter.result()
    except Exception as error:
        return page, error


def _data_url_bytes(url: str, where: str) -> bytes:
    """The bytes of a ``data:`` URL; any other URL is refused as this server does not fetch it."""
    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else "no scheme"
        raise RequestError(
            400,
            f"{where}: only data: URLs are accepted (got {scheme!r}); this server never fetches remote "
            "URLs, send the image inline as data:image/png;base64,...",
        )
    header, sep, payload = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        raise RequestError(400, f"{where}: a data: URL must be base64 encoded (data:<type>;base64,<data>)")
    try:
        data = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, f"{where}: the data: URL does not hold valid base64") from None
    if not data:
        raise RequestError(400, f"{where}: the data: URL is empty")
    return data


def _chat_inputs(body, fetch_urls: bool = False) -> tuple[list[tuple[bytes | str, str]], str | None]:
    """Images (bytes, where) and the prompt from the last user message of an OpenAI chat request.

    With ``fetch_urls`` an image that is not a ``data:`` URL comes back as its URL, to be fetched
    (which refuses what is not http or https).
    """
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list")
    users = [(i, m) for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise RequestError(400, "messages has no user message")
    index, message = users[-1]
    content = message.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(parts, list):
        raise RequestError(400, f"messages[{index}].content must be a string or a list of parts")
    images, texts = [], []
    for position, part in enumerate(parts):
        where = f"messages[{index}].content[{position}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            if part["text"].strip():
                texts.append(part["text"].strip())
        elif kind == "image_url":
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str):
                raise RequestError(400, f"{where}.image_url.url must be a string")
            fetched = fetch_urls and not url.startswith("data:")
            images.append((url if fetched else _data_url_bytes(url, where), where))
        else:
            raise RequestError(400, f"{where}: unsupported part; use text and image_url parts")
    if not images:
        raise RequestError(400, f"messages[{index}] has no image: add an image_url part with a data: URL")
    return images, "\n".join(texts) or None


def create_app(
    converter: Converter,
    model_id: str,
    limits: Limits | None = None,
    batch_wait_seconds: float = 0.01,
    fetching: FetchPolicy | None = None,
    api_key: str | None = None,
) -> FastAPI:
    """The ASGI application; the batching worker runs while the application's lifespan does.

    ``fetching`` allows documents by URL (``GET /{url}`` and http(s) image URLs) within that policy;
    its ``max_bytes`` is replaced by what is left of the request body limit. With ``api_key`` every
    endpoint but ``/health`` needs ``Authorization: Bearer <api_key>``.
    """
    service = OCRService(converter, model_id, limits or Limits(), batch_wait_seconds, fetching)

    @asynccontextmanager
    async def lifespan(app):
        service.queue.start()
        try:
            yield
        finally:
            service.queue.stop()
            if service.fetchers is not None:
                service.fetchers.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="jina-ocr", lifespan=lifespan)
    app.state.service = service
    app.add_middleware(BodyLimit, max_bytes=service.limits.max_request_bytes)
    if api_key is not None:
        app.add_middleware(ApiKey, key=api_key)  # added last: the outermost, before any body is read

    @app.exception_handler(HTTPException)
    async def http_error(request, error: HTTPException):
        return JSONResponse(_error_body(error.status_code, str(error.detail)), status_code=error.status_code)

    @app.exception_handler(ClientGone)
    @app.exception_handler(ClientDisconnect)
    async def client_gone(request, error: Exception):
        """A client that hung up, waiting for its pages or halfway through sending its body: nobody
        to answer, and nothing to log but the access line (not a traceback per half-sent request)."""
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, error: RequestValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in error.errors()
        )
        return JSONResponse(_error_body(400, problems or "invalid request"), status_code=400)

    @app.get("/health")
    async def health():
        queue_ = service.queue
        return {
            "status": "ok",
            "model": service.model_id,
            "queued_pages": queue_.queued,
            "batches": queue_.batches,
            "pages": queue_.pages,
            "largest_batch": queue_.largest_batch,
            "generated_tokens": queue_.tokens,
            "cancelled_pages": queue_.cancelled,
        }

    @app.get("/v1/models")
    async def models():
        entry = {
            "id": service.model_id,
            "object": "model",
            "created": service.created,
            "owned_by": "jina-ocr",
        }
        return {"object": "list", "data": [entry]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError(400, "the request body is not valid JSON") from None
        except RecursionError:
            raise RequestError(400, "the request body is JSON nested too deeply") from None
        images, prompt = _chat_inputs(body, fetch_urls=service.fetching is not None)
        service.check_model(body.get("model"))
        stream_options = body.get("stream_options")
        if stream_options is not None and not isinstance(stream_options, dict):
            raise RequestError(400, f"stream_options must be an object, not {type(stream_options).__name__}")
        limit = service.max_new_tokens(
            body.get("max_completion_tokens", body.get("max_tokens")),
            "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens",
        )
        if not isinstance(body.get("logprobs", False), bool):
            raise RequestError(400, f"logprobs must be true or false, not {body['logprobs']!r}")
        tokenizer = service.converter.processor.tokenizer if body.get("logprobs") else None
        service.check_page_count(len(images))  # each image is a page at least: refuse before fetching
        documents: list[Document] = []
        try:
            budget = service.limits.max_request_bytes
            for image, where in images:
                if isinstance(image, str):
                    data = await service.fetch(image, budget, request)
                    budget -= len(data)
                    documents.append(service.open(data, f"{where} ({redact_url(image)})"))
                else:
                    documents.append(service.open(image, where))
            pages = [_Page(d, n) for d in documents for n in range(1, d.page_count + 1)]
            service.check_page_count(len(pages))
            for page in pages:  # refuse oversized and empty pages before any work, from their headers
                page.document.check_page(page.number)
        except PixelLimitError as error:
            _close(documents)
            raise RequestError(413, str(error)) from None
        except DocumentError as error:
            _close(documents)
            raise RequestError(400, str(error)) from None
        except BaseException:
            _close(documents)
            raise
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if body.get("stream"):
            include_usage = bool((stream_options or {}).get("include_usage"))
            stream = _chat_stream(
                service,
                request,
                pages,
                documents,
                prompt,
                limit,
                completion_id,
                created,
                include_usage,
                tokenizer,
            )
            return StreamingResponse(stream, media_type="text/event-stream")
        try:
            texts, prompt_tokens, tokens, truncated, logprobs = [], 0, 0, False, []
            async with aclosing(service.run_pages(request, pages, prompt, limit)) as outcomes:
                async for _, outcome in outcomes:
                    if isinstance(outcome, DocumentError):
                        raise RequestError(400, str(outcome))
                    if isinstance(outcome, Exception):
                        raise outcome
                    texts.append(_chat_page_text(outcome.markdown, len(texts) + 1, len(pages)))
                    prompt_tokens += outcome.prompt_tokens
                    tokens += outcome.tokens
                    truncated |= outcome.finish_reason != STOP
                    logprobs += _token_logprobs(tokenizer, outcome)
        finally:
            _close(documents)
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": service.model_id,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "\n\n".join(texts)},
                    "logprobs": {"content": logprobs} if tokenizer is not None else None,
                    "finish_reason": "length" if truncated else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": tokens,
                "total_tokens": prompt_tokens + tokens,
            },
        }

    @app.post("/v1/documents")
    async def documents(
        request: Request,
        file: Annotated[UploadFile, File(description="the PDF or image")],
        pages: Annotated[str | None, Form(description="pages to convert, e.g. 1-3,7,10-")] = None,
        password: Annotated[str | None, Form()] = None,
        prompt: Annotated[str | None, Form()] = None,
        max_tokens: Annotated[int | None, Form()] = None,
    ):
        data = await file.read()
        name = file.filename or "upload"
        prompt = (prompt or "").strip() or None  # an empty form field means the default prompt
        limit = service.max_new_tokens(max_tokens)
        document = service.open(data, name, password)
        try:
            results = await service.convert(request, document, service.select(document, pages), prompt, limit)
        finally:
            _close([document])
        return document_record(name, results)

    if service.fetching is not None:
        # Only paths whose first segment holds a colon ("https:"): the other routes keep their 404/405.
        @app.get("/{scheme}:{rest:path}")
        async def document_by_url(request: Request):
            url = _requested_url(request)
            data = await service.fetch(url, service.limits.max_request_bytes, request)
            shown = redact_url(url)
            document = service.open(data, shown)
            try:
                numbers = service.select(document, request.headers.get("x-page"))
                limit = service.max_new_tokens(None)
                results = await service.convert(request, document, numbers, None, limit)
            finally:
                _close([document])
            if _wants_json(request.headers.get("accept")):
                return document_record(shown, results)
            return Response(document_markdown(results), media_type="text/markdown")

    return app


def _requested_url(request: Request) -> str:
    """The URL of ``GET /{url}`` as the client wrote it: the raw path after the first slash (still
    percent-encoded) and the query string, which belongs to that URL. A proxy that merged the slashes
    of ``https://`` into one is undone."""
    path = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1")[1:]
    query = request.scope.get("query_string", b"").decode("latin-1")
    url = re.sub(r"^(https?):/(?!/)", r"\1://", path, flags=re.IGNORECASE)
    if not looks_like_url(url):
        raise RequestError(400, f"{redact_url(url)}: not a URL; ask for GET /https://host/path")
    return f"{url}?{query}" if query else url


def _wants_json(accept: str | None) -> bool:
    """Whether the Accept header names application/json before any text/markdown."""
    for media_type in (accept or "").split(","):
        kind = media_type.split(";")[0].strip().lower()
        if kind in ("application/json", "text/markdown"):
            return kind == "application/json"
    return False


def _chat_page_text(markdown: str, position: int, page_count: int) -> str:
    """The text of the request's page ``position`` (1 to ``page_count``, through all its images and
    documents) in a chat answer: with several pages it starts with the page marker of ``jina-ocr
    convert``; one page is its text alone, as the model's own API answers."""
    if page_count == 1:
        return markdown
    return f"{PAGE_MARKER.format(page=position)}\n\n{markdown}"


def _token_logprobs(tokenizer, generation: Generation) -> list[dict]:
    """A page's tokens in OpenAI's ``logprobs.content`` form (nothing when ``tokenizer`` is None, i.e. the
    request did not ask for them)."""
    if tokenizer is None:
        return []
    entries = []
    for token_id, logprob in zip(generation.token_ids, generation.logprobs, strict=True):
        text = tokenizer.decode([token_id])
        entries.append({"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []})
    return entries


def _close(documents: list[Document]) -> None:
    for document in documents:
        document.close()


def _sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


async def _chat_stream(
    service: OCRService,
    request: Request,
    pages: list[_Page],
    documents: list[Document],
    prompt: str | None,
    limit: int,
    completion_id: str,
    created: int,
    include_usage: bool,
    tokenizer=None,
) -> AsyncIterator[bytes]:
    """Server-sent events in OpenAI's chunk format: a role chunk, one content chunk per page, a finish
    chunk, optionally a usage chunk, then ``[DONE]``. A failure after the headers went out is sent as
    an ``error`` event, which OpenAI clients raise. A client that hangs up ends the stream and
    cancels its pages. With ``tokenizer`` each page's chunk carries its tokens' ``logprobs``."""

    def chunk(delta: dict, finish_reason: str | None = None, logprobs: list | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        if logprobs is not None:
            choice["logprobs"] = {"content": logprobs}
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": service.model_id,
            "choices": [choice],
        }

    prompt_tokens = tokens = 0
    truncated = False
    try:
        yield _sse(chunk({"role": "assistant", "content": ""}))
        position = 0
        async with aclosing(service.run_pages(request, pages, prompt, limit)) as outcomes:
            async for _, outcome in outcomes:
                if isinstance(outcome, Exception):
                    status = 400 if isinstance(outcome, DocumentError) else 500
                    yield _sse(_error_body(status, str(outcome)))
                    return
                position += 1
                text = _chat_page_text(outcome.markdown, position, len(pages))
                logprobs = _token_logprobs(tokenizer, outcome) if tokenizer is not None else None
                yield _sse(chunk({"content": text if position == 1 else "\n\n" + text}, logprobs=logprobs))
                prompt_tokens += outcome.prompt_tokens
                tokens += outcome.tokens
                truncated |= outcome.finish_reason != STOP
        yield _sse(chunk({}, "length" if truncated else "stop"))
        if include_usage:
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": tokens,
                "total_tokens": prompt_tokens + tokens,
            }
            yield _sse({**chunk({}), "choices": [], "usage": usage})
        yield _sse("[DONE]")
    except ClientGone:
        return
    finally:
        _close(documents)


def server_config(
    app, host: str = "127.0.0.1", port: int = 8000, connections: Connections | None = None, log_level="info"
) -> uvicorn.Config:
    """uvicorn's configuration of ``app`` within the limits of ``connections``."""
    connections = connections or Connections()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=functools.partial(
            HeaderDeadline, header_seconds=connections.header_seconds, body_seconds=connections.body_seconds
        ),
        limit_concurrency=connections.max_connections,
        timeout_keep_alive=connections.keep_alive_seconds,
        h11_max_incomplete_event_size=connections.max_header_bytes,
    )
    logging.getLogger("uvicorn.access").addFilter(_REDACTED_ACCESS_LOG)  # after uvicorn set its logging up
    return config


def serve(
    converter: Converter,
    model_id: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: Limits | None = None,
    batch_wait_seconds: float = 0.01,
    fetching: FetchPolicy | None = None,
    api_key: str | None = None,
    connections: Connections | None = None,
) -> None:
    """Run the server until interrupted."""
    app = create_app(converter, model_id, limits, batch_wait_seconds, fetching, api_key)
    uvicorn.Server(server_config(app, host, port, connections)).run()
