"""The OCR pipeline shipped with the model: a page image in, Markdown out.

``pipeline("image-to-text", model=repo, trust_remote_code=True)`` finds this class through config.json's
``custom_pipelines`` (which takes precedence over the library's redirect to "image-text-to-text"). Inputs
(an image, path, bytes or array, or a list of them) are read by the model's page loader, so the model sees
the same pixels as through the processor or ``jina-ocr``; PDFs are documents, which ``jina-ocr convert``
renders. Outputs follow the image-to-text convention: ``[{"generated_text": markdown}]``.
"""

from __future__ import annotations

import torch
from transformers import Pipeline


class JinaOCRPipeline(Pipeline):
    """Page in, Markdown out, with greedy decoding (FastMTP when the model's generation config says so)."""

    _load_processor = True
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = False

    def _sanitize_parameters(self, prompt=None, max_new_tokens=None, generate_kwargs=None, **kwargs):
        preprocess = {} if prompt is None else {"prompt": prompt}
        forward = dict(generate_kwargs or {})
        if max_new_tokens is not None:
            forward["max_new_tokens"] = max_new_tokens
        forward.update(kwargs)
        return preprocess, forward, {}

    def preprocess(self, item, prompt=None):
        return {"page": self.processor.image_processor.load_image(item), "prompt": prompt}

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
