"""``generation_config.json``: greedy, ``DEFAULT_MAX_NEW_TOKENS`` new tokens (fewer when the longest
prompt plus that would pass the model's position limit), FastMTP on when the checkpoint has a head (the export's ``use_mtp`` option
may say otherwise), and the loop guard on (SPEC sections 5 and 6).

``save_pretrained`` of the weights part writes a generation config derived from the model config
(``"_from_model_config": true``), and on load such a file silently drops custom keys; this part
replaces it with one built explicitly, so ``mtp_num_speculative_steps`` and the loop-guard keys
survive the round trip.
"""

from __future__ import annotations

from transformers import GenerationConfig

from jina_ocr.errors import UserError
from jina_ocr.export.registry import ExportContext, contribution
from jina_ocr.remote_code.generation.settings import (
    DEFAULT_MAX_NEW_TOKENS,
    EXEMPT_TOKENS,
    LOOP_GUARD_EXEMPT_KEY,
    LOOP_GUARD_NGRAM_KEY,
    LOOP_GUARD_NGRAM_SIZE,
    LOOP_GUARD_WINDOW,
    LOOP_GUARD_WINDOW_KEY,
    REAL_EXEMPT_TOKEN_IDS,
    REAL_VOCAB_SIZE,
    STEPS_KEY,
)
from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor, jina_request, max_image_tokens


def exempt_token_ids(config, tokenizer) -> list[int]:
    """Ids of ``<td>`` and ``</td>``: from the shipped tokenizer, else the real vocabulary's ids."""
    if tokenizer is not None:
        ids = [tokenizer.convert_tokens_to_ids(token) for token in EXEMPT_TOKENS]
        return [i for i in ids if i is not None and i != tokenizer.unk_token_id]
    return list(REAL_EXEMPT_TOKEN_IDS) if config.vocab_size == REAL_VOCAB_SIZE else []


def max_new_tokens_for(config, tokenizer=None, mode: str = JinaOCRImageProcessor.mode) -> int:
    """The default output budget, cut so that the longest one-page prompt of ``mode`` (its largest tile
    grid and the default instruction) plus the output fits ``max_position_embeddings``."""
    if tokenizer is None:
        return DEFAULT_MAX_NEW_TOKENS
    request = tokenizer.encode(jina_request(), add_special_tokens=False)  # one <image> marker among them
    longest_prompt = len(request) - 1 + max_image_tokens(mode, config.pixels_per_visual_token)
    return max(1, min(DEFAULT_MAX_NEW_TOKENS, config.max_position_embeddings - longest_prompt))


def build_generation_config(
    config, tokenizer=None, use_mtp: bool | None = None, mode: str = JinaOCRImageProcessor.mode
) -> GenerationConfig:
    """The folder's decoding defaults; ``use_mtp`` None means FastMTP on exactly when there is a head."""
    head = bool(config.num_nextn_predict_layers)
    if use_mtp is None:
        use_mtp = head
    if use_mtp and not head:
        raise UserError("FastMTP cannot be turned on: the checkpoint has no FastMTP head")
    return GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens_for(config, tokenizer, mode),
        use_mtp=use_mtp,
        **{
            STEPS_KEY: config.mtp_num_speculative_steps,
            LOOP_GUARD_NGRAM_KEY: LOOP_GUARD_NGRAM_SIZE,
            LOOP_GUARD_WINDOW_KEY: LOOP_GUARD_WINDOW,
            LOOP_GUARD_EXEMPT_KEY: exempt_token_ids(config, tokenizer),
        },
    )


@contribution("generation_config", order=50)
def write_generation_config(ctx: ExportContext) -> None:
    use_mtp = ctx.options.get("use_mtp")
    mode = ctx.options.get("processor_mode", JinaOCRImageProcessor.mode)
    build_generation_config(ctx.config, ctx.tokenizer, use_mtp, mode).save_pretrained(ctx.out_dir)
