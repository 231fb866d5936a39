"""Model-size presets and random-weight exports.

``tiny`` keeps the real image geometry (1024-px global view, 640-px tiles, 16-px patches, 16x
compression, hence the real placeholder counts) and shrinks widths and depths, so a forward pass takes
milliseconds on a CPU; the test suite and anyone trying the package use it. ``full`` is the real
jina-ocr-v1 (3.34 B parameters plus the FastMTP head), for benchmarks on a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from jina_ocr.errors import UserError

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "sam_hidden_size": 32,
        "sam_num_layers": 2,
        "sam_num_heads": 2,
        "sam_mlp_dim": 64,
        "sam_global_attn_indexes": [1],
        "sam_out_channels": 16,
        "sam_downsample_channels": [24, 32],
        "clip_hidden_size": 32,
        "clip_num_layers": 1,
        "clip_num_heads": 2,
        "clip_intermediate_size": 64,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "n_routed_experts": 8,
        "n_shared_experts": 2,
        "num_experts_per_tok": 2,
        # The longest prompt (1263 placeholders of a 1x9 Gundam grid plus the byte-level request text)
        # and the default max_new_tokens (DEFAULT_MAX_NEW_TOKENS) must fit, or generate warns that the limit is exceeded.
        "max_position_embeddings": 8192,
    },
    "full": {},
}


def preset_config(preset: str, **overrides: Any):
    """The config of a preset; ``overrides`` win (the tiny export sets vocabulary and token ids)."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig

    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return JinaOCRConfig(**{**PRESETS[preset], **overrides})


def export_random(
    out_dir: str | Path,
    preset: str = "tiny",
    seed: int = 0,
    weights: bool = True,
    dtype: torch.dtype | None = None,
    overwrite: bool = False,
    mtp: bool = False,
) -> Path:
    """Write a random-weight Hub folder for ``preset`` and return its path.

    FastMTP is off in its ``generation_config.json`` unless ``mtp`` is set: a random head's drafts are
    almost never accepted, so drafting would only slow decoding down. Tests of drafting set it.

    The tiny preset ships the small test tokenizer and the processor, and its vocabulary and special
    token ids come from that tokenizer. The full preset has the real vocabulary, whose tokenizer is
    not redistributable here, so it ships without tokenizer and processor. Weights are bfloat16 for
    ``full`` (about 7 GB) and float32 for ``tiny`` unless ``dtype`` says otherwise.
    """
    from jina_ocr.export.folder import export_folder
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    tokenizer = None
    overrides: dict[str, Any] = {}
    if preset == "tiny":
        from jina_ocr.tokenizer import build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        overrides = {
            "vocab_size": len(tokenizer),
            "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        }
    config = preset_config(preset, **overrides)
    model = None
    if weights:
        torch.manual_seed(seed)
        dtype = dtype or (torch.bfloat16 if preset == "full" else torch.float32)
        model = JinaOCRForConditionalGeneration(config).to(dtype).eval()
    card = {
        "card_license": "apache-2.0",
        "card_title": f"jina-ocr random-weight export ({preset} preset)",
        "card_notice": (
            f"**These are random weights** of the jina-ocr-v1 architecture at the `{preset}` size, made with "
            f"`jina-ocr export --random --preset {preset} --seed {seed}` for tests and benchmarks: the code "
            "runs end to end, but its Markdown output is meaningless. The text below describes jina-ocr-v1."
        ),
    }
    return export_folder(
        out_dir, config=config, model=model, tokenizer=tokenizer, overwrite=overwrite, use_mtp=mtp, **card
    )
