"""``jina-ocr serve`` over real HTTP on 127.0.0.1: the official ``openai`` client, PDF uploads, limits.

The server runs in a background thread of this process on a free port, serving the tiny exported
model in the processor's ``tiny`` mode (one small forward per page). Expected answers are computed by
running the same converter directly, one image at a time.
"""

from __future__ import annotations

import base64
import io
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pymupdf
import pytest
from loopback import serve_in_thread
from PIL import Image
from test_documents import pdf_with_a_blank_second_page, pdf_with_pages, png_header_only

from jina_ocr.services.conversion import Converter
from jina_ocr.services.server import Limits, create_app

SAMPLE_PAGES = 2
LIMITS = Limits(max_request_bytes=2 * 1024 * 1024, max_pages=3, max_pixels=4_000_000, max_queued_pages=64)


@pytest.fixture(scope="module")
def converter(tiny_mtp_export) -> Converter:
    return Converter.from_pretrained(
        tiny_mtp_export, device="cpu", max_new_tokens=8, batch_size=8, mode="tiny", dpi=36
    )


@pytest.fixture(scope="module")
def server(converter):
    """Base URL of a running server; a 0.3 s batching window makes concurrent requests share batches."""
    app = create_app(converter, "jina-ocr-tiny", LIMITS, batch_wait_seconds=0.3)
    with serve_in_thread(app) as base:
        yield base


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="not-needed", max_retries=0, timeout=120)


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def image_message(*urls: str, text: str | None = None) -> list[dict]:
    parts = [{"type": "text", "text": text}] if text else []
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return [{"role": "system", "content": "You are an OCR engine."}, {"role": "user", "content": parts}]


@pytest.fixture(scope="module")
def scans(fixtures_dir) -> list[Image.Image]:
    return [
        Image.open(fixtures_dir / "tesseract" / "phototest.tif").convert("RGB"),
        Image.open(fixtures_dir / "tesseract" / "eurotext.tif").convert("RGB"),
        Image.open(fixtures_dir / "tesseract" / "phototest-rotated-L.png").convert("RGB"),
        Image.open(fixtures_dir / "tesseract" / "phototest.tif").convert("RGB").rotate(180),
    ]


def test_health_and_models(server):
    health = httpx.get(f"{server}/health").json()
    assert health["status"] == "ok" and health["model"] == "jina-ocr-tiny"
    models = httpx.get(f"{server}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["jina-ocr-tiny"]


def test_chat_completion_with_an_image(client, converter, scans):
    [expected] = converter.generate([scans[0]], max_new_tokens=3)
    reply = client.chat.completions.create(
        model="jina-ocr-tiny", messages=image_message(data_url(png(scans[0]))), max_tokens=3
    )
    assert reply.object == "chat.completion" and reply.model == "jina-ocr-tiny"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == expected.markdown
    assert reply.usage.completion_tokens == expected.tokens
    assert reply.usage.prompt_tokens == expected.prompt_tokens
    assert reply.choices[0].finish_reason == ("length" if expected.tokens == 3 else "stop")


def test_text_part_replaces_the_prompt(client, converter, scans):
    [expected] = converter.generate([scans[2]], prompt="List the words.", max_new_tokens=2)
    reply = client.chat.completions.create(
        model="jina-ocr-tiny",
        messages=image_message(data_url(png(scans[2])), text="List the words."),
        max_completion_tokens=2,
    )
    assert reply.choices[0].message.content == expected.markdown
    assert reply.usage.prompt_tokens == expected.prompt_tokens


def test_streaming_sends_the_same_text_as_events(client, scans):
    messages = image_message(data_url(png(scans[1])))
    whole = client.chat.completions.create(model="jina-ocr-tiny", messages=messages, max_tokens=3)
    chunks = list(
        client.chat.completions.create(
            model="jina-ocr-tiny",
            messages=messages,
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_pdf_upload_returns_markdown_per_selected_page(server, fixtures_dir):
    sample = Path(__file__).resolve().parents[1] / "samples" / "sample.pdf"
    reply = httpx.post(
        f"{server}/v1/documents",
        files={"file": ("sample.pdf", sample.read_bytes(), "application/pdf")},
        data={"pages": "2", "max_tokens": "2"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["source"] == "sample.pdf"
    [page] = body["pages"]
    assert page["page"] == 2 and page["error"] is None and isinstance(page["markdown"], str)
    assert 0 <= page["tokens"] <= 2 and isinstance(page["fastmtp"], dict)

    scan = (fixtures_dir / "tesseract" / "phototest.tif").read_bytes()
    reply = httpx.post(
        f"{server}/v1/documents", files={"file": ("scan.tif", scan)}, data={"max_tokens": "1"}, timeout=120
    )
    assert reply.status_code == 200 and [p["page"] for p in reply.json()["pages"]] == [1]


def test_blank_document_pages_are_empty_while_chat_images_still_go_to_the_model(server, client):
    reply = httpx.post(
        f"{server}/v1/documents",
        files={"file": ("gap.pdf", pdf_with_a_blank_second_page(), "application/pdf")},
        data={"max_tokens": "2"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    pages = reply.json()["pages"]
    assert [(p["page"], p["error"]) for p in pages] == [(1, None), (2, None), (3, None)]
    assert (pages[1]["markdown"], pages[1]["tokens"], pages[1]["fastmtp"]) == ("", 0, None)
    assert isinstance(pages[0]["fastmtp"], dict) and isinstance(
        pages[2]["fastmtp"], dict
    )  # read by the model
    blank = data_url(png(Image.new("RGB", (300, 200), "white")))
    answer = client.chat.completions.create(
        model="jina-ocr-tiny", messages=image_message(blank), max_tokens=2
    )
    assert answer.usage.prompt_tokens > 0


def assert_refused(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]


def test_bad_chat_requests_are_4xx_with_a_message(server, client, scans):
    with pytest.raises(openai.BadRequestError, match="has no image"):
        client.chat.completions.create(
            model="jina-ocr-tiny", messages=[{"role": "user", "content": "Read this."}]
        )
    with pytest.raises(openai.BadRequestError, match="valid base64"):
        client.chat.completions.create(
            model="jina-ocr-tiny", messages=image_message("data:image/png;base64,@@not base64@@")
        )
    with pytest.raises(openai.BadRequestError, match="neither a PDF nor"):
        client.chat.completions.create(
            model="jina-ocr-tiny", messages=image_message(data_url(b"hello world", "text/plain"))
        )
    with pytest.raises(openai.BadRequestError, match="max_tokens must be a positive integer"):
        client.chat.completions.create(
            model="jina-ocr-tiny", messages=image_message(data_url(png(scans[0]))), max_tokens=0
        )
    four = [data_url(png(scans[0]))] * 4
    with pytest.raises(openai.APIStatusError, match="4 pages in one request, over the limit of 3") as caught:
        client.chat.completions.create(model="jina-ocr-tiny", messages=image_message(*four))
    assert caught.value.status_code == 413
    with pytest.raises(openai.APIStatusError, match="3000x3000") as caught:
        client.chat.completions.create(
            model="jina-ocr-tiny", messages=image_message(data_url(png_header_only(3000, 3000)))
        )
    assert caught.value.status_code == 413
    assert_refused(httpx.post(f"{server}/v1/chat/completions", content=b"{not json"), 400, "not valid JSON")


def test_remote_image_urls_are_refused_and_never_fetched(server, client):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/page.png"
    try:
        with pytest.raises(openai.BadRequestError, match="never fetches remote URLs"):
            client.chat.completions.create(model="jina-ocr-tiny", messages=image_message(url))
        assert httpx.get(f"{server}/{url}").status_code == 404  # GET /{url} is there only with --allow-urls
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody ever connected
    finally:
        listener.close()


def test_oversized_bodies_are_413_whether_declared_or_streamed(server):
    big = b"x" * (LIMITS.max_request_bytes + 1)
    assert_refused(
        httpx.post(f"{server}/v1/chat/completions", content=big, timeout=60), 413, "over the limit"
    )

    def chunked_upload():  # a well-formed multipart upload without Content-Length, too long
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"\r\n\r\n%PDF-1.7\n'
        for _ in range(LIMITS.max_request_bytes // 65536 + 2):
            yield b"0" * 65536

    streamed = httpx.post(
        f"{server}/v1/documents",
        content=chunked_upload(),
        headers={"content-type": "multipart/form-data; boundary=b"},
        timeout=60,
    )
    assert_refused(streamed, 413, "over the limit")


def test_bad_uploads_are_4xx_with_a_message(server, fixtures_dir):
    def upload(data: bytes, name="doc.pdf", **fields) -> httpx.Response:
        return httpx.post(f"{server}/v1/documents", files={"file": (name, data)}, data=fields, timeout=60)

    assert_refused(upload(pdf_with_pages(5)), 413, "5 pages in one request, over the limit of 3")
    assert_refused(upload(pdf_with_pages(2), pages="3"), 400, "doc.pdf, page 3: out of range")
    assert_refused(upload(pdf_with_pages(2), pages="x"), 400, "invalid page selection")
    cut = (fixtures_dir / "olmocr" / "earnings.pdf").read_bytes()[:20000]
    assert_refused(upload(cut), 400, "doc.pdf: is truncated")
    locked = pymupdf.open(stream=pdf_with_pages(1), filetype="pdf").tobytes(
        encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="owner"
    )
    assert_refused(upload(locked), 400, "a password is needed")
    assert_refused(upload(locked, password="nope"), 400, "password is wrong")
    assert_refused(httpx.post(f"{server}/v1/documents", data={"pages": "1"}), 400, "file")


def test_a_page_over_the_pixel_limit_is_413_on_uploads_as_on_chat(server):
    """Refused from the page sizes before any page is rendered, as chat refuses it (at the server's
    36 dpi a 4010 pt page is 2005 x 2005 pixels, over the test limit of 4 M); other pages still work."""
    poster = pymupdf.open()
    poster.new_page(width=300, height=400)
    poster.new_page(width=4010, height=4010)
    reply = httpx.post(f"{server}/v1/documents", files={"file": ("poster.pdf", poster.tobytes())}, timeout=60)
    assert_refused(
        reply, 413, "poster.pdf, page 2: page would be 2005x2005 = 4,020,025 pixels, over the limit"
    )
    reply = httpx.post(
        f"{server}/v1/documents",
        files={"file": ("poster.pdf", poster.tobytes())},
        data={"pages": "1"},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["pages"][0]["error"] is None, reply.text
    huge = png_header_only(3000, 3000)
    reply = httpx.post(f"{server}/v1/documents", files={"file": ("huge.png", huge)}, timeout=60)
    assert_refused(reply, 413, "huge.png, page 1: image would be 3000x3000 = 9,000,000 pixels")


def test_eight_concurrent_requests_are_batched_and_each_answered_correctly(server, client, converter, scans):
    # Four images, each request with its own max_tokens: the random model's text alone could not tell
    # some images apart, but with distinct lengths any answer delivered to the wrong request shows.
    jobs = [(scans[i % 4], 1 + i) for i in range(8)]
    expected = [converter.generate([image], max_new_tokens=limit)[0] for image, limit in jobs]
    batches_before = httpx.get(f"{server}/health").json()["batches"]

    def ask(job):
        image, limit = job
        reply = client.chat.completions.create(
            model="jina-ocr-tiny", messages=image_message(data_url(png(image))), max_tokens=limit
        )
        return reply.choices[0].message.content, reply.usage.completion_tokens

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, jobs))
    assert answers == [(e.markdown, e.tokens) for e in expected]
    assert len({tokens for _, tokens in answers}) == 8
    health = httpx.get(f"{server}/health").json()
    assert health["largest_batch"] > 1  # requests shared generate calls
    assert health["batches"] - batches_before < 8
