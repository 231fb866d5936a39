"""Converting through OpenAI-compatible endpoints: vLLM replicas, ``jina-ocr serve`` processes, or any
server that answers chat completions with images.

Pages are opened and rendered here exactly as in a local run (:mod:`jina_ocr.runtime.documents`), and each
page is sent as a lossless PNG ``data:`` image in its own chat completion by one of ``concurrency``
worker threads. Results come back per document in page order as :class:`PageResult` objects, so the
code that writes a local run's outputs writes these too. Memory holds a window of at most
``4 * concurrency`` pages: at most ``concurrency`` request bodies and one bitmap per rendering thread
(as many as CPU cores, at most ``concurrency``), whatever the number of pages and documents.

A batch job meets busy and failing servers, so every request is retried (:class:`RetryPolicy`): 429,
5xx, timeouts and refused or dropped connections are retried with full-jitter exponential backoff,
honouring ``Retry-After``; other answers (400, 404, 413, 422, ...) are final for the page. Each retry
goes to the endpoint with the fewest requests in flight, and an endpoint that fails several times in
a row rests for a cool-down while the others take its pages. A page that still fails becomes a
failed page, never a lost one.

Every request asks for the log-probability of each token and of the model's first choice there
(``logprobs``, ``top_logprobs: 1``), from which a page's confidence is computed as for a local run
(:mod:`jina_ocr.runtime.confidence`); an answer without them leaves the confidence unknown (None). Its
``finish_reason`` is the server's ``stop`` or ``length``, ``length`` becoming ``loop`` when a token
was not the model's first choice (the server's loop guard banned it; vLLM reports log-probabilities
of the raw logits, before its logits processors).
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import io
import os
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
from PIL import Image

from jina_ocr.errors import UserError
from jina_ocr.generation_defaults import (
    DEFAULT_MAX_NEW_TOKENS,
    LOOP_GUARD_NGRAM_SIZE,
    LOOP_GUARD_WINDOW,
    REAL_EXEMPT_TOKEN_IDS,
)
from jina_ocr.runtime import render_worker
from jina_ocr.runtime.batching import Generation
from jina_ocr.runtime.checks import positive_int
from jina_ocr.runtime.confidence import LENGTH, STOP, cut_short, finish_reason
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

DEFAULT_CONCURRENCY = 8
DEFAULT_RETRIES = 5
DEFAULT_TIMEOUT = 600.0
"""Seconds one request may take: a dense page of the full token budget on a busy server takes minutes."""
DEFAULT_COOLDOWN = 30.0
FAILURES_BEFORE_COOLDOWN = 3

API_KEY_ENV = "OPENAI_API_KEY"

LOOP_GUARD_XARGS = {
    "ngram_size": LOOP_GUARD_NGRAM_SIZE,
    "window_size": LOOP_GUARD_WINDOW,
    "whitelist_token_ids": list(REAL_EXEMPT_TOKEN_IDS),
}
"""The released model's loop guard as vLLM's per-request n-gram processor reads it (``vllm_xargs``)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a page is retried, and when an endpoint rests.

    Retry ``k`` (0 for the first) waits a uniformly random time between 0 and
    ``min(max_delay, first_delay * 2**k)`` ("full jitter", so that many clients failing together do
    not come back together), or the endpoint's ``Retry-After`` when that is longer, up to
    ``max_delay``. ``random`` is injectable so that tests can fix the draw.
    """

    retries: int = DEFAULT_RETRIES
    first_delay: float = 1.0
    max_delay: float = 60.0
    timeout: float = DEFAULT_TIMEOUT
    cooldown: float = DEFAULT_COOLDOWN
    failures_before_cooldown: int = FAILURES_BEFORE_COOLDOWN
    random: Callable[[], float] = random.random

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        wait = self.random() * min(self.max_delay, self.first_delay * 2.0**retry)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_delay))
        return wait


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Retryable(Exception):
    """An attempt that failed in a way another attempt may not: busy, broken or unreachable server."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class _Final(Exception):
    """An answer that says the request itself is wrong (400, 404, 413, 422, ...): retrying cannot help."""


class Stopped(Exception):
    """The run was closed (Ctrl-C, or the caller stopped reading) while a page waited."""


@dataclass
class Endpoint:
    """One ``base_url`` and what the pool knows about it."""

    url: str
    in_flight: int = 0
    failures: int = 0
    """Failed attempts in a row; reset by any answer."""
    resting_until: float = 0.0
    """``time.monotonic()`` before which the endpoint is out of the rotation."""
    vllm: bool | None = None
    """Whether its ``/models`` says vLLM (which takes the loop guard as ``vllm_xargs``); None: not asked."""


def _answer_ending(choice: dict) -> tuple[list[float] | None, str | None]:
    """The token log-probabilities of an answer's choice (None when absent or not numbers), and how it
    ended (None when the server says neither ``stop`` nor ``length``)."""
    logprobs, overruled = None, False
    try:
        entries = choice["logprobs"]["content"]
        logprobs = [float(entry["logprob"]) for entry in entries] or None
        overruled = any(
            float(top["logprob"]) > logprob
            for entry, logprob in zip(entries, logprobs or (), strict=False)
            for top in entry.get("top_logprobs") or ()
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        logprobs = None
    reason = choice.get("finish_reason")
    return logprobs, finish_reason(reason == STOP, overruled) if reason in (STOP, LENGTH) else None


def _error_message(response: httpx.Response) -> str:
    """The message of an OpenAI-style error body, else the start of the body."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message
    except (ValueError, AttributeError):
        pass
    return response.text[:200].strip() or response.reason_phrase


def _transport_message(error: httpx.RequestError) -> str:
    if isinstance(error, httpx.TimeoutException):
        return f"no answer in time ({type(error).__name__})"
    if isinstance(error, httpx.ConnectError):
        return f"cannot connect ({error})"
    return f"connection lost ({type(error).__name__}: {error})"


class EndpointPool:
    """The endpoints of a run: which one takes the next request, and the requests themselves.

    The next request goes to the endpoint with the fewest requests in flight among those not resting
    (ties to the one with fewer recent failures, then to the first given). When all rest, requests
    wait for the first to come back; that wait is not a retry.
    """

    def __init__(
        self,
        urls: Sequence[str],
        policy: RetryPolicy,
        api_key: str | None = None,
        served_model: str | None = None,
    ):
        if not urls:
            raise UserError("give at least one endpoint URL")
        self.endpoints = [Endpoint(_base_url(url)) for url in urls]
        self.policy = policy
        self.served_model = served_model
        self.stop = threading.Event()
        self._lock = threading.Condition()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(policy.timeout, connect=min(10.0, policy.timeout))
        self.client = httpx.Client(
            timeout=timeout,
            headers=headers,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )

    def close(self) -> None:
        with self._lock:
            self.stop.set()
            self._lock.notify_all()
        self.client.close()

    def describe(self) -> None:
        """Ask every endpoint for its models now: the default served model is the first id of the first
        endpoint that answers (asked again with backoff while none does), and a served model that an
        answering endpoint does not serve is refused."""
        problems: dict[str, str] = {}
        for retry in range(self.policy.retries + 1):
            for endpoint in self.endpoints:
                if endpoint.vllm is not None:
                    continue
                try:
                    self._models(endpoint)
                except _Retryable as error:
                    problems[endpoint.url] = str(error)
            if self.served_model is not None or retry == self.policy.retries:
                break
            if self.stop.wait(self.policy.delay(retry)):
                raise Stopped
        if self.served_model is None:
            reasons = "; ".join(problems.values())
            raise UserError(f"no endpoint answered GET /models, so the served model is unknown: {reasons}")

    def _models(self, endpoint: Endpoint) -> None:
        url = f"{endpoint.url}/models"
        try:
            response = self.client.get(url)
        except httpx.RequestError as error:
            raise _Retryable(f"{url}: {_transport_message(error)}") from None
        if response.status_code != 200:
            raise _Retryable(f"{url}: HTTP {response.status_code}: {_error_message(response)}")
        try:
            entries = [entry for entry in response.json()["data"] if isinstance(entry.get("id"), str)]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise _Retryable(f"{url}: the answer is not a model list") from None
        ids = [entry["id"] for entry in entries]
        if self.served_model is None and ids:
            self.served_model = ids[0]
        if self.served_model is not None and self.served_model not in ids:
            raise UserError(
                f"--served-model {self.served_model}: not served by {endpoint.url} "
                f"(it serves: {', '.join(ids) or 'nothing'})"
            )
        endpoint.vllm = any(entry.get("owned_by") == "vllm" for entry in entries)

    def _acquire(self) -> Endpoint:
        with self._lock:
            while not self.stop.is_set():
                now = time.monotonic()
                ready = [e for e in self.endpoints if e.resting_until <= now]
                if ready:
                    chosen = min(ready, key=lambda e: (e.in_flight, e.failures))
                    chosen.in_flight += 1
                    return chosen
                self._lock.wait(min(e.resting_until for e in self.endpoints) - now)
        raise Stopped

    def _release(self, endpoint: Endpoint, failed: bool) -> None:
        with self._lock:
            endpoint.in_flight -= 1
            if not failed:
                endpoint.failures = 0
            else:
                endpoint.failures += 1
                if endpoint.failures >= self.policy.failures_before_cooldown:
                    endpoint.failures = 0
                    endpoint.resting_until = time.monotonic() + self.policy.cooldown
            self._lock.notify_all()

    def complete(
        self, png: bytes, prompt: str | None, max_new_tokens: int, temperature: float = 0.0
    ) -> Generation:
        """One page's chat completion (greedy, or sampled at ``temperature``), retried as the policy
        says; raises ``RuntimeError`` with the reason when the page cannot be converted, :class:`Stopped`
        when the pool closes."""
        content: list[dict] = [
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
            }
        ]
        if prompt:
            content.append({"type": "text", "text": prompt})
        body = {
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "logprobs": True,
            "top_logprobs": 1,
        }
        del content, png
        attempts = self.policy.retries + 1
        for retry in range(attempts):
            endpoint = self._acquire()
            failed = True
            try:
                answer = self._attempt(endpoint, body)
                failed = False
                return answer
            except _Final as error:
                failed = False  # the endpoint answered; the request is what is wrong
                raise RuntimeError(str(error)) from None
            except _Retryable as error:
                last = error
            finally:
                self._release(endpoint, failed)
            if retry + 1 < attempts and self.stop.wait(self.policy.delay(retry, last.retry_after)):
                raise Stopped
        raise RuntimeError(f"no answer after {attempts} attempts; the last: {last}")

    def _attempt(self, endpoint: Endpoint, body: dict) -> Generation:
        """The page as the endpoint answered it: its text, tokens and seconds, the token log-probabilities
        (None when not sent) and how it ended, in a :class:`Generation` as a local run gives them."""
        if endpoint.vllm is None:
            self._models(endpoint)
        extra = {"vllm_xargs": LOOP_GUARD_XARGS} if endpoint.vllm else {}
        url = f"{endpoint.url}/chat/completions"
        start = time.perf_counter()
        try:
            response = self.client.post(url, json={"model": self.served_model, **body, **extra})
        except httpx.RequestError as error:
            raise _Retryable(f"{url}: {_transport_message(error)}") from None
        seconds = time.perf_counter() - start
        status = response.status_code
        if status == 429 or status >= 500:
            retry_after = retry_after_seconds(response.headers.get("retry-after"))
            raise _Retryable(f"{url}: HTTP {status}: {_error_message(response)}", retry_after)
        if status != 200:
            raise _Final(f"{url}: HTTP {status}: {_error_message(response)}")
        try:
            reply = response.json()
            choice = reply["choices"][0]
            text = choice["message"]["content"] or ""
            tokens = int((reply.get("usage") or {}).get("completion_tokens") or 0)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise _Retryable(f"{url}: the answer is not a chat completion") from None
        if not isinstance(text, str):
            raise _Retryable(f"{url}: the answer's content is not text")
        logprobs, ended = _answer_ending(choice)
        return Generation(text, tokens, 0, seconds, None, logprobs=logprobs, finish_reason=ended)


def _base_url(url: str) -> str:
    parsed = httpx.URL(url) if "://" in url else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise UserError(f"--endpoint {url}: not an http(s) base URL such as http://127.0.0.1:8000/v1")
    return url.rstrip("/")


def png_bytes(image: Image.Image) -> bytes:
    """The page as PNG: lossless, so the server sees the very pixels a local run would feed the model."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


@dataclass
class _Planned:
    """An open document whose pages are (or will be) in flight, and the futures of its pages in order."""

    document: Document
    numbers: list[int]
    futures: list[Future | None] = field(default_factory=list)
    consumed: int = 0


class EndpointConverter:
    """The endpoint counterpart of :class:`jina_ocr.services.conversion.Converter`: the same ``convert`` call,
    the same :class:`PageResult` objects (``tokens`` from the answer's usage, ``seconds`` the page's
    rendering plus the answering request, ``fastmtp`` None). Close it to stop its workers.

    :meth:`schedule` announces the documents that the next :meth:`convert` calls will ask for, in that
    order, so that pages of the next documents are in flight while one document finishes.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        served_model: str | None = None,
        api_key: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        policy: RetryPolicy | None = None,
        prompt: str | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        dpi: int = DEFAULT_DPI,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        retry_truncated: int = 0,
    ):
        numbers = dict(concurrency=concurrency, max_new_tokens=max_new_tokens, dpi=dpi, max_pixels=max_pixels)
        for name, value in numbers.items():
            positive_int(name, value)
        policy = policy or RetryPolicy()
        if policy.retries < 0:
            raise UserError(f"retries must be 0 or more, not {policy.retries}")
        urls = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self.pool = EndpointPool(urls, policy, api_key, served_model)
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.dpi = dpi
        self.max_pixels = max_pixels
        if retry_truncated < 0:
            raise UserError(f"retry_truncated must be 0 or more, not {retry_truncated}")
        self.retry_truncated = retry_truncated
        self._window = 4 * concurrency
        # Page bitmaps are made by a few threads only: each thread's malloc arena keeps its largest
        # buffers, so bitmaps made in every request worker would cost a bitmap per worker for good.
        renderers = min(concurrency, os.cpu_count() or 1)
        self._renderer = ThreadPoolExecutor(renderers, "jina-ocr-render")
        render_worker.POOL.warm(renderers, wait=True)  # one drawing process per thread, ready
        self._plan: deque[_Planned] = deque()
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._workers = [
            threading.Thread(target=self._work, name=f"jina-ocr-endpoint-{i}", daemon=True)
            for i in range(concurrency)
        ]
        try:
            self.pool.describe()
        except BaseException:
            self.pool.close()
            self._renderer.shutdown()
            raise
        for worker in self._workers:
            worker.start()

    @property
    def served_model(self) -> str:
        return self.pool.served_model

    def close(self) -> None:
        """Stop: pages not yet sent are dropped, requests in flight are abandoned."""
        self.pool.close()
        self._renderer.shutdown(wait=False, cancel_futures=True)
        for _ in self._workers:
            self._tasks.put(None)
        while self._plan:
            self._drop(self._plan.popleft())

    def __enter__(self) -> EndpointConverter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def schedule(self, jobs: Iterable[tuple[Document, Sequence[int]]]) -> None:
        """Announce open documents and their pages; each is closed once converted or dropped."""
        for document, numbers in jobs:
            self._plan.append(_Planned(document, list(numbers)))
        self._fill()

    def convert(
        self,
        source: str | os.PathLike | bytes | Document,
        pages: PagesArgument = None,
        *,
        password: str | None = None,
        name: str | None = None,
    ) -> Iterator[PageResult]:
        """Open ``source`` and check ``pages`` now (raising :class:`DocumentError`), then stream results.

        The next scheduled document, asked for with its scheduled pages, goes on with the pages already
        in flight; anything else drops the plan. A :class:`Document` opened already is converted as it
        is (see :func:`~jina_ocr.runtime.documents.open_selection`)."""
        head = self._plan[0] if self._plan else None
        scheduled = (
            head is not None
            and head.document is source
            and isinstance(pages, Sequence)
            and head.numbers == list(pages)
        )
        if not scheduled:  # not what schedule() announced: the plan is dropped
            while self._plan:
                entry = self._plan.popleft()
                self._drop(entry, close=entry.document is not source)
            document, numbers = open_selection(
                source, pages, name=name, password=password, dpi=self.dpi, max_pixels=self.max_pixels
            )
            head = _Planned(document, numbers)
            self._plan.append(head)
        self._fill()
        return self._stream(head)

    def _stream(self, entry: _Planned) -> Iterator[PageResult]:
        try:
            while entry.consumed < len(entry.numbers):
                self._fill()
                future = entry.futures[entry.consumed]
                result = future.result()
                entry.futures[entry.consumed] = None
                entry.consumed += 1
                yield result
        finally:
            if self._plan and self._plan[0] is entry:
                self._plan.popleft()
            self._drop(entry)
        self._fill()

    def _drop(self, entry: _Planned, close: bool = True) -> None:
        for future in entry.futures:
            if future is not None:
                future.cancel()
        entry.futures = [None] * len(entry.futures)
        entry.consumed = len(entry.numbers)
        if close:
            entry.document.close()

    def _fill(self) -> None:
        """Send pages, in document and page order, until the window of unread pages is full."""
        outstanding = sum(len(e.futures) - e.consumed for e in self._plan)
        for entry in self._plan:
            while len(entry.futures) < len(entry.numbers) and outstanding < self._window:
                future: Future = Future()
                number = entry.numbers[len(entry.futures)]
                self._tasks.put((entry.document, entry.document.source, number, future))
                entry.futures.append(future)
                outstanding += 1
            if outstanding >= self._window:
                return

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            document, label, number, future = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._convert_page(document, label, number))
            except BaseException as error:  # Stopped, or a document closed under a dropped page
                future.set_exception(error)

    def _convert_page(self, document: Document, label: str, number: int) -> PageResult:
        start = time.perf_counter()
        try:
            png = self._renderer.submit(_render_png, document, number).result()
        except DocumentError as error:
            return PageResult(label, number, seconds=time.perf_counter() - start, error=error.reason)
        render_seconds = time.perf_counter() - start
        if png is None:
            return PageResult.converted(label, number, blank_generation(), render_seconds)
        return answer_page(
            self.pool,
            png,
            label,
            number,
            render_seconds,
            self.prompt,
            self.max_new_tokens,
            self.retry_truncated,
        )


def answer_page(
    pool: EndpointPool,
    png: bytes,
    label: str,
    number: int,
    render_seconds: float,
    prompt: str | None,
    max_new_tokens: int,
    retry_truncated: int = 0,
) -> PageResult:
    """A rendered page with ink as the endpoints convert it; a page they cannot convert fails alone. A
    page cut short (``length`` or ``loop``) is asked for again with sampling, ``retry_truncated`` times
    at most, at rising temperatures (:func:`retry_temperature`), until one answer ends with ``stop``;
    otherwise the greedy answer stays."""
    try:
        answer = pool.complete(png, prompt, max_new_tokens)
    except RuntimeError as error:
        return PageResult(label, number, seconds=render_seconds, error=str(error))
    temperature = 0.0
    for attempt in range(1, retry_truncated + 1):
        if not cut_short(answer.finish_reason):
            break
        try:
            retried = pool.complete(png, prompt, max_new_tokens, retry_temperature(attempt))
        except RuntimeError:  # the greedy answer is in: a failed retry leaves it
            break
        if retried.finish_reason == STOP:
            answer, temperature = retried, retry_temperature(attempt)
    return PageResult.converted(label, number, answer, render_seconds, temperature)


def _render_png(document: Document, number: int) -> bytes | None:
    """The page as PNG for a request, or None for a blank page, which is not sent (see ``is_blank``)."""
    image = document.render(number)
    return None if is_blank(image) else png_bytes(image)


def closing_stream(converter: EndpointConverter, results: Iterator[PageResult]) -> Iterator[PageResult]:
    """``results``, closing ``converter`` once they are read or abandoned (for one-off API calls)."""
    with contextlib.closing(converter):
        yield from results
