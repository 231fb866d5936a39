"""End to end through the exported Hub folder: page -> prepare_ocr_inputs -> generate -> decode_ocr."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from pdf_render import render
from PIL import Image

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import pymupdf, torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    folder, pdf = sys.argv[1], sys.argv[2]
    model = AutoModelForImageTextToText.from_pretrained(folder, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    with pymupdf.open(pdf) as doc:
        pix = doc[0].get_pixmap(matrix=pymupdf.Matrix(2, 2), alpha=False)
    page = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    inputs = processor.prepare_ocr_inputs(page, device=model.device, dtype=model.dtype)
    generated = model.generate(**inputs, max_new_tokens=10, do_sample=False)
    markdown = processor.decode_ocr(generated, inputs["input_ids"])
    print(json.dumps({
        "processor_module": type(processor).__module__,
        "size": page.size,
        "input_ids": inputs["input_ids"].tolist(),
        "image_grids": inputs["image_grids"].tolist(),
        "generated": generated.tolist(),
        "markdown": markdown,
        "jina_ocr_imported": any(name.split(".")[0] == "jina_ocr" for name in sys.modules),
    }))
    """
)


@pytest.fixture(scope="module")
def loaded(tiny_export):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(tiny_export, trust_remote_code=True).eval()
    return model, AutoProcessor.from_pretrained(tiny_export, trust_remote_code=True)


def test_pdf_page_to_markdown_from_the_exported_folder(tiny_export, fixtures_dir, tmp_path, loaded):
    pdf = fixtures_dir / "olmocr" / "earnings.pdf"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_export), str(pdf)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["processor_module"].startswith("transformers_modules.")
    assert not out["jina_ocr_imported"]
    assert out["size"] == [1224, 1584] and out["image_grids"] == [[2, 3]]
    model, processor = loaded
    image_id = processor.image_token_id
    assert sum(token == image_id for token in out["input_ids"][0]) == 903
    prompt_length = len(out["input_ids"][0])
    assert out["generated"][0][:prompt_length] == out["input_ids"][0]
    assert len(out["generated"][0]) > prompt_length
    # The same page through this process's copy of the code gives the same ids and the same Markdown.
    page = render(pdf)
    inputs = processor.prepare_ocr_inputs(page)
    assert inputs["input_ids"].tolist() == out["input_ids"]
    generated = torch.tensor(out["generated"])
    assert isinstance(out["markdown"], str)
    assert out["markdown"] == processor.decode_ocr(generated, inputs["input_ids"])


def test_a_batch_of_three_shapes_gives_each_page_its_own_tokens(loaded, fixtures_dir):
    """Left padding, the attention mask and the per-image tile bookkeeping leave every page's greedy
    tokens unchanged by its neighbours (float64, so that batching cannot flip a near tie)."""
    model, processor = loaded
    model = model.to(torch.float64)
    pages = [
        render(fixtures_dir / "olmocr" / "earnings.pdf").crop((0, 0, 1224, 612)),  # wide, 2x1 tiles
        render(fixtures_dir / "olmocr" / "mathfuncs.pdf", zoom=0.6),  # under 640 px, no tiles
        render(fixtures_dir / "olmocr" / "olmo2-pg4.pdf").crop((0, 0, 612, 1224)),  # tall, 1x2 tiles
    ]
    settings = {"max_new_tokens": 12, "do_sample": False}
    with torch.no_grad():
        batch_inputs = processor.prepare_ocr_inputs(pages, dtype=torch.float64)
        assert batch_inputs["image_grids"].tolist() == [[2, 1], [0, 0], [1, 2]]
        batch = model.generate(**batch_inputs, **settings)[:, batch_inputs["input_ids"].shape[1] :]
        for k, page in enumerate(pages):
            alone_inputs = processor.prepare_ocr_inputs(page, dtype=torch.float64)
            alone = model.generate(**alone_inputs, **settings)[0, alone_inputs["input_ids"].shape[1] :]
            assert batch[k, : len(alone)].tolist() == alone.tolist(), f"page {k}"
    texts = processor.decode_ocr(
        torch.cat([batch_inputs["input_ids"], batch], dim=1), batch_inputs["input_ids"]
    )
    assert isinstance(texts, list) and len(texts) == 3


def test_image_text_to_text_pipeline(tiny_export, loaded):
    from transformers import pipeline

    model, processor = loaded
    model = model.to(torch.float32)
    page = Image.new("RGB", (600, 500), "white")
    pipe = pipeline("image-text-to-text", model=model, processor=processor)
    messages = [{"role": "user", "content": [{"type": "image", "image": page}]}]
    (answer,) = pipe(
        text=messages, max_new_tokens=8, generate_kwargs={"do_sample": False}, return_full_text=False
    )
    inputs = processor.prepare_ocr_inputs(page)
    new = model.generate(**inputs, max_new_tokens=8, do_sample=False)[:, inputs["input_ids"].shape[1] :]
    assert answer["generated_text"] == processor.post_process_image_text_to_text(new)[0]
    # the one-call convenience: the OCR pipeline, pages in, Markdown out
    ocr = model.ocr_pipeline(processor)
    assert ocr(page, max_new_tokens=8) == [{"generated_text": processor.decode_ocr(new)}]
    assert ocr([page, page], max_new_tokens=8) == [[{"generated_text": processor.decode_ocr(new)}]] * 2
