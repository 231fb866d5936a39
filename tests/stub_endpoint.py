"""A scripted OpenAI-compatible endpoint on 127.0.0.1 for the endpoint client's tests.

Each chat request takes the next step of the script (the last step repeats): a canned answer, an
error status (with ``Retry-After`` for 429), a slow answer, a dropped connection, or a hang until the
endpoint is released. A canned answer has a ``finish_reason`` and, when its step gives them, token
log-probabilities in OpenAI's format. Every request is recorded with its arrival time and decoded body, so tests can
check what was sent, how often and how far apart.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = "canned text"


@dataclass
class Step:
    kind: str = "ok"
    """ok, status, slow, drop or hang."""
    status: int = 200
    retry_after: str | None = None
    seconds: float = 0.0
    logprobs: list[tuple[float, float]] | None = None
    """(log-probability, that of the first choice) of each answered token; None: the answer has none."""
    finish_reason: str = "stop"


OK = Step()


@dataclass
class Request:
    at: float
    path: str
    body: dict | None


@dataclass
class StubEndpoint:
    script: list[Step] = field(default_factory=lambda: [OK])
    model: str = "stub-model"
    owned_by: str = "stub"
    models_unavailable: int = 0
    """How many GET /v1/models answer 503 before the list."""
    requests: list[Request] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def chats(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def next_step(self) -> Step:
        with self.lock:
            index = len(self.chats) - 1
            return self.script[min(index, len(self.script) - 1)]

    def record(self, path: str, body: dict | None) -> None:
        with self.lock:
            self.requests.append(Request(time.monotonic(), path, body))


def _handler(stub: StubEndpoint):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            stub.record(self.path, None)
            if sum(r.path.endswith("/models") for r in stub.requests) <= stub.models_unavailable:
                self._send(503, {"error": {"message": "starting", "type": "test", "code": 503}})
                return
            self._send(200, {"object": "list", "data": [{"id": stub.model, "owned_by": stub.owned_by}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            stub.record(self.path, body)
            with stub.lock:
                stub.in_flight += 1
                stub.peak_in_flight = max(stub.peak_in_flight, stub.in_flight)
            try:
                self._answer(stub.next_step())
            finally:
                with stub.lock:
                    stub.in_flight -= 1

        def _answer(self, step: Step) -> None:
            if step.kind == "drop":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if step.kind == "hang":
                stub.released.wait(60)
                self.close_connection = True
                return
            if step.kind == "slow":
                time.sleep(step.seconds)
            if step.kind == "status":
                headers = {"Retry-After": step.retry_after} if step.retry_after else {}
                error = {"message": f"scripted {step.status}", "type": "test", "code": step.status}
                self._send(step.status, {"error": error}, headers)
                return
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
                "finish_reason": step.finish_reason,
            }
            if step.logprobs is not None:
                choice["logprobs"] = {
                    "content": [
                        {"token": "t", "logprob": chosen, "top_logprobs": [{"token": "f", "logprob": first}]}
                        for chosen, first in step.logprobs
                    ]
                }
            reply = {
                "choices": [choice],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            }
            self._send(200, reply)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """Clients that gave up (a timeout test) close their end; that is expected, not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class running:
    """``with running(stub) as url:`` serves ``stub`` on a free port; ``url`` is its ``base_url``."""

    def __init__(self, stub: StubEndpoint):
        self.stub = stub
        self.server = _Server(("127.0.0.1", 0), _handler(stub))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __exit__(self, *exc) -> None:
        self.stub.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
