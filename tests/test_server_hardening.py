"""``jina-ocr serve`` against hostile or careless clients, over real HTTP on 127.0.0.1: page markers
of multi-image requests, malformed bodies, the API key and model name, URL credentials, and
connections that never finish their request.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import logging
import re
import socket
import threading
import time
from contextlib import ExitStack

import httpx
import openai
import pytest
from document_server import DocumentServer
from loopback import serve_in_thread
from PIL import Image
from test_documents import pdf_with_pages

from jina_ocr.commands import serve as serve_command
from jina_ocr.errors import UserError
from jina_ocr.services.conversion import Converter
from jina_ocr.services.fetch import FetchPolicy
from jina_ocr.services.server import Connections, Limits, create_app, server_config

LIMITS = Limits(max_request_bytes=2 * 1024 * 1024, max_pages=8, max_pixels=4_000_000, max_queued_pages=64)
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def converter(tiny_mtp_export) -> Converter:
    return Converter.from_pretrained(
        tiny_mtp_export, device="cpu", max_new_tokens=2, batch_size=8, mode="tiny", dpi=36
    )


def running(app, connections: Connections | None = None):
    """``app`` served by uvicorn as ``jina-ocr serve`` configures it, on a free loopback port."""
    return serve_in_thread(app, server_config(app, connections=connections, log_level="warning"))


@pytest.fixture(scope="module")
def documents():
    with DocumentServer({"report.pdf": (pdf_with_pages(2), "application/pdf")}) as server:
        yield server


@pytest.fixture(scope="module")
def server(converter):
    """A server that fetches URLs (loopback included) and needs no key."""
    fetching = FetchPolicy(allow_private=True, timeout=5)
    with running(create_app(converter, "jina-ocr-tiny", LIMITS, fetching=fetching)) as base:
        yield base


@pytest.fixture(scope="module")
def locked(converter):
    """A server with the API key :data:`KEY`."""
    with running(create_app(converter, "jina-ocr-tiny", LIMITS, api_key=KEY)) as base:
        yield base


def wait_for_health(base: str, while_what: str, seconds: float = 10) -> None:
    """Poll ``/health`` until it answers 200; fail naming ``while_what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"/health did not answer {while_what}"
        time.sleep(0.2)


def data_url(data: bytes, kind: str) -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def chat_body(*urls: str, **extra) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return {"messages": [{"role": "user", "content": parts}], "max_tokens": 2, **extra}


def markers(text: str) -> list[str]:
    return re.findall(r"<!-- page (\d+) -->", text)


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    return response.json()["error"]["message"]


# 1. page markers


def test_chat_pages_are_numbered_through_the_request(server):
    image, pdf = data_url(png(), "image/png"), data_url(pdf_with_pages(2), "application/pdf")
    for urls, expected in [((image, image), ["1", "2"]), ((pdf, image), ["1", "2", "3"])]:
        reply = httpx.post(f"{server}/v1/chat/completions", json=chat_body(*urls), timeout=120)
        assert reply.status_code == 200, reply.text
        content = reply.json()["choices"][0]["message"]["content"]
        assert markers(content) == expected and content.startswith("<!-- page 1 -->")
        client = openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=120)
        stream = client.chat.completions.create(model="jina-ocr-tiny", stream=True, **chat_body(*urls))
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert streamed == content


def test_a_one_page_chat_answer_is_the_text_alone(server):
    reply = httpx.post(
        f"{server}/v1/chat/completions", json=chat_body(data_url(png(), "image/png")), timeout=120
    )
    assert markers(reply.json()["choices"][0]["message"]["content"]) == []


# 2. malformed bodies


@pytest.mark.parametrize("options", ["yes", [1], 3])
def test_stream_options_that_are_not_an_object_are_a_400(server, options):
    body = chat_body(data_url(png(), "image/png"), stream=True, stream_options=options)
    reply = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=60)
    assert "stream_options must be an object" in error(reply, 400)


def test_deeply_nested_json_is_a_400(server):
    depth = 100_000
    body = b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
    reply = httpx.post(
        f"{server}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert error(reply, 400) == "the request body is JSON nested too deeply"


# 3. API key and model name


def test_without_the_key_everything_but_health_is_a_401(locked):
    assert httpx.get(f"{locked}/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/docs")]:
            reply = httpx.request(method, f"{locked}{path}", headers=headers, json={})
            assert "missing or wrong API key" in error(reply, 401), (method, path, headers)
            assert reply.headers["www-authenticate"] == "Bearer"
    models = httpx.get(f"{locked}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert models.status_code == 200


def test_the_openai_client_with_the_key_is_served(locked):
    client = openai.OpenAI(base_url=f"{locked}/v1", api_key=KEY, max_retries=0, timeout=120)
    reply = client.chat.completions.create(model="jina-ocr-tiny", **chat_body(data_url(png(), "image/png")))
    assert reply.choices[0].message.role == "assistant"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{locked}/v1", api_key="guess", max_retries=0).models.list()


def test_a_model_the_server_does_not_serve_is_a_404(server):
    image = data_url(png(), "image/png")
    reply = httpx.post(f"{server}/v1/chat/completions", json=chat_body(image, model="gpt-4o"), timeout=60)
    assert error(reply, 404) == "model 'gpt-4o' is not served here; this server serves 'jina-ocr-tiny'"
    for named in ({"model": "jina-ocr-tiny"}, {}):
        reply = httpx.post(f"{server}/v1/chat/completions", json=chat_body(image, **named), timeout=120)
        assert reply.status_code == 200, reply.text


def test_the_api_key_comes_from_the_option_or_the_environment(monkeypatch):
    parser = argparse.ArgumentParser()
    serve_command.add_arguments(parser)
    monkeypatch.delenv("JINA_OCR_API_KEY", raising=False)
    assert serve_command.api_key(parser.parse_args([])) is None
    assert serve_command.api_key(parser.parse_args(["--api-key", "k"])) == "k"
    monkeypatch.setenv("JINA_OCR_API_KEY", "from-env")
    assert serve_command.api_key(parser.parse_args([])) == "from-env"
    assert serve_command.api_key(parser.parse_args(["--api-key", "k"])) == "k"
    with pytest.raises(UserError, match="is empty"):
        serve_command.api_key(parser.parse_args(["--api-key", " "]))


# 4. URL credentials


def test_url_credentials_are_redacted_in_errors_and_sources(server, documents):
    secret = documents.url("/report.pdf").replace("://", "://user:hunter2@")
    shown = documents.url("/report.pdf").replace("://", "://***@")
    reply = httpx.get(
        f"{server}/{secret}", headers={"Accept": "application/json", "X-Page": "1"}, timeout=120
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["source"] == shown
    missing = secret.replace("report.pdf", "missing.pdf")
    reply = httpx.post(f"{server}/v1/chat/completions", json=chat_body(missing), timeout=60)
    message = error(reply, 502)
    assert "hunter2" not in message and "://***@127.0.0.1" in message


# 6. connections that never finish their request


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def logged_server(converter, connections: Connections):
    """A server within ``connections``' limits: its address, port, the records of uvicorn's error log
    while it runs (uvicorn's own loggers do not propagate to the root) and an exit stack for sockets."""
    app = create_app(converter, "jina-ocr-tiny", LIMITS)
    log, logger = Records(), logging.getLogger("uvicorn.error")
    with running(app, connections) as base, ExitStack() as stack:
        logger.addHandler(log)
        stack.callback(logger.removeHandler, log)
        yield base, int(base.rsplit(":", 1)[1]), log, stack


def test_half_sent_requests_neither_block_health_nor_flood_the_log(converter):
    connections = Connections(max_connections=20, header_seconds=1.0, keep_alive_seconds=1)
    with logged_server(converter, connections) as (base, port, log, stack):
        slow = []
        for _ in range(30):  # headers never finished: each holds a connection until its deadline
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            slow.append(sock)
        for _ in range(10):  # a body cut short, then the client goes away
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"
                )
        wait_for_health(base, "while half-sent requests were open")
        slow[0].settimeout(5)
        assert slow[0].recv(100) == b"", "a connection with half-sent headers was left open"
        time.sleep(0.5)  # the cut-short bodies have been seen to end
    assert not [r.getMessage() for r in log.records if r.exc_info], "a half-sent request logged a traceback"


def test_a_flood_of_connections_is_turned_away_at_accept_and_health_still_answers(converter):
    """12,000 connections that never send a byte (the test's own sockets count against its file limit of
    20,000, so the 21,000 of the report cannot all be open in one process): beyond ``max_connections``
    each is answered 503 and closed as it is accepted, so the server's descriptors stay few."""
    connections = Connections(max_connections=20, header_seconds=1.0, keep_alive_seconds=1)
    with logged_server(converter, connections) as (base, port, log, stack):
        flood = [stack.enter_context(socket.create_connection(("127.0.0.1", port))) for _ in range(12_000)]
        wait_for_health(base, "under a flood of connections")
        answers = []
        for sock in flood[-200:]:  # a few may have found a place freed by the header deadline
            sock.settimeout(5)
            answers.append(sock.recv(100))
        assert all(a == b"" or a.startswith(b"HTTP/1.1 503") for a in answers)  # closed, none left open
        assert sum(a.startswith(b"HTTP/1.1 503") for a in answers) > 150
    assert not [r.getMessage() for r in log.records if r.exc_info], "the flood logged a traceback"


def test_a_body_sent_a_byte_at_a_time_is_cut_off_at_its_deadline(converter):
    connections = Connections(max_connections=20, header_seconds=1.0, keep_alive_seconds=1, body_seconds=1.0)
    app = create_app(converter, "jina-ocr-tiny", LIMITS)
    with running(app, connections) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
            began = time.monotonic()
            closed = False
            while time.monotonic() - began < 10 and not closed:
                try:
                    sock.sendall(b" ")
                    sock.settimeout(0.3)
                    closed = sock.recv(100) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
            assert closed and time.monotonic() - began < 4, "a trickled body held its connection"


def test_a_client_that_hangs_up_stops_the_fetch_it_asked_for(converter):
    """The fetch would go on to its 30 s deadline; the client's hang-up ends it within a second."""
    from test_fetch import TricklingServer

    fetching = FetchPolicy(allow_private=True, timeout=10, deadline=30)
    app = create_app(converter, "jina-ocr-tiny", LIMITS, fetching=fetching)
    with TricklingServer(pause=0.05) as trickling, running(app) as base:
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(f"{base}/http://127.0.0.1:{trickling.port}/slow.pdf", timeout=1.5)
        hung_up = time.monotonic()
        while trickling.client_left is None and time.monotonic() - hung_up < 10:
            time.sleep(0.05)
        assert trickling.client_left is not None and trickling.client_left - hung_up < 1.5


def test_fetches_of_trickling_servers_leave_ordinary_requests_their_threads(converter):
    """45 clients each name a URL whose server trickles its answer; the fetches wait in threads of their
    own, so an ordinary upload is still answered at once."""
    from test_fetch import TricklingServer

    fetching = FetchPolicy(allow_private=True, timeout=10, deadline=20)
    app = create_app(converter, "jina-ocr-tiny", LIMITS, fetching=fetching)
    with TricklingServer(pause=0.05, seconds=20) as trickling, running(app) as base:
        url = f"{base}/http://127.0.0.1:{trickling.port}/slow.pdf"

        def client() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url, timeout=25)

        clients = [threading.Thread(target=client, daemon=True) for _ in range(45)]
        for thread in clients:
            thread.start()
        time.sleep(1.0)
        began = time.monotonic()
        reply = httpx.post(
            f"{base}/v1/documents", files={"file": ("page.pdf", pdf_with_pages(1))}, timeout=30
        )
        assert reply.status_code == 200 and reply.json()["pages"][0]["error"] is None
        assert time.monotonic() - began < 2.0, "an ordinary request waited for the fetches"
        trickling.stop.set()
        for thread in clients:
            thread.join(timeout=30)
