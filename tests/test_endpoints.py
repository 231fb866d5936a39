"""``convert --endpoint`` against scripted loopback endpoints (tests/stub_endpoint.py): what is sent,
how failures are retried, backed off and routed, failed pages, Ctrl-C, ``--resume`` and bad options.

Real HTTP on 127.0.0.1 throughout; retry delays are shortened through the injectable
:class:`~jina_ocr.services.endpoints.RetryPolicy`, so no test sleeps for the default seconds.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from email.utils import formatdate
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from PIL import Image
from stub_endpoint import ANSWER, OK, Step, StubEndpoint, running
from test_documents import pdf_with_a_blank_second_page

import jina_ocr
from jina_ocr.cli import main
from jina_ocr.errors import UserError
from jina_ocr.generation_defaults import DEFAULT_MAX_NEW_TOKENS
from jina_ocr.runtime.documents import open_document
from jina_ocr.services import endpoints
from jina_ocr.services.endpoints import EndpointConverter, RetryPolicy, retry_after_seconds

FAST = functools.partial(RetryPolicy, first_delay=0.01, random=lambda: 1.0)
"""Backoff of 10 ms, 20 ms, 40 ms ... (the draw fixed at its top) instead of 1 s, 2 s, 4 s ..."""


@pytest.fixture()
def noise_png(tmp_path) -> Path:
    """An image whose every pixel differs from its neighbours: a lossy encoding could not hide."""
    pixels = np.random.default_rng(0).integers(0, 256, (90, 120, 3), dtype=np.uint8)
    path = tmp_path / "noise.png"
    Image.fromarray(pixels).save(path)
    return path


def write_pdf(path: Path, pages: int) -> Path:
    document = pymupdf.open()
    for number in range(1, pages + 1):
        document.new_page(width=200, height=150).insert_text((20, 40), f"{path.stem} page {number}")
    document.save(path)
    return path


@pytest.fixture()
def cli(capsys, monkeypatch):
    """``jina-ocr convert ARGS`` in this process with the fast retry policy; (status, stdout, stderr)."""
    monkeypatch.setattr(endpoints, "RetryPolicy", FAST)

    def invoke(*args) -> tuple[int, str, str]:
        status = main(["convert", *map(str, args)])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return invoke


def test_backoff_is_full_jitter_from_one_second_capped_at_sixty():
    top = RetryPolicy(random=lambda: 1.0)
    assert [top.delay(k) for k in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert [RetryPolicy(random=lambda: 0.25).delay(k) for k in (0, 3, 9)] == [0.25, 2.0, 15.0]
    assert RetryPolicy(random=lambda: 0.0).delay(4) == 0.0
    # Retry-After wins when longer than the draw, up to the cap
    assert top.delay(0, retry_after=7) == 7 and top.delay(5, retry_after=7) == 32
    assert top.delay(0, retry_after=3600) == 60
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    assert 8 < retry_after_seconds(formatdate(time.time() + 10, usegmt=True)) <= 10


def test_each_page_is_one_chat_completion_with_a_lossless_png(noise_png):
    stub = StubEndpoint()
    with (
        running(stub) as url,
        EndpointConverter(url, prompt="Only the text.", max_new_tokens=77) as converter,
    ):
        results = list(converter.convert(noise_png))
    assert [(r.page, r.markdown, r.tokens, r.fastmtp, r.error) for r in results] == [
        (1, ANSWER, 3, None, None)
    ]
    assert results[0].seconds > 0
    [chat] = stub.chats
    assert stub.requests[0].path == "/v1/models"  # the served model's default: its first id
    body = chat.body
    assert body["model"] == "stub-model" and body["max_tokens"] == 77 and body["temperature"] == 0
    assert "vllm_xargs" not in body  # not a vLLM server
    image, text = body["messages"][-1]["content"]
    assert text == {"type": "text", "text": "Only the text."}
    prefix = "data:image/png;base64,"
    assert image["image_url"]["url"].startswith(prefix)
    sent = Image.open(io.BytesIO(base64.b64decode(image["image_url"]["url"][len(prefix) :])))
    with open_document(noise_png) as document:
        assert np.array_equal(np.asarray(sent), np.asarray(document.render(1)))


def test_vllm_endpoints_get_the_loop_guard_settings(noise_png):
    # the model list is not there at start (the server is still loading): asked again before the page
    stub = StubEndpoint(owned_by="vllm", models_unavailable=1)
    with running(stub) as url, EndpointConverter(url, served_model="stub-model") as converter:
        assert next(converter.convert(noise_png)).ok
    assert [r.path for r in stub.requests] == ["/v1/models", "/v1/models", "/v1/chat/completions"]
    assert stub.chats[0].body["vllm_xargs"] == {
        "ngram_size": 35,
        "window_size": 1024,
        "whitelist_token_ids": [128821, 128822],
    }


def test_busy_broken_slow_and_dropped_answers_are_retried_with_backoff(noise_png):
    script = [
        Step("status", 429, retry_after="1"),
        Step("status", 503),
        Step("slow", seconds=3.0),
        Step("drop"),
        OK,
    ]
    stub = StubEndpoint(script)
    policy = FAST(max_delay=5.0, timeout=0.5, failures_before_cooldown=10)  # no rest: one endpoint
    with running(stub) as url, EndpointConverter(url, policy=policy, concurrency=1) as converter:
        [result] = list(converter.convert(noise_png))
    assert result.ok and result.markdown == ANSWER
    times = [r.at for r in stub.chats]
    assert len(times) == 5
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps[0] >= 1.0  # Retry-After: 1 honoured over the 10 ms draw
    assert gaps[1] < 0.9  # after the 503 the backoff's own 20 ms
    assert gaps[2] >= 0.5  # the slow answer was given up at the 0.5 s timeout, not awaited for 3 s
    assert gaps[2] < 2.5
    assert gaps[3] < 0.9


@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_answers_that_blame_the_request_are_final(noise_png, status):
    stub = StubEndpoint([Step("status", status)])
    with running(stub) as url, EndpointConverter(url, policy=FAST()) as converter:
        [result] = list(converter.convert(noise_png))
    assert len(stub.chats) == 1
    assert result.markdown is None and f"HTTP {status}: scripted {status}" in result.error


def test_a_page_that_never_succeeds_is_a_failed_page(cli, noise_png, tmp_path):
    stub = StubEndpoint([Step("status", 503)])
    out = tmp_path / "out"
    with running(stub) as url:
        status, _, err = cli(noise_png, "-o", out, "--endpoint", url, "--retries", "2")
    assert status == 1
    assert len(stub.chats) == 3  # the first attempt and two retries
    reason = f"no answer after 3 attempts; the last: {url}/chat/completions: HTTP 503: scripted 503"
    assert (out / "noise.md").read_text() == f"<!-- page 1: not converted: {reason} -->\n"
    assert f"error: {noise_png}, page 1: {reason}" in err


def test_an_endpoint_failing_in_a_row_rests_and_the_others_take_its_pages(tmp_path):
    broken = StubEndpoint([Step("status", 500)])
    healthy = StubEndpoint([Step("slow", seconds=1.0)])  # busy while the other fails three times
    pdf = write_pdf(tmp_path / "four.pdf", 4)
    policy = FAST(cooldown=60.0)
    with running(broken) as bad, running(healthy) as good:
        with EndpointConverter(
            [bad, good], policy=policy, concurrency=2, served_model="stub-model"
        ) as converter:
            results = list(converter.convert(pdf))
    assert [r.markdown for r in results] == [ANSWER] * 4
    # the broken endpoint, picked while the healthy one was busy, failed three times in a row and rested
    assert len(broken.chats) == 3
    assert len(healthy.chats) == 4


def test_requests_go_where_fewest_are_in_flight(tmp_path):
    fast = StubEndpoint([Step("slow", seconds=0.05)])
    slow = StubEndpoint([Step("slow", seconds=0.6)])
    pdf = write_pdf(tmp_path / "twelve.pdf", 12)
    with running(slow) as first, running(fast) as second:
        with EndpointConverter([first, second], concurrency=4, served_model="stub-model") as converter:
            assert all(r.ok for r in converter.convert(pdf))
    assert len(fast.chats) + len(slow.chats) == 12
    assert len(fast.chats) >= 2 * len(slow.chats)  # the quick one finishes its pages and takes more
    assert max(fast.peak_in_flight, slow.peak_in_flight) <= 4


def test_page_bitmaps_alive_at_once_are_bounded(tmp_path, monkeypatch):
    alive = []  # one entry per page bitmap not yet freed
    most = []
    encode = endpoints.png_bytes

    def counting_encode(image):
        alive.append(image.size)
        weakref.finalize(image, alive.pop)
        most.append(len(alive))
        return encode(image)

    monkeypatch.setattr(endpoints, "png_bytes", counting_encode)
    stub = StubEndpoint([Step("slow", seconds=0.02)])
    with running(stub) as url, EndpointConverter(url, concurrency=4) as converter:
        assert sum(r.ok for r in converter.convert(write_pdf(tmp_path / "long.pdf", 24))) == 24
    assert len(most) == 24 and max(most) <= min(4, os.cpu_count())
    assert stub.peak_in_flight <= 4


def test_outputs_are_those_of_a_local_run(cli, noise_png, tmp_path):
    pdf = write_pdf(tmp_path / "two.pdf", 2)
    stub = StubEndpoint()
    with running(stub) as url:
        status, out, err = cli(pdf, noise_png, "--endpoint", url, "--format", "json")
        assert status == 0, err
        assert "tok/s" in err and "3/3" in err  # the local run's progress bar
        documents = [json.loads(line) for line in out.splitlines()]
        status, out, err = cli(pdf, "--endpoint", url, "--pages", "2")
    assert status == 0, err
    assert out == f"<!-- page 2 -->\n\n{ANSWER}\n\n"
    assert [d["source"] for d in documents] == [str(pdf), str(noise_png)]
    assert [p["page"] for p in documents[0]["pages"]] == [1, 2]
    page = documents[1]["pages"][0]
    assert page["seconds"] > 0
    assert page == {
        "page": 1,
        "markdown": ANSWER,
        "tokens": 3,
        "seconds": page["seconds"],
        "finish_reason": "stop",
        "confidence": None,  # the stub sends no log-probabilities
        "mean_logprob": None,
        "min_logprob": None,
        "temperature": 0.0,
        "fastmtp": None,
        "error": None,
    }


def test_server_options_are_refused_by_name(cli, noise_png):
    url = "http://127.0.0.1:9/v1"  # never reached: the options are refused first
    status, _, err = cli(noise_png, "--endpoint", url, "--batch-size", "4")  # even at the default value
    assert status == 2 and "--batch-size cannot be used with --endpoint" in err
    status, _, err = cli(noise_png, "--endpoint", url, "--model", "m", "--dtype", "auto", "--no-mtp")
    assert status == 2 and "--model, --no-mtp, --dtype cannot be used with --endpoint" in err
    assert cli(noise_png, "--resume")[0] == 2
    status, _, err = cli(noise_png, "--endpoint", url, "--resume")
    assert status == 2 and "--resume needs -o" in err
    status, _, err = cli(noise_png, "--endpoint", "127.0.0.1:8000")
    assert status == 2 and "not an http(s) base URL" in err
    with pytest.raises(UserError, match="batch_size, mode: set on the server"):
        jina_ocr.convert(noise_png, endpoint=url, batch_size=2, mode="tiny")
    with pytest.raises(UserError, match="concurrency: only with endpoint="):
        jina_ocr.convert(noise_png, concurrency=2)


def test_a_blank_page_is_not_sent(tmp_path):
    path = tmp_path / "gap.pdf"
    path.write_bytes(pdf_with_a_blank_second_page())
    stub = StubEndpoint()
    with running(stub) as url, EndpointConverter(url) as converter:
        results = list(converter.convert(path))
    assert [(r.page, r.markdown, r.tokens) for r in results] == [(1, ANSWER, 3), (2, "", 0), (3, ANSWER, 3)]
    assert len(stub.chats) == 2


def test_python_api_converts_through_an_endpoint(noise_png):
    stub = StubEndpoint()
    with running(stub) as url:
        results = list(jina_ocr.convert(noise_png, endpoint=[url], max_new_tokens=5))
    assert [(r.page, r.markdown) for r in results] == [(1, ANSWER)]
    assert stub.chats[0].body["max_tokens"] == 5


def run_cli_process(*args) -> subprocess.Popen:
    """The installed command in its own process (to be killed or interrupted like a user's)."""
    return subprocess.Popen(
        [sys.executable, "-m", "jina_ocr.cli", "convert", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def two_page_pdfs(folder: Path, count: int) -> Path:
    folder.mkdir()
    for index in range(1, count + 1):
        write_pdf(folder / f"d{index}.pdf", 2)
    return folder


def test_resume_after_a_kill_converts_only_what_is_missing(tmp_path):
    documents = two_page_pdfs(tmp_path / "docs", 4)
    out = tmp_path / "out"
    # one page at a time: d1 gets a final 400 on its page 2, d2 converts, then d3's first page hangs
    first = StubEndpoint([OK, Step("status", 400), OK, OK, Step("hang")])
    with running(first) as url:
        process = run_cli_process(documents, "-o", out, "--endpoint", url, "--concurrency", "1")
        try:
            wait_for(lambda: (out / "d2.md").exists() and len(first.chats) >= 5)
        finally:
            process.kill()
            process.communicate(timeout=30)
    assert sorted(p.name for p in out.iterdir()) == [".jina-ocr-convert.json", "d1.md", "d2.md"]
    assert "<!-- page 2: not converted: " in (out / "d1.md").read_text()
    done = (out / "d2.md").stat().st_mtime_ns

    second = StubEndpoint()
    with running(second) as url:
        refused = run_cli_process(
            documents, "-o", out, "--endpoint", url, "--resume", "--max-new-tokens", "9"
        )
        _, err = refused.communicate(timeout=60)
        assert refused.returncode == 2
        assert f"other options: --max-new-tokens (was {DEFAULT_MAX_NEW_TOKENS}, now 9)" in err
        resumed = run_cli_process(documents, "-o", out, "--endpoint", url, "--resume")
        _, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert "1 of 4 documents already converted" in err
    assert len(second.chats) == 6  # d1 again (it had a failed page), d3 and d4; not d2
    assert (out / "d2.md").stat().st_mtime_ns == done
    for name in ("d1", "d3", "d4"):
        assert (
            out / f"{name}.md"
        ).read_text() == f"<!-- page 1 -->\n\n{ANSWER}\n\n<!-- page 2 -->\n\n{ANSWER}\n"


def test_ctrl_c_cancels_and_leaves_only_complete_files(tmp_path):
    documents = two_page_pdfs(tmp_path / "docs", 3)
    out = tmp_path / "out"
    stub = StubEndpoint([OK, OK, Step("hang")])
    with running(stub) as url:
        process = run_cli_process(documents, "-o", out, "--endpoint", url, "--concurrency", "2")
        try:
            wait_for(lambda: (out / "d1.md").exists() and len(stub.chats) >= 4)
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=30)
        finally:
            process.kill()
    assert process.returncode == 130 and "interrupted" in err
    assert sorted(p.name for p in out.iterdir()) == [".jina-ocr-convert.json", "d1.md"]


def test_resume_of_json_outputs_redoes_documents_with_failed_pages(cli, tmp_path):
    documents = two_page_pdfs(tmp_path / "docs", 3)
    out = tmp_path / "out"
    first = StubEndpoint([OK, OK, OK, Step("status", 422), OK])  # d2's page 2 fails
    with running(first) as url:
        status, _, _ = cli(documents, "-o", out, "--format", "json", "--endpoint", url, "--concurrency", "1")
    assert status == 1
    again = StubEndpoint()
    with running(again) as url:
        status, _, err = cli(documents, "-o", out, "--format", "json", "--endpoint", url, "--resume")
    assert status == 0, err
    assert len(again.chats) == 2 and "2 of 3 documents already converted" in err
    assert [p["error"] for p in json.loads((out / "d2.json").read_text())["pages"]] == [None, None]


def test_a_full_disk_under_the_resume_record_is_one_line_and_nothing_is_sent(cli, tmp_path, monkeypatch):
    import errno

    from jina_ocr.commands import _output

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_output, "write_atomic", full)
    documents = two_page_pdfs(tmp_path / "docs", 1)
    stub = StubEndpoint()
    with running(stub) as url:
        status, _, err = cli(documents, "-o", tmp_path / "out", "--endpoint", url)
    assert status == 2 and stub.chats == []
    assert err.strip().splitlines()[-1] == (
        f"jina-ocr convert: error: {tmp_path / 'out' / '.jina-ocr-convert.json'}: cannot be written "
        "(No space left on device)"
    )
