"""Documents by URL end to end, from a real HTTP server on 127.0.0.1 (``document_server``).

``jina-ocr convert URL`` and ``jina_ocr.convert(url)`` run in this process with the tiny export;
``jina-ocr serve --allow-urls`` runs as two real processes serving the lively tiny export (its text
differs from page to page): one with ``--allow-private-urls`` (the document server is on loopback),
one without it, which must refuse that server. Expected texts come from the same server's upload
endpoint, or from converting the same bytes locally, so a URL path that fetched or selected the
wrong thing would show.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from document_server import DocumentServer
from loopback import wait_until_healthy
from PIL import Image, ImageDraw
from test_endpoints_serve import free_port

import jina_ocr
from jina_ocr.commands.convert import output_names
from jina_ocr.services.fetch import FetchPolicy, RefusedURL

SERVE_OPTIONS = ["--mode", "tiny", "--max-new-tokens", "6", "--batch-size", "2", "--fetch-timeout", "1"]
MAX_REQUEST = 1024 * 1024
SAMPLE_PDF = Path(__file__).resolve().parents[1] / "samples" / "sample.pdf"


def report_pdf() -> bytes:
    """Three pages of different text, so that each page gets its own Markdown from the lively model."""
    import pymupdf

    document = pymupdf.open()
    for number, words in enumerate(("Revenue grew", "Costs fell sharply", "Outlook: steady"), 1):
        page = document.new_page(width=300, height=400)
        page.insert_text(
            (30, 60 + 40 * number), f"{number}. {words}\n" + "figures " * 4 * number, fontsize=14
        )
    return document.tobytes()


def scan_png() -> bytes:
    image = Image.new("RGB", (320, 200), "white")
    ImageDraw.Draw(image).text((20, 80), "Invoice 2024-117: total 380 EUR", fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


REPORT = report_pdf()
SCAN = scan_png()


@pytest.fixture(scope="module")
def documents():
    files = {
        "report.pdf": (REPORT, "application/pdf"),
        "scan.png": (SCAN, "image/png"),
        "index.html": (b"<!doctype html><title>Report</title>" + b"<p>text</p>" * 200, "text/html"),
        "": (REPORT, "application/pdf"),  # at "/"
    }
    with DocumentServer(files) as server:
        yield server


def markers(markdown: str) -> list[str]:
    return re.findall(r"<!-- page (\d+)(?::| -->)", markdown)


def test_convert_a_url_with_pages_into_a_file_named_from_its_path(run, documents, tmp_path):
    url = documents.url("/files/report.pdf?token=abc&v=2")
    status, _, err = run(url, "--pages", "3", "--allow-private-urls", "-o", tmp_path)
    assert status == 0, err
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["report.md"]
    assert markers((tmp_path / "report.md").read_text()) == ["3"]
    assert documents.requests[-1] == "/files/report.pdf?token=abc&v=2"  # the query went to the server

    status, _, err = run(url, "--pages", "2-3", "--allow-private-urls", "-o", tmp_path, "--format", "json")
    assert status == 0, err
    record = json.loads((tmp_path / "report.json").read_text())
    assert record["source"] == url and [p["page"] for p in record["pages"]] == [2, 3]


def test_convert_numbers_outputs_whose_names_collide(run, documents, tmp_path):
    first, second = documents.url("/report.pdf?v=1"), documents.url("/archive/report.pdf")
    root = documents.url("/")  # a URL whose path names no file is named after its host
    status, _, err = run(first, second, root, "--pages", "1", "--allow-private-urls", "-o", tmp_path)
    assert status == 0, err
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "127.0.0.1.md",
        "report-2.md",
        "report.md",
    ]
    assert (tmp_path / "report.md").read_text() == (tmp_path / "report-2.md").read_text()

    status, out, err = run(first, SAMPLE_PDF, "--pages", "1", "--allow-private-urls")
    assert status == 0, err
    assert f"<!-- document: {first} -->" in out and f"<!-- document: {SAMPLE_PDF} -->" in out


def test_output_names_number_collisions_in_input_order(tmp_path):
    items = [
        "https://a.example/report.pdf?v=1",
        "https://b.example/x/report.pdf",
        tmp_path / "report.png",
        "https://a.example/report-2.pdf",
        "https://a.example/report.pdf?v=1",  # the same input twice keeps its one name
        "https://c.example/REPORT.pdf",
    ]
    assert output_names(items, ".md") == [
        "report.md",
        "report-3.md",  # report-2 belongs to the input of that name
        "report-4.md",
        "report-2.md",
        "report.md",
        "REPORT-5.md",
    ]


def test_convert_reports_each_refused_url_in_one_line_and_converts_the_rest(run, documents, tmp_path):
    before = len(documents.requests)
    private = documents.url("/report.pdf")
    status, _, err = run(private, "file:///etc/passwd", SAMPLE_PDF, "--pages", "1", "-o", tmp_path)
    assert status == 1
    assert (
        f"jina-ocr convert: error: {private}: refused: 127.0.0.1 is a loopback address; private networks "
        "are fetched only with --allow-private-urls\n" in err
    )
    assert (
        "jina-ocr convert: error: file:///etc/passwd: only http and https URLs are fetched, not file:\n"
        in err
    )
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [
        "sample.md"
    ]  # the local file still converted
    assert len(documents.requests) == before  # nothing was fetched from the private address

    status, _, err = run(documents.url("/slow"), "--allow-private-urls", "--fetch-timeout", "0.5")
    assert status == 1 and "/slow: no data for 0.5 s (read timeout)" in err
    status, _, err = run(documents.url("/endless"), "--allow-private-urls", "--max-fetch-mb", "0.5")
    assert status == 1 and "passed the limit of 524,288 bytes; the download was stopped" in err
    assert run(documents.url("/report.pdf"), "--fetch-timeout", "0")[0] == 2


def test_the_python_api_converts_a_url_as_it_converts_the_bytes(tiny_export, documents):
    options = dict(model=tiny_export, mode="tiny", max_new_tokens=3)
    url = documents.url("/report.pdf?x=1")
    [page] = jina_ocr.convert(url, pages="2", fetch_policy=FetchPolicy(allow_private=True), **options)
    [alone] = jina_ocr.convert(REPORT, pages=[2], **options)
    assert (page.source, page.page, page.markdown) == (url, 2, alone.markdown)
    with pytest.raises(RefusedURL, match="loopback address"):
        jina_ocr.convert(url, pages="2", **options)


def test_credentials_in_a_url_are_shown_redacted_by_convert_and_the_api(
    run, tiny_export, documents, tmp_path
):
    secret = documents.url("/report.pdf").replace("://", "://user:hunter2@")
    shown = documents.url("/report.pdf").replace("://", "://***@")
    status, _, err = run(secret, "--pages", "1", "--allow-private-urls", "-o", tmp_path, "--format", "json")
    assert status == 0, err
    assert json.loads((tmp_path / "report.json").read_text())["source"] == shown
    status, _, err = run(secret.replace("report", "missing"), "--allow-private-urls")
    assert status == 1 and "hunter2" not in err and "://***@127.0.0.1" in err
    options = dict(
        model=tiny_export, mode="tiny", max_new_tokens=2, fetch_policy=FetchPolicy(allow_private=True)
    )
    [page] = jina_ocr.convert(secret, pages="1", **options)
    assert page.source == shown


@pytest.fixture(scope="module")
def servers(lively_export, tmp_path_factory):
    """Base URLs of two ``jina-ocr serve --allow-urls`` processes: with and without
    ``--allow-private-urls``."""
    logs = tmp_path_factory.mktemp("serve-logs")
    flags = {"trusting": ["--allow-private-urls"], "strict": []}
    started = {}
    for name, extra in flags.items():
        port = free_port()
        command = [sys.executable, "-m", "jina_ocr.cli", "serve", "--model", str(lively_export)]
        command += ["--port", str(port), "--allow-urls", *extra, *SERVE_OPTIONS]
        command += ["--max-request-mb", str(MAX_REQUEST / 2**20)]
        log = (logs / f"{name}.log").open("w")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        started[name] = (process, f"http://127.0.0.1:{port}", log)
    try:
        for process, base, log in started.values():
            wait_until_healthy(process, base, Path(log.name), seconds=180, pause=0.2)
        yield {name: base for name, (_, base, _) in started.items()}
    finally:
        for process, _, log in started.values():
            process.kill()
            process.wait(timeout=30)
            log.close()


def upload(base: str, pages: str) -> list[dict]:
    """What the same server answers for the same PDF uploaded, the reference for ``GET /{url}``."""
    files = {"file": ("report.pdf", REPORT)}
    response = httpx.post(f"{base}/v1/documents", files=files, data={"pages": pages}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["pages"]


def test_a_pdf_page_by_x_page(servers, documents):
    base = servers["trusting"]
    url = documents.url("/files/report.pdf?token=abc")
    response = httpx.get(f"{base}/{url}", headers={"X-Page": "3"}, timeout=120)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"
    assert documents.requests[-1] == "/files/report.pdf?token=abc"
    [expected] = upload(base, "3")
    assert response.text == f"<!-- page 3 -->\n\n{expected['markdown'].strip()}\n"

    response = httpx.get(
        f"{base}/{url}", headers={"X-Page": "1,3", "Accept": "application/json"}, timeout=120
    )
    assert response.status_code == 200, response.text
    record = response.json()
    assert record["source"] == url
    expected = upload(base, "1,3")
    assert [(p["page"], p["markdown"]) for p in record["pages"]] == [
        (p["page"], p["markdown"]) for p in expected
    ]
    assert record["pages"][0]["markdown"] != record["pages"][1]["markdown"]  # really two different pages

    for pages, message in (("3-1", "runs backwards"), ("9", "page 9: out of range")):
        response = httpx.get(f"{base}/{url}", headers={"X-Page": pages}, timeout=60)
        assert response.status_code == 400 and message in response.json()["error"]["message"]


def chat(base: str, url: str) -> httpx.Response:
    message = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
    body = {"messages": [message], "max_tokens": 6}  # no model name: the one served
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)


def test_an_image_url_in_a_chat_request(servers, documents):
    base = servers["trusting"]
    fetched = chat(base, documents.url("/scan.png"))
    assert fetched.status_code == 200, fetched.text
    inline = chat(base, "data:image/png;base64," + base64.b64encode(SCAN).decode())
    assert fetched.json()["choices"][0]["message"] == inline.json()["choices"][0]["message"]
    assert fetched.json()["usage"] == inline.json()["usage"]


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    return response.json()["error"]["message"]


def test_each_refusal_has_its_status_and_one_line_naming_the_url(servers, documents):
    base = servers["trusting"]
    get = lambda url: httpx.get(f"{base}/{url}", timeout=60)  # noqa: E731

    loop = documents.url("/loop")
    assert error(get(loop), 400) == f"{loop}: more than 5 redirects (a redirect loop?)"
    html = documents.url("/index.html")
    assert error(get(html), 400) == (
        f"{html}: the server sent a body of type text/html, which is neither a PDF nor a PNG, JPEG, TIFF, "
        "WebP or BMP image"
    )
    assert error(get("file:///etc/passwd"), 400) == (
        "file:///etc/passwd: only http and https URLs are fetched, not file:"
    )
    assert "only http and https URLs are fetched, not file:" in error(chat(base, "file:///etc/passwd"), 400)
    start = time.monotonic()
    assert error(get(documents.url("/slow")), 504).endswith("/slow: no data for 1 s (read timeout)")
    assert time.monotonic() - start < 4
    assert "the server answered 404" in error(get(documents.url("/missing.pdf")), 502)

    documents.endless_done.clear()
    message = error(get(documents.url("/endless")), 413)
    assert message.endswith(f"passed the limit of {MAX_REQUEST:,} bytes; the download was stopped")
    assert documents.endless_done.wait(30), "the document server is still sending"
    assert documents.endless_sent < 24 * MAX_REQUEST  # stopped near the limit, not at the 512 MiB cap


def test_without_allow_private_urls_a_loopback_server_is_refused_unasked(servers, documents):
    before = len(documents.requests)
    url = documents.url("/report.pdf")
    message = error(httpx.get(f"{servers['strict']}/{url}", headers={"X-Page": "1"}, timeout=60), 400)
    assert message == (
        f"{url}: refused: 127.0.0.1 is a loopback address; private networks are fetched only with "
        "--allow-private-urls"
    )
    assert "loopback address" in error(chat(servers["strict"], documents.url("/scan.png")), 400)
    assert len(documents.requests) == before
    assert httpx.get(f"{servers['strict']}/health").status_code == 200  # the other routes are as they were
    assert httpx.get(f"{servers['strict']}/v1/chat/completions").status_code == 405
