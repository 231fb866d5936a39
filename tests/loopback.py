"""Servers the tests start on 127.0.0.1: waiting for a subprocess, and running an app in a thread."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn


def wait_until_healthy(process: subprocess.Popen, base: str, log: Path, seconds: float, pause: float) -> None:
    """Poll ``base/health`` until it answers 200; fail with the server's log if it exits or is too slow."""
    deadline = time.monotonic() + seconds
    while True:
        assert process.poll() is None, log.read_text()[-6000:]
        assert time.monotonic() < deadline, f"the server at {base} did not come up in {seconds} s"
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(pause)


@contextmanager
def serve_in_thread(app, config: uvicorn.Config | None = None) -> Iterator[str]:
    """Run an ASGI ``app`` with uvicorn on a free loopback port in this process; yields its base URL.
    ``config`` is uvicorn's settings for ``app`` (default: uvicorn's own, quiet)."""
    server = uvicorn.Server(config or uvicorn.Config(app, log_level="warning"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
