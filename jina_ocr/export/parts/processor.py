"""Export part: the processor (image processor settings, tokenizer files, chat template) of the Hub folder.

``AutoProcessor.from_pretrained(folder, trust_remote_code=True)`` finds the classes through the
``auto_map`` entries written here: the processor's in ``processor_config.json`` and the config, the
image processor's nested under ``image_processor``. The code file itself, ``processing_jina_ocr.py``,
is copied with the other remote-code modules by the exporter.
"""

from __future__ import annotations

from jina_ocr.export.registry import ExportContext, contribution

PROCESSOR_CLASS = "processing_jina_ocr.JinaOCRProcessor"
IMAGE_PROCESSOR_CLASS = "processing_jina_ocr.JinaOCRImageProcessor"


@contribution("processor", order=40)
def write_processor(ctx: ExportContext) -> None:
    """Save a JinaOCRProcessor built on ``ctx.tokenizer``; nothing when the export has no tokenizer.

    ``ctx.options`` may carry ``processor_mode`` (the image processor's mode, Gundam by default) and
    ``prompt_style`` ("jina" or "deepseek"). The placeholder counts follow the config's
    ``pixels_per_visual_token``.
    """
    if ctx.tokenizer is None:
        return
    from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor, JinaOCRProcessor

    image_kwargs = {"mode": ctx.options["processor_mode"]} if "processor_mode" in ctx.options else {}
    processor = JinaOCRProcessor(
        image_processor=JinaOCRImageProcessor(
            pixels_per_token=ctx.config.pixels_per_visual_token, **image_kwargs
        ),
        tokenizer=ctx.tokenizer,
        prompt_style=ctx.options.get("prompt_style", "jina"),
    )
    # Registered classes make save_pretrained write their auto_map entries (and copy their module).
    JinaOCRProcessor.register_for_auto_class("AutoProcessor")
    JinaOCRImageProcessor.register_for_auto_class("AutoImageProcessor")
    processor.save_pretrained(ctx.out_dir)

    auto_map = dict(getattr(ctx.config, "auto_map", None) or {})
    auto_map["AutoProcessor"] = PROCESSOR_CLASS
    ctx.config.auto_map = auto_map
