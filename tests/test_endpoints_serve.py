"""``convert --endpoint`` against two real ``jina-ocr serve`` processes on 127.0.0.1.

Both serve the lively tiny export (its text differs from page to page) with ``--batch-size 1`` in the
``tiny`` mode; the expected texts come from a local run of the same model folder with batch size 1,
in this process. The last test stops one server mid-run.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pymupdf
import pytest
import torch
from loopback import wait_until_healthy

from jina_ocr.cli import main
from jina_ocr.services import endpoints

ROOT = Path(__file__).resolve().parents[1]
MODEL_OPTIONS = ["--batch-size", "1", "--mode", "tiny", "--max-new-tokens", "6"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def servers(lively_export, tmp_path_factory):
    """Two ``jina-ocr serve`` processes: (process, base_url) each, up and answering /health."""
    logs = tmp_path_factory.mktemp("serve-logs")
    # the same thread count as this process, so that both sides compute the same float sums
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    started = []
    for index in range(2):
        port = free_port()
        command = [sys.executable, "-m", "jina_ocr.cli", "serve", "--model", str(lively_export)]
        command += ["--port", str(port), *MODEL_OPTIONS]
        log = (logs / f"serve-{index}.log").open("w")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        started.append((process, f"http://127.0.0.1:{port}", log))
    try:
        for process, base, log in started:
            wait_until_healthy(process, base, Path(log.name), seconds=180, pause=0.2)
        yield [(process, f"{base}/v1") for process, base, _ in started]
    finally:
        for process, _, log in started:
            process.kill()
            process.wait(timeout=30)
            log.close()


@pytest.fixture(scope="module")
def documents(tmp_path_factory, fixtures_dir) -> Path:
    """Several documents: a two-page PDF, a scan, and a three-page PDF of text pages."""
    folder = tmp_path_factory.mktemp("documents")
    shutil.copy(ROOT / "samples" / "sample.pdf", folder / "sample.pdf")
    shutil.copy(fixtures_dir / "tesseract" / "phototest.tif", folder / "phototest.tif")
    report = pymupdf.open()
    for number in range(1, 4):
        report.new_page().insert_text((72, 72), f"Section {number}\n" + "Quarterly figures. " * 20)
    report.save(folder / "report.pdf")
    return folder


def convert(*args) -> int:
    return main(["convert", *map(str, args)])


@pytest.fixture(scope="module")
def local(lively_export, documents, tmp_path_factory) -> Path:
    """The local run's outputs: <stem>.md and <stem>.json for every document."""
    out = tmp_path_factory.mktemp("local")
    for fmt in ("md", "json"):
        assert convert(documents, "-o", out, "--format", fmt, "--model", lively_export, *MODEL_OPTIONS) == 0
    return out


def pages(path: Path) -> list[tuple]:
    return [
        (p["page"], p["markdown"], p["tokens"], p["error"]) for p in json.loads(path.read_text())["pages"]
    ]


def test_endpoint_run_writes_the_texts_of_a_local_run(servers, local, documents, tmp_path):
    out = tmp_path / "out"
    urls = [arg for _, url in servers for arg in ("--endpoint", url)]
    for fmt in ("md", "json"):
        assert (
            convert(
                documents, "-o", out, "--format", fmt, *urls, "--concurrency", "3", "--max-new-tokens", "6"
            )
            == 0
        )
    names = sorted(p.name for p in local.iterdir() if not p.name.startswith("."))
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == names
    texts = {p.name: p.read_text() for p in local.glob("*.md")}
    assert len(set(texts.values())) == 3  # the model's text depends on the page
    for name, text in texts.items():
        assert (out / name).read_text() == text
    for path in (p for p in local.glob("*.json") if not p.name.startswith(".")):
        assert pages(out / path.name) == pages(path)
        assert all(p["fastmtp"] is None for p in json.loads((out / path.name).read_text())["pages"])
        assert all(p["fastmtp"] is not None for p in json.loads(path.read_text())["pages"])
    answered = [httpx.get(url.removesuffix("/v1") + "/health").json()["pages"] for _, url in servers]
    assert all(count > 0 for count in answered) and sum(answered) == 2 * 6  # both took pages


def test_a_server_stopped_mid_run_leaves_its_pages_to_the_other(
    servers, local, documents, tmp_path, monkeypatch
):
    (doomed, doomed_url), (_, survivor_url) = servers
    outcomes: list[tuple[str, bool]] = []
    release = endpoints.EndpointPool._release

    # The doomed server dies at its first answer: pages remain then however slowly it answers next to
    # the other (at its second, on a busy machine, the other had sometimes answered all the rest).
    def recording_release(pool, endpoint, failed):
        outcomes.append((endpoint.url, failed))
        if sum(not f for u, f in outcomes if u == doomed_url) == 1 and doomed.poll() is None:
            doomed.kill()  # as a crash would: requests in flight are cut, new ones refused
            doomed.wait()
        release(pool, endpoint, failed)

    monkeypatch.setattr(endpoints.EndpointPool, "_release", recording_release)
    monkeypatch.setattr(endpoints, "RetryPolicy", functools.partial(endpoints.RetryPolicy, first_delay=0.05))
    out = tmp_path / "out"
    urls = ["--endpoint", doomed_url, "--endpoint", survivor_url, "--concurrency", "2"]
    assert convert(documents, "-o", out, *urls, "--max-new-tokens", "6") == 0
    for path in local.glob("*.md"):
        assert (out / path.name).read_text() == path.read_text()
    doomed_answers = [failed for url, failed in outcomes if url == doomed_url]
    assert doomed_answers.count(False) == 1 and doomed_answers.count(True) >= 1  # answered, then failed
    assert [failed for url, failed in outcomes if url == survivor_url].count(False) == 6 - 1
