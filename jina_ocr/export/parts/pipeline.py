"""Registers the shipped OCR pipeline (pipeline_jina_ocr.py) for the "image-to-text" task."""

from __future__ import annotations

from jina_ocr.export.registry import ExportContext, contribution

CUSTOM_PIPELINES = {
    "image-to-text": {
        "impl": "pipeline_jina_ocr.JinaOCRPipeline",
        "pt": ["AutoModelForImageTextToText"],
        "type": "multimodal",
    }
}


@contribution("pipeline", order=60)
def register_pipeline(ctx: ExportContext) -> None:
    if ctx.tokenizer is not None:  # the pipeline needs the processor, which needs a tokenizer
        ctx.config.custom_pipelines = CUSTOM_PIPELINES
