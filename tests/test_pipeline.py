"""pipeline("image-to-text") (the pipeline shipped with the model) and the standard
pipeline("image-text-to-text") on an image and a batch of two; a PDF is refused with a pointer to
what converts documents."""

from __future__ import annotations

import pymupdf
import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor, pipeline

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


def test_ocr_pipeline_refuses_a_pdf_in_one_line_naming_what_takes_pdfs(ocr_pipe, tmp_path):
    """PDFs are documents: the pipeline reads page images and says where PDFs go."""
    pdf = tmp_path / "two_pages.pdf"
    small_pdf(pdf)
    for item in (str(pdf), pdf.read_bytes()):
        with pytest.raises(
            ValueError, match=r"is a PDF, not an image: .*jina-ocr convert and jina_ocr.convert"
        ):
            ocr_pipe(item, generate_kwargs=GENERATE)


def test_ocr_pipeline_on_a_batch_of_two(ocr_pipe, loaded):
    results = ocr_pipe(pages(), generate_kwargs=GENERATE)
    assert results == [[{"generated_text": direct(*loaded, page)}] for page in pages()]


def test_ocr_pipeline_on_a_real_fixture_page(ocr_pipe, fixtures_dir):
    (result,) = ocr_pipe(str(fixtures_dir / "tesseract" / "phototest.tif"), generate_kwargs=GENERATE)
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
