"""The OCR pipeline shipped with the model: a page image or a PDF page in, Markdown out.

``pipeline("image-to-text", model=repo, trust_remote_code=True)`` finds this class through the
``custom_pipelines`` entry of config.json (it takes precedence over the library's redirect of
"image-to-text" to "image-text-to-text"). Inputs: a PIL image, an image path or bytes, a PDF path
(``page=`` picks the 1-based page, default 1), a dict ``{"pdf": path_or_bytes, "page": n}``, or a list
of any of these. Outputs follow the image-to-text convention: ``[{"generated_text": markdown}]``.
"""

from __future__ import annotations

import io
import os
from typing import Any

from transformers import Pipeline

from .batching_jina_ocr import BatchDriver, Page

try:  # PyMuPDF renders PDF pages; without it the pipeline still takes images.
    import pymupdf
except ImportError:  # pragma: no cover - depends on the user's environment
    pymupdf = None

PDF_DPI = 144  # DeepSeek-OCR renders PDF pages at zoom 2


def render_pdf_page(source: str | os.PathLike | bytes, page: int, dpi: int = PDF_DPI):
    """One page (1-based) of a PDF as an RGB PIL image, without alpha."""
    from PIL import Image

    if pymupdf is None:
        raise ImportError("reading PDF pages needs PyMuPDF: pip install pymupdf")
    name = "the PDF bytes" if isinstance(source, (bytes, bytearray)) else str(source)
    try:
        document = (
            pymupdf.open(stream=bytes(source), filetype="pdf")
            if isinstance(source, (bytes, bytearray))
            else pymupdf.open(source)
        )
    except Exception as error:  # PyMuPDF raises its own error types for corrupt files
        raise ValueError(f"cannot open {name} as a PDF: {error}") from error
    with document:
        if document.needs_pass:
            raise ValueError(f"{name} is encrypted; decrypt it first (jina-ocr convert takes --password)")
        if not 1 <= page <= document.page_count:
            raise ValueError(f"page {page} is out of range: {name} has {document.page_count} pages")
        pixmap = document[page - 1].get_pixmap(dpi=dpi, alpha=False)
        return Image.open(io.BytesIO(pixmap.tobytes("png"))).convert("RGB")


def _is_pdf(item: Any) -> bool:
    if isinstance(item, (str, os.PathLike)):
        return str(item).lower().endswith(".pdf")
    return isinstance(item, (bytes, bytearray)) and bytes(item[:5]) == b"%PDF-"


class JinaOCRPipeline(Pipeline):
    """Page in, Markdown out, with greedy decoding (FastMTP when the model's generation config says so)."""

    _load_processor = True
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = False

    def _sanitize_parameters(
        self, prompt=None, page=None, dpi=None, max_new_tokens=None, generate_kwargs=None, **kwargs
    ):
        preprocess = {
            key: value
            for key, value in (("prompt", prompt), ("page", page), ("dpi", dpi))
            if value is not None
        }
        forward = dict(generate_kwargs or {})
        if max_new_tokens is not None:
            forward["max_new_tokens"] = max_new_tokens
        forward.update(kwargs)
        return preprocess, forward, {}

    def preprocess(self, item, prompt=None, page=1, dpi=PDF_DPI):
        if isinstance(item, dict):
            if "pdf" not in item:
                raise ValueError("a dict input must hold the PDF under 'pdf' (and optionally 'page')")
            item = render_pdf_page(item["pdf"], int(item.get("page", page)), dpi)
        elif _is_pdf(item):
            item = render_pdf_page(item, int(page), dpi)
        return {"page": item, "prompt": prompt}

    def _forward(self, model_inputs, max_new_tokens=None, **generate_kwargs):
        """The page through the batch driver that ``jina-ocr convert`` and ``serve`` use."""
        driver = BatchDriver(self.model, self.processor, prompt=model_inputs["prompt"], **generate_kwargs)
        [generation] = driver.generate([Page(model_inputs["page"], max_new_tokens)])
        return {"generation": generation}

    def postprocess(self, model_outputs):
        return [{"generated_text": model_outputs["generation"].markdown}]
