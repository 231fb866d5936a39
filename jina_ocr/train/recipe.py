"""What jina-ocr-tiny is trained on and how large it is: the curriculum, the page mix and the dimensions.

The model is meant to read plain printed pages after a few CPU-days of training, so the recipe trades
breadth for learnability (the measurements behind each choice are in the README's training section):

- Pages are A5 portrait, rendered at the dpi of ``jina-ocr convert``'s PDF pages, and read in the
  processor's ``base`` mode: one 1024 px view (16 x 16 visual tokens, 273 placeholders). A token then
  covers 37 x 37 pt of an A5 page, about three glyphs of 20 pt type: ``small`` mode's 42 x 60 pt cells
  hold seven, which the towers learnt several times more slowly. A 37 pt row holds parts of two body
  lines at natural leading, though, so a run may read its pages in ``gundam`` mode instead (``mode``):
  2 x 3 tiles of 640 px on an A5 page, rows of 20 pt, and the glyph targets on the tiles' cells.
- The curriculum (:data:`~jina_ocr.train.drills.STAGES`) starts with one line per row of visual tokens
  and ends on the target format; a run moves to the next stage when the held-out character error rate of
  its current stage drops below that stage's threshold (``advance_cer``), not after a fixed page count.
  Each stage keeps a share of the earlier ones; the last also mixes in text-only synth pages (of which
  ``dense_fraction`` carry the tables and formulas of the dense profile).
- The tokenizer is byte level without merges: one output token per printed character, so spelling a
  word the model never saw is the same task as spelling a known one, and each target token has one glyph.
- The architecture is jina-ocr-v1's (SAM -> 16x compressor -> CLIP -> projector -> MoE decoder plus one
  FastMTP head) with every width and depth shrunk; the decoder keeps a dense first layer and MoE layers
  with shared experts, so the code paths are the real ones. SAM keeps only windowed blocks: glyphs fit
  inside a 224 px window, and CLIP's layers still mix the whole page.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from jina_ocr.errors import UserError
from jina_ocr.remote_code.processing_jina_ocr import (
    MODES,
    PIXELS_PER_TOKEN,
    JinaOCRImageProcessor,
    global_view_placement,
)
from jina_ocr.runtime.pdf import DEFAULT_DPI
from jina_ocr.synth import SynthPage, generate_page, page_seed
from jina_ocr.synth.fonts import FAMILIES, FontMissingError, face
from jina_ocr.synth.page import PageTooSmallError
from jina_ocr.synth.tex import TexMissingError, pdflatex
from jina_ocr.train.degrade import DegradedPage, degrade, evaluation_groups, training_groups
from jina_ocr.train.drills import A5, BODY_FONTS, STAGES, DrillPage, drill_page
from jina_ocr.train.glyphs import ViewGrid

PROCESSOR_MODE = "base"
# Lines of the early stages are at least this far apart: 1.2 x the largest drill type (24 pt).
MIN_LINE_PITCH = 28.8

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

# Share of each stage's pages drawn from the stages before it (the rest are the stage's own layout).
EARLIER_STAGES_SHARE = 0.25
# Share of synth pages in the last stage.
SYNTH_SHARE = 0.15


@dataclass(frozen=True)
class PageRecipe:
    """The distribution training pages are drawn from; page ``index`` of a seed and stage is always the same.

    ``advance_cer[k]`` is the held-out character error rate below which stage ``k`` hands over to stage
    ``k + 1`` (one threshold per stage but the last). ``letter_words`` is the share of drill words made
    of random letters: the vocabulary and nonsense words have a language a decoder can learn instead of
    reading, which held-out words do not share. ``repeat_words`` is the share of training drill words
    that repeat the word before them, exactly or (a share ``near_copies`` of them) with one letter
    changed (:func:`~jina_ocr.train.drills.repeat_word`); held-out pages have none unless asked for.
    ``degraded`` is the share of training pages that go through degradations a user's copy of a page
    meets (:mod:`jina_ocr.train.degrade`: paper, photos, noise, compression, resolution, ...).
    The command line's recipe files (:mod:`jina_ocr.train.recipe_file`) set all of these but
    ``font_sizes``, ``dpi`` and ``mode`` (a run's ``mode`` setting gives that).
    """

    font_sizes: tuple[float, ...] = (18.0, 20.0, 22.0)
    dense_fraction: float = 0.15
    dpi: int = DEFAULT_DPI
    drill_fonts: tuple[str, ...] = BODY_FONTS
    advance_cer: tuple[float, ...] = (0.25, 0.15)
    mode: str = PROCESSOR_MODE
    letter_words: float = 0.0
    repeat_words: float = 0.0
    near_copies: float = 0.5
    degraded: float = 0.0

    @property
    def view_size(self) -> int:
        return MODES[self.mode][0]

    def image_size(self) -> tuple[int, int]:
        """Pixel size of an A5 page rendered at ``dpi``: every drill page's."""
        return round(A5[0] * self.dpi / 72), round(A5[1] * self.dpi / 72)

    def row_height(self) -> float:
        """Height in points of one row of the visual tokens glyph targets address on an A5 page
        (:class:`~jina_ocr.train.glyphs.ViewGrid`: the global view's, or the tiles' in a tiled mode)."""
        grid = ViewGrid.of_page(JinaOCRImageProcessor(mode=self.mode), self.image_size())
        if grid.tiles:
            return A5[1] / grid.rows
        _, _, _, view_height = global_view_placement(*self.image_size(), self.view_size)
        return PIXELS_PER_TOKEN * A5[1] / view_height

    def line_pitch(self) -> float:
        """Distance in points between the lines of the early stages: the fewest whole rows of visual
        tokens that hold a line of the largest drill type (one row in ``base`` mode, two on tiles)."""
        row = self.row_height()
        return row * math.ceil(MIN_LINE_PITCH / row)

    def synth_page(self, seed: int, index: int) -> SynthPage | None:
        """Synth page ``index`` of ``seed``, or None when the generator cannot lay it out."""
        rng = random.Random(f"jina-ocr-train/page/{seed}/{index}")
        try:
            return generate_page(
                page_seed(seed, index),
                profile="dense" if rng.random() < self.dense_fraction else "plain",
                page_size="a5",
                font_size=rng.choice(self.font_sizes),
                dpi=self.dpi,
            )
        except PageTooSmallError:
            return None

    def check_synth_tools(self) -> None:
        """Raise a :class:`UserError` naming what is missing when this machine cannot make the recipe's
        synth pages: every face of the synth catalogue (the pages draw on all of them) and, when dense
        pages are drawn, pdfLaTeX. A run checks before it starts, because the last stage draws synth
        pages only after hours of training, and there a page that cannot be made fails in a page loader
        worker, far from the step that would say why."""
        try:
            for family in FAMILIES:
                face(family)
            if self.dense_fraction > 0:
                pdflatex()
        except (FontMissingError, TexMissingError) as error:
            raise UserError(f"the training pages cannot be made here: {error}") from None

    def drill(self, stage: str, seed: int | str, **kwargs: Any) -> DrillPage:
        """Drill ``seed`` of ``stage`` in the recipe's fonts and resolution."""
        return drill_page(
            stage,
            seed,
            self.line_pitch(),
            dpi=self.dpi,
            fonts=self.drill_fonts,
            letters=self.letter_words,
            near_copies=self.near_copies,
            **kwargs,
        )

    def training_page(self, seed: int, index: int, stage: int) -> SynthPage | DrillPage | DegradedPage | None:
        """Training page ``index`` of ``seed`` in curriculum ``stage`` (an index into ``STAGES``)."""
        rng = random.Random(f"jina-ocr-train/mix/{seed}/{index}")
        roll = rng.random()
        if stage == len(STAGES) - 1 and roll < SYNTH_SHARE:
            page = self.synth_page(seed, index)
        else:
            layout = stage
            if stage and rng.random() < EARLIER_STAGES_SHARE:
                layout = rng.randrange(stage)
            page = self.drill(STAGES[layout], f"{seed}/{index}", repeats=self.repeat_words)
        if page is None or not self.degraded:
            return page
        wear = random.Random(f"jina-ocr-train/degrade/{seed}/{index}")
        if wear.random() >= self.degraded:
            return page
        return degrade(page, training_groups(wear), wear)

    def held_out_pages(
        self, stage: int, seed: int, count: int, repeats: float = 0.0, degradation: str | None = None
    ) -> list[DrillPage] | list[DegradedPage]:
        """``count`` pages of ``stage``'s layout in held-out words, never trained on; ``repeats`` the
        share of words that repeat the one before (0: the pages every evaluation and the bundle gate use).
        ``degradation`` sends every page through one of :data:`~jina_ocr.train.degrade.EVALUATION_GROUPS`,
        or through groups drawn as for training (``"mixed"``), each page from its own seed.

        The first stage is judged on one-line pages (the milestone of the curriculum's first stage).
        """
        lines = 1 if stage == 0 else None
        pages = [
            self.drill(STAGES[stage], f"{seed}/{i}", held_out=True, lines=lines, repeats=repeats)
            for i in range(count)
        ]
        if degradation is None:
            return pages
        fixed = None if degradation == "mixed" else evaluation_groups(degradation)
        degraded = []
        for i, page in enumerate(pages):
            wear = random.Random(f"jina-ocr-held-out/degrade/{degradation}/{seed}/{i}")
            groups, dpi = fixed or (training_groups(wear), None)
            degraded.append(degrade(page, groups, wear, dpi))
        return degraded


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
