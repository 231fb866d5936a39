"""Waiting for a server the tests started on 127.0.0.1."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx


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
