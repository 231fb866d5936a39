"""The OCR pipeline shipped with the model: a page image or a PDF page in, Markdown out.

``pipeline("image-to-text", model=repo, trust_remote_code=True)`` finds this class through the
``custom_pipelines`` entry of config.json (it takes precedence over the library's redirect of
"image-to-text" to "image-text-to-text"). Inputs: a PIL image, an image path or bytes, a PDF path
(``page=`` picks the 1-based page, default 1), a dict ``{"pdf": path_or_bytes, "page": n}``, or a list
of any of these. Outputs follow the image-to-text convention: ``[{"generated_text": markdown}]``.
Images and PDF pages are read by the shared page loader (``pages_jina_ocr``), so the model sees the
same pixels as through the processor, ``jina-ocr convert`` or ``jina-ocr serve``; PDF pages are
rendered once at ``dpi`` (``DEFAULT_DPI`` unless given) within the processor's ``max_image_pixels``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import Pipeline

from .pages_jina_ocr import DEFAULT_DPI, load_pdf_page


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

    def preprocess(self, item, prompt=None, page=1, dpi=DEFAULT_DPI):
        limit = self.processor.image_processor.max_image_pixels
        if isinstance(item, dict):
            if "pdf" not in item:
                raise ValueError("a dict input must hold the PDF under 'pdf' (and optionally 'page')")
            item = load_pdf_page(item["pdf"], int(item.get("page", page)), dpi, limit)
        elif _is_pdf(item):
            item = load_pdf_page(item, int(page), dpi, limit)
        return {"page": item, "prompt": prompt}

    def _forward(self, model_inputs, max_new_tokens=None, **generate_kwargs):
        """One page: ``prepare_ocr_inputs``, greedy ``generate`` (unless the call asks otherwise)."""
        inputs = self.processor.prepare_ocr_inputs(
            model_inputs["page"],
            prompt=model_inputs["prompt"],
            device=self.model.device,
            dtype=self.model.dtype,
        )
        if max_new_tokens is not None:
            generate_kwargs["max_new_tokens"] = max_new_tokens
        with torch.inference_mode():
            output = self.model.generate(**inputs, **{"do_sample": False, **generate_kwargs})
        return {"output": output, "input_ids": inputs["input_ids"]}

    def postprocess(self, model_outputs):
        markdown = self.processor.decode_ocr(model_outputs["output"], model_outputs["input_ids"])
        return [{"generated_text": markdown}]
