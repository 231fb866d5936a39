"""Pages built to exhaust the renderer: they fail with their reason, and nothing else waits for them.

A 6.7 KB PDF of form XObjects nested 30 deep (each drawing the next twice) and a page of 3 million
path operations take MuPDF hours and gigabytes. Drawn in worker processes
(:mod:`jina_ocr.runtime.render_worker`), such a page fails after the time limit while ``/health`` and
other requests go on, the process that waits keeps its memory, and Ctrl-C ends ``convert`` at once.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
from multiprocessing.connection import Pipe
from pathlib import Path

import httpx
import pytest
from hostile_pdfs import many_paths, nested_forms
from loopback import serve_in_thread
from stub_endpoint import OK, StubEndpoint, running
from test_endpoints import run_cli_process, wait_for

from jina_ocr.cli import main
from jina_ocr.runtime import render_worker
from jina_ocr.runtime.documents import CorruptDocumentError, open_document
from jina_ocr.services.conversion import Converter
from jina_ocr.services.server import Limits, create_app, server_config

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "page.pdf"
LIMIT = 2.0


@pytest.fixture
def quick_limit(monkeypatch):
    monkeypatch.setattr(render_worker, "RENDER_SECONDS", LIMIT)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


@pytest.mark.parametrize("hostile", [nested_forms, many_paths], ids=["nested-forms", "many-paths"])
def test_a_page_that_draws_for_ever_fails_at_the_limit_and_the_next_document_renders(quick_limit, hostile):
    data = hostile()
    render_worker.POOL.warm()
    with open_document(SAMPLE) as warm:
        warm.render(1)  # a worker that has imported PyMuPDF, so the limit is all the page gets
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began = time.monotonic()
    with open_document(data, name="hostile.pdf") as document:
        with pytest.raises(CorruptDocumentError) as failed:
            document.render(1)
    assert LIMIT <= time.monotonic() - began < LIMIT + 1.5
    assert str(failed.value) == (
        f"hostile.pdf, page 1: page takes longer than {LIMIT:g} s to draw (a page built to exhaust the renderer?)"
    )
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 50_000  # kB: the page grew elsewhere
    with open_document(SAMPLE) as document:
        assert document.render(1).size == (840, 1191)


def test_a_worker_that_cannot_allocate_the_page_fails_it_with_the_reason():
    """A 600 dpi A5 page needs a 52 MB bitmap; a worker allowed 4 MB more than it holds at rest fails
    it with MuPDF's words, and the next page is drawn as ever."""
    render_worker.POOL.close()  # a fresh worker: one that drew before keeps freed memory it could reuse
    job = render_worker.RenderJob("memory-test", str(SAMPLE), None, 1, 600)
    with pytest.raises(render_worker.DrawingError, match="cannot be rendered") as failed:
        render_worker.POOL.draw(job, memory=4 * 2**20)
    assert "memory" in str(failed.value).lower() or "malloc" in str(failed.value).lower()
    with open_document(SAMPLE) as document:
        assert document.render(1).size == (840, 1191)


def test_a_worker_on_a_system_without_proc_draws_without_a_memory_cap(monkeypatch):
    """Where ``/proc`` is missing (macOS) a worker cannot count its size; it draws its pages with only
    the time limit rather than failing every page."""

    def no_proc(path, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(render_worker, "open", no_proc, raising=False)
    monkeypatch.setattr(
        render_worker.signal, "signal", lambda *args: None
    )  # _serve runs here, not in a child
    ours, theirs = Pipe()
    worker = threading.Thread(target=render_worker._serve, args=(theirs,))
    worker.start()
    assert ours.recv() == ("ready",)
    ours.send((render_worker.RenderJob("no-proc", str(SAMPLE), None, 1, 72), 4 * 2**20))
    status, size, _ = ours.recv()
    ours.close()  # the worker sees the pipe closed and returns
    worker.join(10)
    assert (status, size) == ("ok", (420, 596))  # A5 at 72 dpi


def test_the_server_answers_health_while_a_hostile_upload_fails_with_its_reason(tiny_mtp_export, quick_limit):
    converter = Converter.from_pretrained(
        tiny_mtp_export, device="cpu", max_new_tokens=2, mode="tiny", dpi=36
    )
    limits = Limits(max_request_bytes=2 * 1024 * 1024, max_pages=8, max_pixels=4_000_000, max_queued_pages=64)
    app = create_app(converter, "jina-ocr-tiny", limits)
    with serve_in_thread(app, server_config(app, log_level="warning")) as base:
        replies = {}

        def upload() -> None:
            replies["hostile"] = httpx.post(
                f"{base}/v1/documents", files={"file": ("bomb.pdf", nested_forms())}, timeout=60
            )

        uploading = threading.Thread(target=upload)
        uploading.start()
        time.sleep(0.5)
        ordinary = 0
        while uploading.is_alive():
            began = time.monotonic()
            assert httpx.get(f"{base}/health", timeout=5).status_code == 200
            assert time.monotonic() - began < 2.0, "/health waited for the hostile page"
            if not ordinary:
                began = time.monotonic()
                reply = httpx.post(
                    f"{base}/v1/documents", files={"file": ("page.pdf", SAMPLE.read_bytes())}, timeout=10
                )
                assert reply.status_code == 200 and reply.json()["pages"][0]["error"] is None
                assert time.monotonic() - began < 2.0, "an ordinary request waited for the hostile page"
                ordinary += 1
            time.sleep(0.25)
        uploading.join()
        assert ordinary == 1
    reply = replies["hostile"]
    assert reply.status_code == 200, reply.text
    [page] = reply.json()["pages"]
    assert page["markdown"] is None or page["markdown"] == ""
    assert "takes longer than 2 s to draw" in page["error"]


def test_in_convert_the_hostile_page_fails_alone_and_the_rest_converts(tmp_path, quick_limit, capsys):
    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(nested_forms())
    out = tmp_path / "out"
    with running(StubEndpoint([OK])) as url:
        status = main(["convert", str(bomb), str(SAMPLE), "-o", str(out), "--endpoint", url])
    err = capsys.readouterr().err
    assert status == 1  # a page failed
    assert "bomb.pdf, page 1: page takes longer than 2 s to draw" in err
    assert (out / "bomb.md").read_text().startswith("<!-- page 1: not converted: ")
    assert "not converted" not in (out / "page.md").read_text()


def test_ctrl_c_ends_convert_within_two_seconds_while_a_page_draws(tmp_path):
    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(nested_forms())
    with running(StubEndpoint([OK])) as url:
        process = run_cli_process(bomb, "-o", tmp_path / "out", "--endpoint", url)
        try:
            wait_for(lambda: children(process.pid), seconds=60)  # the document is open, its page drawing
            time.sleep(1.0)
            workers = children(process.pid)
            began = time.monotonic()
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=10)
            took = time.monotonic() - began
        finally:
            process.kill()
    assert process.returncode == 130 and "interrupted" in err
    assert took < 2.0
    assert not any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in workers)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
