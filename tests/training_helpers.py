"""The small model that the training-step tests train: the small config, its glyph head, and the
attention probes of ``train sft``, for a one-view prompt of that config."""

from __future__ import annotations

import torch
from small_config import IMAGE, SMALL

from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.train.supervision import AttentionProbes, GlyphHead

PROMPT = [3, 4, *[IMAGE] * 7, 5]  # a 128 px view: 2 x 2 cells, two newlines, the separator


def small_trainee():
    """(model, glyph head, probes), the same weights on every call (seed 0)."""
    torch.manual_seed(0)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).train()
    head = GlyphHead(SMALL["hidden_size"], SMALL["vocab_size"])
    probes = AttentionProbes(model, [1], head=0, text_start=len(PROMPT) - 1, visual=slice(2, 9))
    return model, head, probes
