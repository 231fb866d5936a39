"""Weights first (safetensors, per-expert keys as in the original checkpoints), config last.

``save_pretrained`` also writes a config and a default generation config; later parts may overwrite
the generation config and add keys to the config, which is therefore written again at the very end.
"""

from __future__ import annotations

from jina_ocr.export.registry import ExportContext, contribution


@contribution("weights", order=10)
def write_weights(ctx: ExportContext) -> None:
    if ctx.model is not None:
        ctx.model.save_pretrained(ctx.out_dir, safe_serialization=True)


@contribution("config", order=90)
def write_config(ctx: ExportContext) -> None:
    ctx.config.save_pretrained(ctx.out_dir)
