"""One page loader: the same file gives the same pixels at the model's input whichever way it comes in.

Each input below is a small page whose two halves have known colours. It goes through the processor,
the OCR pipeline, ``jina_ocr.convert`` and ``jina-ocr serve`` (uploads and chat, over real HTTP on
127.0.0.1), all sharing one tiny exported model whose ``forward`` records the ``pixel_values`` it
gets. Every door must give the identical tensor, and the colours in it must be the ones computed
here from the file's own definition (transparent is white paper, 16-bit 30000 is level 117, an
Adobe CMYK JPEG and a plain one are both red, EXIF rotation turns the page).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import httpx
import numpy as np
import pymupdf
import pytest
import torch
from loopback import serve_in_thread
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

import jina_ocr
from jina_ocr.remote_code.pages_jina_ocr import load_page
from jina_ocr.runtime.documents import open_document
from jina_ocr.runtime.pdf import DEFAULT_DPI
from jina_ocr.services.conversion import Converter
from jina_ocr.services.server import create_app

WIDTH, HEIGHT = 128, 96
VIEW = 512  # the processor runs in tiny mode: every page stretched to one 512 px view
WHITE, BLACK, RED = (255, 255, 255), (0, 0, 0), (255, 0, 0)
JPEG_TOLERANCE = 3  # levels of JPEG's rounding on a flat colour; lossless formats are compared exactly


def first_pdf_page(path) -> Image.Image:
    """Page 1 of a PDF as every tool renders it (the processor itself takes images)."""
    with open_document(path) as document:
        return document.render(1)


def halves(left, right, mode: str) -> Image.Image:
    image = Image.new(mode, (WIDTH, HEIGHT), left)
    image.paste(Image.new(mode, (WIDTH // 2, HEIGHT), right), (WIDTH // 2, 0))
    return image


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def without_app14(jpeg: bytes) -> bytes:
    """The JPEG with its Adobe APP14 segment removed: its CMYK values then read as stored, uninverted."""
    out, at = bytearray(jpeg[:2]), 2
    while jpeg[at + 1] != 0xDA:  # up to the start of scan, segment by segment
        length = int.from_bytes(jpeg[at + 2 : at + 4], "big")
        if jpeg[at + 1] != 0xEE:
            out += jpeg[at : at + 2 + length]
        at += 2 + length
    return bytes(out + jpeg[at:])


def cmyk_to_rgb(c: int, k_m_y: tuple[int, int, int]) -> tuple[int, ...]:
    """Naive CMYK to RGB, written out: channel = 255 * (1 - ink / 255) * (1 - black / 255)."""
    m, y, k = k_m_y
    return tuple(round(255 * (1 - ink / 255) * (1 - k / 255)) for ink in (c, m, y))


def sixteen_bit_level(value: int) -> int:
    return round(value / 65535 * 255)


def build_inputs(folder: Path) -> dict[str, tuple[Path, str, tuple, tuple, int]]:
    """name -> (file, split "lr" or "tb", colour of the first half, of the second, tolerance)."""
    made = {}

    def add(name, data, split, first, second, tolerance=0):
        path = folder / name
        path.write_bytes(data)
        made[name] = (path, split, first, second, tolerance)

    add(
        "rgba.png",
        encoded(halves((0, 0, 0, 0), (200, 30, 40, 255), "RGBA"), "PNG"),
        "lr",
        WHITE,
        (200, 30, 40),
    )
    grey16 = np.full((HEIGHT, WIDTH), 30000, dtype=np.uint16)
    grey16[:, WIDTH // 2 :] = 65535
    level = sixteen_bit_level(30000)
    add("grey16.png", encoded(Image.fromarray(grey16), "PNG"), "lr", (level,) * 3, WHITE)
    bilevel = encoded(halves(0, 1, "1"), "TIFF", compression="group4")
    add("bilevel.tif", bilevel, "lr", BLACK, WHITE)
    add("la.png", encoded(halves((0, 0), (90, 255), "LA"), "PNG"), "lr", WHITE, (90, 90, 90))
    palette = halves(0, 1, "P")
    palette.putpalette([10, 20, 30, 200, 100, 50])
    add("palette.png", encoded(palette, "PNG", transparency=0), "lr", WHITE, (200, 100, 50))
    # Pillow writes CMYK JPEGs as Adobe does: inverted values and an APP14 marker saying so.
    red_ink, blue_ink = (0, 255, 255, 0), (255, 255, 0, 0)
    adobe = encoded(halves(red_ink, blue_ink, "CMYK"), "JPEG", quality=100)
    assert b"Adobe" in adobe
    red, blue = (cmyk_to_rgb(ink[0], ink[1:]) for ink in (red_ink, blue_ink))
    add("cmyk-adobe.jpg", adobe, "lr", red, blue, JPEG_TOLERANCE)
    inverted = (tuple(255 - v for v in ink) for ink in (red_ink, blue_ink))
    stored_as_is = encoded(halves(*inverted, "CMYK"), "JPEG", quality=100)
    add("cmyk.jpg", without_app14(stored_as_is), "lr", red, blue, JPEG_TOLERANCE)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display": the stored left half ends on top
    stored = halves(BLACK, WHITE, "RGB")
    add(
        "rotated.jpg",
        encoded(stored, "JPEG", quality=100, exif=exif.tobytes()),
        "tb",
        BLACK,
        WHITE,
        JPEG_TOLERANCE,
    )
    document = pymupdf.open()
    page = document.new_page(width=WIDTH * 72 / DEFAULT_DPI * 2, height=HEIGHT * 72 / DEFAULT_DPI * 2)
    page.draw_rect(pymupdf.Rect(0, 0, page.rect.width / 2, page.rect.height), color=None, fill=(0, 0, 0))
    add("page.pdf", document.tobytes(), "lr", BLACK, WHITE)
    return made


@pytest.fixture(scope="module")
def model_and_processor(tiny_export):
    model = AutoModelForImageTextToText.from_pretrained(tiny_export, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(tiny_export, trust_remote_code=True)
    processor.image_processor.mode = "tiny"
    seen: list[torch.Tensor] = []

    def record(module, args, kwargs):
        if kwargs.get("pixel_values") is not None:
            seen.append(kwargs["pixel_values"].detach().clone())

    model.register_forward_pre_hook(record, with_kwargs=True)
    return model, processor, seen


@pytest.fixture(scope="module")
def server(model_and_processor):
    model, processor, _ = model_and_processor
    app = create_app(Converter(model, processor, max_new_tokens=1), "jina-ocr-tiny")
    with serve_in_thread(app) as base:
        yield base


def the_one_view(seen: list[torch.Tensor]) -> torch.Tensor:
    assert len(seen) == 1, f"expected one forward with pixels, got {len(seen)}"
    [view] = seen
    seen.clear()
    assert view.shape == (1, 3, VIEW, VIEW)
    return view[0]


def level_at(view: torch.Tensor, x: int, y: int) -> tuple[int, ...]:
    """The 8-bit colour the normalised view holds at (x, y): v = (level / 255 - 0.5) / 0.5."""
    return tuple(round((float(v) * 0.5 + 0.5) * 255) for v in view[:, y, x])


def test_every_door_gives_the_same_pixels_and_the_expected_colours(model_and_processor, server, tmp_path):
    model, processor, seen = model_and_processor
    pipe = model.ocr_pipeline(processor)
    converter = Converter(model, processor, max_new_tokens=1)
    seen.clear()
    for name, (path, split, first, second, tolerance) in build_inputs(tmp_path).items():
        views = {}
        page = first_pdf_page(path) if name.endswith(".pdf") else path  # the processor takes images
        inputs = processor.prepare_ocr_inputs(page, dtype=model.dtype)
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=1, do_sample=False)
        views["processor"] = the_one_view(seen)

        pipe(page if name.endswith(".pdf") else str(path), max_new_tokens=1)
        views["pipeline"] = the_one_view(seen)

        [result] = jina_ocr.convert(path, model=converter)
        assert result.ok, result.error
        views["convert"] = the_one_view(seen)

        reply = httpx.post(f"{server}/v1/documents", files={"file": (name, path.read_bytes())}, timeout=120)
        assert reply.status_code == 200 and reply.json()["pages"][0]["error"] is None, reply.text
        views["serve /v1/documents"] = the_one_view(seen)

        url = f"data:application/octet-stream;base64,{base64.b64encode(path.read_bytes()).decode()}"
        chat = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]}
        reply = httpx.post(f"{server}/v1/chat/completions", json={**chat, "max_tokens": 1}, timeout=120)
        assert reply.status_code == 200, reply.text
        views["serve chat"] = the_one_view(seen)

        reference = views["processor"]
        for door, view in views.items():
            assert torch.equal(view, reference), f"{name}: {door} gives other pixels than the processor"
        quarter, three_quarters = VIEW // 4, 3 * VIEW // 4
        if split == "lr":
            points = ((quarter, VIEW // 2), (three_quarters, VIEW // 2))
        else:
            points = ((VIEW // 2, quarter), (VIEW // 2, three_quarters))
        for (x, y), expected in zip(points, (first, second), strict=True):
            got = level_at(reference, x, y)
            assert max(abs(g - e) for g, e in zip(got, expected, strict=True)) <= tolerance, (
                name,
                got,
                expected,
            )


def test_the_special_cases_against_their_definitions(tmp_path):
    """The page itself (before the view is resized): sizes and exact colours of the rules."""
    inputs = build_inputs(tmp_path)
    rotated = load_page(inputs["rotated.jpg"][0])
    assert rotated.size == (HEIGHT, WIDTH)  # EXIF orientation 6 swaps the axes
    assert load_page(inputs["rgba.png"][0]).getpixel((5, 5)) == WHITE
    assert (
        load_page(inputs["grey16.png"][0]).getpixel((5, 5))
        == (117, 117, 117)
        == (sixteen_bit_level(30000),) * 3
    )
    assert load_page(np.full((4, 4), 30000, dtype=np.uint16)).getpixel((0, 0)) == (117, 117, 117)
    # Values where the rounding rule and a truncating shift (v >> 8: 0, 0, 3, 117, 234, 255) part ways.
    wide = np.array([[0, 200, 1000, 30000, 60000, 65535]], dtype=np.uint16)
    rounded = [round(v / 257) for v in wide[0].tolist()]
    assert rounded == [0, 1, 4, 117, 233, 255]
    png = tmp_path / "wide16.png"
    Image.fromarray(wide).save(png)
    for source in (wide, png):
        assert [load_page(source).getpixel((x, 0))[0] for x in range(wide.shape[1])] == rounded
    assert (
        Image.open(inputs["grey16.png"][0]).convert("RGB").getpixel((5, 5)) == WHITE
    )  # what Pillow alone gives
    plain = inputs["cmyk.jpg"][0]
    assert (
        max(abs(a - b) for a, b in zip(load_page(plain).getpixel((5, 5)), RED, strict=True)) <= JPEG_TOLERANCE
    )
    assert Image.open(plain).convert("RGB").getpixel((5, 5))[0] < 10  # Pillow alone reads it inverted
    pdf = first_pdf_page(inputs["page.pdf"][0])
    assert (
        pdf.size == (2 * WIDTH, 2 * HEIGHT)
        and pdf.getpixel((5, 5)) == BLACK
        and pdf.getpixel((250, 5)) == WHITE
    )
