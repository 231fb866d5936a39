"""A real HTTP server on 127.0.0.1 that serves documents, and misbehaves on request, for the URL tests.

Routes: ``/<name>`` for each file given (with its Content-Length and Content-Type), with any query;
``/redirect/<n>/<name>`` redirects ``n`` times before reaching ``/<name>``; ``/loop`` redirects to
itself; ``/to?<url>`` redirects to ``<url>``; ``/endless`` sends a PDF header and then zeros until the
client goes away (counting what it managed to send); ``/declared-huge`` declares a terabyte and sends
a little; ``/gzip`` sends a compressed body unasked; ``/slow`` waits :data:`SLOW_SECONDS` before answering. Every request path is recorded.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import threading
import time
import urllib.parse

SLOW_SECONDS = 5.0
ENDLESS_CAP = 512 * 1024 * 1024
"""Where ``/endless`` gives up even if nobody stops reading, so that a broken client cannot hang a test."""
CHUNK = 64 * 1024
GZIPPED = gzip.compress(b"%PDF-1.7\n" + bytes(1024 * 1024))


class DocumentServer:
    """Start with ``with DocumentServer(files) as server:``; ``server.url("/report.pdf")``."""

    def __init__(self, files: dict[str, tuple[bytes, str]], host: str = "127.0.0.1", context=None):
        self.files = files
        self.requests: list[str] = []
        self.endless_sent = 0
        self.endless_done = threading.Event()
        self._stop = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                owner.requests.append(self.path)
                owner._answer(self)

        self._httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        if context is not None:
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self.scheme = "https" if context is not None else "http"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def __enter__(self) -> DocumentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        path = parsed.path
        if path.startswith("/redirect/"):
            _, _, count, name = path.split("/", 3)
            left = int(count) - 1
            return _redirect(handler, f"/redirect/{left}/{name}" if left > 0 else f"/{name}")
        if path == "/loop":
            return _redirect(handler, "/loop")
        if path == "/to":
            return _redirect(handler, urllib.parse.unquote(parsed.query))
        if path == "/endless":
            return self._endless(handler)
        if path == "/declared-huge":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/pdf")
            handler.send_header("Content-Length", str(10**12))
            handler.end_headers()
            handler.wfile.write(b"%PDF-1.7\n")
            return None
        if path == "/gzip":  # compressed although the client asked for identity
            handler.send_response(200)
            handler.send_header("Content-Encoding", "gzip")
            handler.send_header("Content-Length", str(len(GZIPPED)))
            handler.end_headers()
            handler.wfile.write(GZIPPED)
            return None
        if path == "/slow":
            deadline = time.monotonic() + SLOW_SECONDS
            while time.monotonic() < deadline and not self._stop.is_set():
                time.sleep(0.05)
            path = "/report.pdf"
        name = urllib.parse.unquote(path.lstrip("/").rpartition("/")[2])
        if name not in self.files:
            handler.send_error(404)
            return None
        body, kind = self.files[name]
        handler.send_response(200)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        with contextlib.suppress(OSError):  # a client that stops reading early (a refused body)
            handler.wfile.write(body)
        return None

    def _endless(self, handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/pdf")
        handler.end_headers()  # no Content-Length: the body ends when the connection does
        try:
            handler.wfile.write(b"%PDF-1.7\n")
            self.endless_sent = 9
            zeros = bytes(CHUNK)
            while self.endless_sent < ENDLESS_CAP and not self._stop.is_set():
                handler.wfile.write(zeros)
                self.endless_sent += CHUNK
        except OSError:  # the client closed the connection
            pass
        finally:
            self.endless_done.set()


def _redirect(handler, location: str) -> None:
    handler.send_response(302)
    handler.send_header("Location", location)
    handler.send_header("Content-Length", "0")
    handler.end_headers()
