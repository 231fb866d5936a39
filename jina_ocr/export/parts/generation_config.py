"""``generation_config.json``: the model's decoding defaults (:mod:`jina_ocr.generation_defaults`), with
FastMTP as the export's ``use_mtp`` option says (on when the checkpoint has a head by default).

``save_pretrained`` of the weights part writes a generation config derived from the model config
(``"_from_model_config": true``), and on load such a file silently drops custom keys; this part
replaces it with one built explicitly, so ``mtp_num_speculative_steps`` and the loop-guard keys
survive the round trip.
"""

from __future__ import annotations

from jina_ocr.export.registry import ExportContext, contribution
from jina_ocr.generation_defaults import build_generation_config
from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor


@contribution("generation_config", order=50)
def write_generation_config(ctx: ExportContext) -> None:
    use_mtp = ctx.options.get("use_mtp")
    mode = ctx.options.get("processor_mode", JinaOCRImageProcessor.mode)
    build_generation_config(ctx.config, ctx.tokenizer, use_mtp, mode).save_pretrained(ctx.out_dir)
