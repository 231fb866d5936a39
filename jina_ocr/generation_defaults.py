"""The decoding defaults of a jina-ocr model: greedy, ``DEFAULT_MAX_NEW_TOKENS`` new tokens (fewer when
the longest prompt plus that would pass the model's position limit), FastMTP on when the checkpoint
has a head, and the loop guard on (SPEC sections 5 and 6).

One home for both places that need them: the export writes them as ``generation_config.json``, and
the loader gives them to models built from bundled or trained model files, which have no such file.
"""

from __future__ import annotations

from transformers import GenerationConfig

from jina_ocr.errors import UserError
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
