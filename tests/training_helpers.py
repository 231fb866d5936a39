"""The small model that the training-step tests train: the small config, its glyph head, and the
attention probes of ``train sft``, for a one-view prompt of that config; and recipe files of test runs."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from small_config import IMAGE, SMALL

from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.train.data import Collator, Example
from jina_ocr.train.glyphs import ViewGrid
from jina_ocr.train.supervision import AttentionProbes, GlyphHead

PROMPT = [3, 4, *[IMAGE] * 7, 5]  # a 128 px view: 2 x 2 cells, two newlines, the separator
GRID = ViewGrid(128)
NO_TILES = torch.zeros(0, 3, 640, 640)


def small_trainee(detach_visual: bool = False):
    """(model, glyph head, probes), the same weights on every call (seed 0)."""
    torch.manual_seed(0)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).train()
    head = GlyphHead(SMALL["hidden_size"], SMALL["vocab_size"])
    probes = AttentionProbes(
        model, [1], head=0, text_start=len(PROMPT) - 1, visual=slice(2, 9), detach_visual=detach_visual
    )
    return model, head, probes


def page_batch(index: int) -> dict:
    """Page ``index`` of made-up pages as a one-row batch; their target lengths differ."""
    generator = torch.Generator().manual_seed(index)
    length = 9 + 4 * index
    glyphs = torch.full((4, 2, 6), -1)
    glyphs[index % 4, 0, :2] = torch.tensor([10 + index, 11])
    example = Example(
        index,
        torch.randn(3, 128, 128, generator=generator),
        NO_TILES,
        GRID,
        torch.randint(8, 40, (length,), generator=generator).tolist() + [1],
        "",
        ([0, 1, 3] * length)[:length] + [-1],
        glyphs,
    )
    batch = Collator(PROMPT, 2, GRID)([example])
    batch.pop("indices")
    return batch


def write_recipe(path: Path, **settings) -> str:
    """A recipe file at ``path`` holding ``settings``; its path as a command-line argument. JSON's
    spelling of strings, numbers, booleans and lists is TOML's."""
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items()))
    return str(path)
