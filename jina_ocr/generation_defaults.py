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
    LOOP_GUARD_EXEMPT_KEY,
    LOOP_GUARD_NGRAM_KEY,
    LOOP_GUARD_WINDOW_KEY,
    STEPS_KEY,
)
from jina_ocr.remote_code.processing_jina_ocr import (
    MODES,
    PIXELS_PER_TOKEN,
    TILE_GRIDS,
    JinaOCRImageProcessor,
    count_image_tokens,
    jina_request,
)

# SPEC section 5: n = 35 over the last 1024 generated tokens, <td> and </td> exempt.
LOOP_GUARD_NGRAM_SIZE = 35
LOOP_GUARD_WINDOW = 1024
EXEMPT_TOKENS = ("<td>", "</td>")
# Their ids in the real jina-ocr-v1 / DeepSeek-OCR vocabulary, for exports that ship no tokenizer.
REAL_VOCAB_SIZE = 129280
REAL_EXEMPT_TOKEN_IDS = (128821, 128822)

# The output budget per page: a dense page is about 1,100 tokens, so this leaves room for the densest.
DEFAULT_MAX_NEW_TOKENS = 4096


def exempt_token_ids(config, tokenizer) -> list[int]:
    """Ids of ``<td>`` and ``</td>``: from the shipped tokenizer, else the real vocabulary's ids."""
    if tokenizer is not None:
        ids = [tokenizer.convert_tokens_to_ids(token) for token in EXEMPT_TOKENS]
        return [i for i in ids if i is not None and i != tokenizer.unk_token_id]
    return list(REAL_EXEMPT_TOKEN_IDS) if config.vocab_size == REAL_VOCAB_SIZE else []


def max_image_tokens(mode: str, pixels_per_token: int = PIXELS_PER_TOKEN) -> int:
    """The most placeholders one page can take in ``mode`` (with its largest tile grid, if it tiles)."""
    view_size, tiled = MODES[mode.lower()]
    grids = [None, *(TILE_GRIDS if tiled else [])]
    return max(count_image_tokens(view_size, grid, pixels_per_token) for grid in grids)


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
