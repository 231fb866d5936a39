"""Degraded training and held-out pages: the text stays where the warp says, and every page is reproducible."""

from __future__ import annotations

import random

import numpy as np
import pytest

from jina_ocr.train.data import TrainingPageStream
from jina_ocr.train.degrade import EVALUATION_GROUPS, DegradedPage, degrade, warp_point
from jina_ocr.train.glyphs import ViewGrid, glyph_targets, printed_glyphs
from jina_ocr.train.recipe import PageRecipe

RECIPE = PageRecipe(mode="gundam")


@pytest.fixture(scope="module")
def page():
    return RECIPE.held_out_pages(2, 1, 1)[0]


def ink_share(degraded: DegradedPage, use_warp: bool = True) -> float:
    """Share of printed glyphs whose centre, moved by the page's warp (or not), lands within 3 px of a
    pixel clearly darker than the paper around it."""
    glyphs, (width, height) = printed_glyphs(degraded.pdf_bytes)
    grey = np.asarray(degraded.image.convert("L"), dtype=np.float32)
    hits = 0
    printed = [g for g in glyphs if g.char.strip()]
    for glyph in printed:
        fx, fy = (glyph.box[0] + glyph.box[2]) / 2 / width, (glyph.box[1] + glyph.box[3]) / 2 / height
        if use_warp:
            fx, fy = warp_point(degraded.warp, fx, fy)
        x, y = round(fx * grey.shape[1]), round(fy * grey.shape[0])
        patch = grey[max(0, y - 3) : y + 4, max(0, x - 3) : x + 4]
        around = grey[max(0, y - 40) : y + 41, max(0, x - 40) : x + 41]
        hits += patch.size > 0 and patch.min() < np.percentile(around, 90) - 60
    return hits / len(printed)


@pytest.mark.parametrize("groups", [("rotation",), ("photo",), ("dpi", "rotation", "paper", "jpeg")])
def test_the_warp_follows_the_text_into_the_degraded_page(page, groups):
    degraded = degrade(page, groups, random.Random(f"warp/{groups}"))
    assert ink_share(degraded) > 0.9


def test_a_photographed_page_moves_its_text_so_an_unwarped_target_misses_it(page):
    degraded = degrade(page, ("photo",), random.Random(3))
    assert ink_share(degraded, use_warp=False) < 0.6 < ink_share(degraded)


def test_glyph_targets_take_the_warp_of_a_degraded_page(page):
    from jina_ocr.model_files import load_model_files
    from jina_ocr.models import BUNDLED

    _, processor = load_model_files(BUNDLED)
    grid = ViewGrid.of_page(processor.image_processor, page.image.size)
    markdown = page.markdown.strip()
    clean = glyph_targets(processor.tokenizer, markdown, page.pdf_bytes, page.image.size, grid)
    photo = degrade(page, ("photo",), random.Random(3))
    moved = glyph_targets(processor.tokenizer, markdown, page.pdf_bytes, photo.image.size, grid, photo.warp)
    assert moved.token_cells != clean.token_cells
    toned = degrade(page, ("paper", "noise_blur"), random.Random(3))
    assert np.allclose(toned.warp, np.eye(3))
    same = glyph_targets(processor.tokenizer, markdown, page.pdf_bytes, toned.image.size, grid, toned.warp)
    assert same.token_cells == clean.token_cells

    stream = TrainingPageStream(processor, 0, RECIPE, 0, 512)
    assert (
        stream.example(0, photo).token_cells == moved.token_cells[: len(stream.example(0, photo).target_ids)]
    )


def test_each_evaluation_group_changes_the_page_and_is_the_same_on_every_run(page):
    clean = np.asarray(page.image, dtype=np.int16)
    for name in EVALUATION_GROUPS:
        first = RECIPE.held_out_pages(2, 1, 2, degradation=name)
        again = RECIPE.held_out_pages(2, 1, 2, degradation=name)
        assert [np.asarray(p.image).tobytes() for p in first] == [
            np.asarray(p.image).tobytes() for p in again
        ]
        image = np.asarray(first[0].image, dtype=np.int16)
        assert first[0].markdown == page.markdown
        if image.shape == clean.shape:
            assert np.abs(image - clean).mean() > 0.1, name
    assert [p.image.size for p in RECIPE.held_out_pages(2, 1, 1, degradation="dpi96")] == [(560, 794)]
    assert RECIPE.held_out_pages(2, 1, 1, degradation="dpi300")[0].image.size == (1749, 2481)


def test_pages_at_every_resolution_keep_the_training_pages_tile_grid(page):
    from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor

    processor = JinaOCRImageProcessor(mode="gundam")
    grids = {
        processor.grid_for(*degrade(page, ("dpi",), random.Random(0), dpi).image.size) for dpi in (96, 300)
    }
    assert grids == {processor.grid_for(*page.image.size)}


def test_the_degraded_share_of_training_pages():
    plain = [RECIPE.training_page(5, i, 2) for i in range(40)]
    assert not any(isinstance(p, DegradedPage) for p in plain)
    half = PageRecipe(mode="gundam", degraded=0.5)
    drawn = [half.training_page(5, i, 2) for i in range(40)]
    degraded = [p for p in drawn if isinstance(p, DegradedPage)]
    assert 8 <= len(degraded) <= 32
    assert [p.markdown for p in drawn] == [p.markdown for p in plain]
    assert len({p.groups for p in degraded}) > 3


def test_an_unknown_degradation_is_named():
    with pytest.raises(ValueError, match="unknown degradation 'fog'"):
        RECIPE.held_out_pages(2, 1, 1, degradation="fog")
