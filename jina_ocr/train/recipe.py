"""What jina-ocr-tiny is trained on and how large it is: the page distribution and the model dimensions.

The model is meant to read plain printed pages on two CPU cores after about an hour of training, so
the recipe trades breadth for learnability:

- Pages are A5 portrait with 18-22 pt body text (the 20 pt A5 page of the README example sits in the
  middle), rendered at 144 dpi like the PDF pages of ``jina-ocr convert``.
- The run starts on reading drills (:mod:`jina_ocr.train.drills`): one line of large random words,
  growing to full pages of body-size type over the first ``drill_ramp_pages`` pages, while synth pages
  are mixed in at a rising rate; afterwards ``drill_fraction`` of the pages stay drills. Of the synth
  pages most are text only; 15 % carry the tables and formulas of the dense profile.
- The processor's ``small`` mode stretches the page to one 640 px view: 10 x 10 visual tokens plus
  newlines and the separator (111 placeholders), no tiles. At 20 pt on A5 a body line is about 26 px
  high in that view, large enough for a narrow SAM to resolve the glyphs.
- The architecture is jina-ocr-v1's (SAM -> 16x compressor -> CLIP -> projector -> MoE decoder plus one
  FastMTP head) with every width and depth shrunk; the decoder keeps a dense first layer and MoE layers
  with shared experts, so the code paths are the real ones. SAM keeps only windowed blocks: attention
  over all 1,600 patches of a 640 px view cost more than half of a training step on a CPU, glyphs fit
  inside a 224 px window, and CLIP's layers still mix the whole page at 10 x 10 tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from jina_ocr.synth import SynthPage, generate_page, page_seed
from jina_ocr.synth.page import PageTooSmallError
from jina_ocr.train.drills import BODY_FONTS, DrillPage, drill_page

PROCESSOR_MODE = "small"

# Dimensions of jina-ocr-tiny; vocabulary size and special-token ids come from its tokenizer.
MODEL_DIMENSIONS: dict[str, Any] = {
    "sam_hidden_size": 64,
    "sam_num_layers": 3,
    "sam_num_heads": 2,
    "sam_mlp_dim": 256,
    "sam_global_attn_indexes": [],
    "sam_out_channels": 64,
    "sam_downsample_channels": [128, 192],
    "clip_hidden_size": 192,
    "clip_num_layers": 2,
    "clip_num_heads": 4,
    "clip_intermediate_size": 384,
    "hidden_size": 256,
    "intermediate_size": 768,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
}


@dataclass(frozen=True)
class PageRecipe:
    """The distribution training pages are drawn from; page ``index`` of a seed is always the same page."""

    page_size: str = "a5"
    font_sizes: tuple[float, ...] = (18.0, 20.0, 22.0)
    dense_fraction: float = 0.15
    dpi: int = 144
    drill_ramp_pages: int = 16000
    drill_fraction: float = 0.4
    drill_fonts: tuple[str, ...] = BODY_FONTS

    def page_kwargs(self, seed: int, index: int) -> dict[str, Any]:
        """``generate_page`` options of page ``index``: its profile and body size, drawn from the seed."""
        rng = random.Random(f"jina-ocr-train/page/{seed}/{index}")
        return {
            "profile": "dense" if rng.random() < self.dense_fraction else "plain",
            "page_size": self.page_size,
            "font_size": rng.choice(self.font_sizes),
            "dpi": self.dpi,
        }

    def synth_page(self, seed: int, index: int) -> SynthPage | None:
        """Synth page ``index`` of ``seed``, or None when the generator cannot lay it out."""
        try:
            return generate_page(page_seed(seed, index), **self.page_kwargs(seed, index))
        except PageTooSmallError:
            return None

    def training_page(self, seed: int, index: int) -> SynthPage | DrillPage | None:
        """Training page ``index`` of ``seed``: a drill (its level set by the ramp) or a synth page."""
        rng = random.Random(f"jina-ocr-train/mix/{seed}/{index}")
        ramp = min(1.0, index / self.drill_ramp_pages) if self.drill_ramp_pages else 1.0
        drill_chance = 1.0 - ramp * (1.0 - self.drill_fraction)
        if index < 0 or rng.random() >= drill_chance:
            return self.synth_page(seed, index)
        level = ramp if ramp < 1.0 else rng.uniform(0.3, 1.0)
        return self.drill(f"{seed}/{index}", level)

    def drill(self, seed: int | str, level: float) -> DrillPage:
        """Drill ``seed`` at ``level`` in the recipe's fonts and resolution."""
        return drill_page(seed, level, dpi=self.dpi, fonts=self.drill_fonts)

    def held_out_drills(self, seed: int, count: int) -> list[DrillPage]:
        """``count`` drills from a few lines of larger type (level 0.3) to full pages, never trained on.

        Their seeds are strings under ``held-out/``, which no training page's seed (``"{seed}/{index}"``
        with an integer run seed) can equal.
        """
        levels = [0.3 + 0.7 * i / max(1, count - 1) for i in range(count)]
        return [self.drill(f"held-out/{seed}/{i}", level) for i, level in enumerate(levels)]


def model_config(tokenizer, **overrides: Any):
    """The jina-ocr-tiny config for ``tokenizer`` (vocabulary and special ids read from it)."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig

    values = {
        **MODEL_DIMENSIONS,
        "vocab_size": len(tokenizer),
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    return JinaOCRConfig(**{**values, **overrides})
