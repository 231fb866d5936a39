"""``jina-ocr serve`` over real HTTP on 127.0.0.1: clients that hang up, and requests that share a batch.

The tiny random model never emits EOS, so a request with ``max_tokens`` 4,096 decodes 4,096 tokens
(about 20 s on a CPU) unless the server stops it. Requests are written on raw sockets, so that
hanging up is closing the socket; the server's ``/health`` counts the tokens it generated and the
pages it gave up. The server allows URLs, and fetches the page from a document server on loopback,
so that every route (chat, upload, ``GET /{url}``) is hung up on.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import time

import httpx
import openai
import pytest
from document_server import DocumentServer
from loopback import serve_in_thread
from PIL import Image

from jina_ocr.services.conversion import Converter
from jina_ocr.services.fetch import FetchPolicy
from jina_ocr.services.server import Limits, create_app

LONG = 4096


@pytest.fixture(scope="module")
def converter(tiny_export) -> Converter:
    return Converter.from_pretrained(
        tiny_export, device="cpu", max_new_tokens=LONG, batch_size=4, mode="tiny", dpi=36
    )


@pytest.fixture(scope="module")
def page(fixtures_dir) -> Image.Image:
    return Image.open(fixtures_dir / "tesseract" / "phototest.tif").convert("RGB")


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def documents(page):
    with DocumentServer({"page.png": (png(page), "image/png")}) as server:
        yield server


@pytest.fixture(scope="module")
def server(converter, page):
    """Base URL of a running server, warmed up by one short request; requests arriving within 0.3 s
    of each other share a batch."""
    fetching = FetchPolicy(allow_private=True)  # the document server is on loopback
    app = create_app(converter, "jina-ocr-tiny", Limits(), batch_wait_seconds=0.3, fetching=fetching)
    with serve_in_thread(app) as base:
        reply = httpx.post(f"{base}/v1/chat/completions", json=chat_body(page, 2), timeout=60)
        assert reply.status_code == 200, reply.text
        yield base


def chat_body(image: Image.Image, max_tokens: int, stream: bool = False) -> dict:
    url = f"data:image/png;base64,{base64.b64encode(png(image)).decode()}"
    content = [{"type": "image_url", "image_url": {"url": url}}]
    return {
        "model": "jina-ocr-tiny",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def send(base: str, body: dict) -> socket.socket:
    """A chat request written on a raw socket, left waiting for its answer."""
    return send_request(httpx.Request("POST", f"{base}/v1/chat/completions", content=json.dumps(body)))


def send_request(request: httpx.Request) -> socket.socket:
    """``request`` written on a raw socket (HTTP/1.1, its body in full), left waiting for its answer."""
    body = request.read()
    sock = socket.create_connection((request.url.host, request.url.port))
    headers = {**request.headers, "content-length": str(len(body))}
    head = f"{request.method} {request.url.raw_path.decode()} HTTP/1.1\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items() if name != "transfer-encoding")
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def health(base: str) -> dict:
    return httpx.get(f"{base}/health", timeout=10).json()


def wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def when_tokens_stop(base: str, quiet: float = 0.6, seconds: float = 30.0) -> float:
    """The time of the last change of the server's token count, once it has not moved for ``quiet``."""
    deadline = time.monotonic() + seconds
    count, changed = health(base)["generated_tokens"], time.monotonic()
    while time.monotonic() - changed < quiet:
        assert time.monotonic() < deadline, "the server kept generating"
        time.sleep(0.05)
        now = health(base)["generated_tokens"]
        if now != count:
            count, changed = now, time.monotonic()
    return changed


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_generation_stops_soon_after_the_client_hangs_up(server, page, stream):
    before = health(server)
    client = send(server, chat_body(page, LONG, stream))
    wait_for(lambda: health(server)["generated_tokens"] > before["generated_tokens"] + 50)  # decoding
    client.close()
    hung_up = time.monotonic()
    stopped = when_tokens_stop(server)
    after = health(server)
    assert stopped - hung_up < 2.0
    assert after["generated_tokens"] - before["generated_tokens"] < LONG // 2
    assert after["cancelled_pages"] == before["cancelled_pages"] + 1


@pytest.mark.parametrize("route", ["upload", "url"])
def test_document_routes_stop_generating_when_the_client_hangs_up(server, documents, page, route):
    """``POST /v1/documents`` and ``GET /{url}`` wait for their pages as chat does."""
    if route == "upload":
        files = {"file": ("page.png", png(page), "image/png")}
        request = httpx.Request("POST", f"{server}/v1/documents", files=files, data={"max_tokens": LONG})
    else:
        request = httpx.Request("GET", f"{server}/{documents.url('/page.png')}")
    before = health(server)
    client = send_request(request)
    wait_for(lambda: health(server)["generated_tokens"] > before["generated_tokens"] + 50)
    client.close()
    hung_up = time.monotonic()
    stopped = when_tokens_stop(server)
    after = health(server)
    assert stopped - hung_up < 2.0
    assert after["generated_tokens"] - before["generated_tokens"] < LONG // 2
    assert after["cancelled_pages"] == before["cancelled_pages"] + 1


def test_a_short_request_after_three_abandoned_long_ones_answers_at_once(server, converter, page):
    before = health(server)
    clients = [send(server, chat_body(page.rotate(90 * turn, expand=True), LONG)) for turn in range(3)]
    wait_for(lambda: health(server)["generated_tokens"] > before["generated_tokens"] + 50)
    for client in clients:
        client.close()
    start = time.monotonic()
    reply = httpx.post(f"{server}/v1/chat/completions", json=chat_body(page, 4), timeout=60)
    elapsed = time.monotonic() - start
    assert reply.status_code == 200, reply.text
    [expected] = converter.generate([page], max_new_tokens=4)
    assert reply.json()["choices"][0]["message"]["content"] == expected.markdown
    assert reply.json()["usage"]["completion_tokens"] == 4
    assert elapsed < 2.0
    wait_for(lambda: health(server)["cancelled_pages"] == before["cancelled_pages"] + 3, seconds=5)


def test_a_request_is_answered_when_its_own_page_is_done_while_its_batch_goes_on(server, page):
    before = health(server)
    long_client = send(server, chat_body(page, LONG))
    try:
        start = time.monotonic()
        reply = openai.OpenAI(base_url=f"{server}/v1", api_key="-", max_retries=0).chat.completions.create(
            **chat_body(page, 4)
        )
        elapsed = time.monotonic() - start
        assert reply.usage.completion_tokens == 4 and elapsed < 2.0
        answered = health(server)["generated_tokens"]
        wait_for(lambda: health(server)["generated_tokens"] > answered + 20, seconds=5)  # still decoding
    finally:
        long_client.close()
    when_tokens_stop(server)
    after = health(server)
    assert after["batches"] == before["batches"] + 1  # the two requests shared one batch
    assert after["cancelled_pages"] == before["cancelled_pages"] + 1
