"""pipeline("image-to-text") (the pipeline shipped with the model) and the standard
pipeline("image-text-to-text") on an image, a PDF page and a batch of two."""

from __future__ import annotations

import pymupdf
import pytest
import torch
from PIL import Image
from test_documents import damaged_pdf
from transformers import AutoModelForImageTextToText, AutoProcessor, pipeline

from jina_ocr.remote_code.pages_jina_ocr import DEFAULT_DPI

GENERATE = {"max_new_tokens": 4, "use_mtp": False}


@pytest.fixture(scope="module")
def loaded(tiny_export):
    model = AutoModelForImageTextToText.from_pretrained(tiny_export, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(tiny_export, trust_remote_code=True)
    return model, processor


@pytest.fixture(scope="module")
def ocr_pipe(tiny_export):
    return pipeline("image-to-text", model=str(tiny_export), trust_remote_code=True)


def pages() -> list[Image.Image]:
    return [Image.new("RGB", (300, 200), (250, 250, 250)), Image.new("RGB", (200, 320), (20, 40, 60))]


def direct(model, processor, image) -> str:
    inputs = processor.prepare_ocr_inputs(image, dtype=model.dtype)
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, **GENERATE)
    return processor.decode_ocr(out, inputs["input_ids"])


def small_pdf(path) -> None:
    document = pymupdf.open()
    page = document.new_page(width=200, height=280)
    page.insert_text((20, 60), "Quarterly report", fontsize=18)
    document.new_page(width=280, height=200).insert_text((20, 60), "Second page", fontsize=14)
    document.save(path)


def test_ocr_pipeline_is_the_shipped_class(ocr_pipe):
    assert type(ocr_pipe).__name__ == "JinaOCRPipeline"
    assert type(ocr_pipe).__module__.startswith("transformers_modules.")


def test_ocr_pipeline_on_an_image_equals_direct_generation(ocr_pipe, loaded):
    image = pages()[0]
    result = ocr_pipe(image, generate_kwargs=GENERATE)
    assert result == [{"generated_text": direct(*loaded, image)}]


def test_ocr_pipeline_on_a_pdf_page_renders_at_144_dpi(ocr_pipe, loaded, tmp_path):
    pdf = tmp_path / "two_pages.pdf"
    small_pdf(pdf)
    with pymupdf.open(pdf) as document:
        pix = document[1].get_pixmap(dpi=DEFAULT_DPI, alpha=False)
        second = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    expected = direct(*loaded, second)
    assert ocr_pipe(str(pdf), page=2, generate_kwargs=GENERATE) == [{"generated_text": expected}]
    assert ocr_pipe({"pdf": pdf.read_bytes(), "page": 2}, generate_kwargs=GENERATE) == [
        {"generated_text": expected}
    ]
    with pytest.raises(ValueError, match="page 3 is out of range"):
        ocr_pipe(str(pdf), page=3, generate_kwargs=GENERATE)


def test_ocr_pipeline_refuses_oversized_and_damaged_pdf_pages(ocr_pipe, tmp_path, monkeypatch):
    """The pipeline's PDF pages follow the page loader's rules: the size is checked from the page box
    before anything is rendered, and a page MuPDF reports damage on is an error, not a blank page."""
    renders = []
    real = pymupdf.Page.get_pixmap
    monkeypatch.setattr(
        pymupdf.Page, "get_pixmap", lambda self, *a, **k: renders.append(1) or real(self, *a, **k)
    )
    poster = tmp_path / "poster.pdf"
    document = pymupdf.open()
    document.new_page(width=14400, height=14400)  # 28800 x 28800 px at the default dpi
    document.save(poster)
    with pytest.raises(
        ValueError, match=rf"poster\.pdf page 1 would be 28800x28800 = .* at {DEFAULT_DPI} dpi; choose"
    ):
        ocr_pipe(str(poster), generate_kwargs=GENERATE)
    assert renders == []
    damaged = tmp_path / "damaged.pdf"
    damaged.write_bytes(damaged_pdf("content"))
    with pytest.raises(ValueError, match=r"damaged\.pdf page 2 is damaged: MuPDF reports .*zlib error"):
        ocr_pipe(str(damaged), page=2, generate_kwargs=GENERATE)


def test_ocr_pipeline_on_a_batch_of_two(ocr_pipe, loaded):
    results = ocr_pipe(pages(), generate_kwargs=GENERATE)
    assert results == [[{"generated_text": direct(*loaded, page)}] for page in pages()]


def test_ocr_pipeline_on_a_real_fixture_page(ocr_pipe, fixtures_dir):
    (result,) = ocr_pipe(str(fixtures_dir / "olmocr" / "blank_book_pg1.pdf"), generate_kwargs=GENERATE)
    assert isinstance(result["generated_text"], str)


def test_standard_image_text_to_text_pipeline(tiny_export, loaded):
    pipe = pipeline("image-text-to-text", model=str(tiny_export), trust_remote_code=True)
    image = pages()[1]
    messages = [{"role": "user", "content": [{"type": "image", "image": image}]}]
    (result,) = pipe(text=messages, generate_kwargs=GENERATE, return_full_text=False)
    assert result["generated_text"] == direct(*loaded, image)
    batch = pipe(
        text=[messages, [{"role": "user", "content": [{"type": "image", "image": pages()[0]}]}]],
        generate_kwargs=GENERATE,
        return_full_text=False,
    )
    assert [r[0]["generated_text"] for r in batch] == [direct(*loaded, image), direct(*loaded, pages()[0])]


def test_ocr_pipeline_from_a_loaded_model(loaded):
    model, processor = loaded
    pipe = model.ocr_pipeline(processor)
    assert type(pipe).__name__ == "JinaOCRPipeline"
    image = pages()[0]
    assert pipe(image, generate_kwargs=GENERATE) == [{"generated_text": direct(model, processor, image)}]
