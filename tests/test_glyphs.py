"""Glyph targets: each target token's visual cell and each cell's glyphs, checked against the ink of the
processor's own view of the page (where the glyph really is for the model), not against the box maths."""

from __future__ import annotations

import numpy as np
import pymupdf
import pytest

from jina_ocr.remote_code.processing_jina_ocr import MODES, PIXELS_PER_TOKEN, JinaOCRImageProcessor
from jina_ocr.runtime.pdf import DEFAULT_DPI
from jina_ocr.synth.page import render
from jina_ocr.train.drills import A5
from jina_ocr.train.glyphs import NO_CELL, ViewGrid, glyph_targets
from jina_ocr.train.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([])


def _page(texts: list[tuple[tuple[float, float], str, float]]) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=A5[0], height=A5[1])
    for point, text, size in texts:
        page.insert_text(point, text, fontsize=size, fontname="helv")
    return doc.tobytes()


def _ink_cell(pdf_bytes: bytes, mode: str) -> tuple[int, int]:
    """(row, col) of the cell holding the centre of the ink in the processor's global view."""
    image = render(pdf_bytes, DEFAULT_DPI)
    view = JinaOCRImageProcessor(mode=mode)([image])["pixel_values"][0].mean(0).numpy()
    rows, cols = np.nonzero(view < -0.5)
    return int(rows.mean() // PIXELS_PER_TOKEN), int(cols.mean() // PIXELS_PER_TOKEN)


@pytest.mark.parametrize("mode", ["small", "base"])
@pytest.mark.parametrize("point", [(40.0, 60.0), (200.0, 300.0), (380.0, 560.0)])
def test_a_glyph_gets_the_cell_its_ink_lands_in(tokenizer, mode, point):
    pdf = _page([(point, "W", 24.0)])
    grid = ViewGrid(MODES[mode][0])
    targets = glyph_targets(tokenizer, "W", pdf, render(pdf, DEFAULT_DPI).size, grid)
    row, col = _ink_cell(pdf, mode)
    assert targets.token_cells == [grid.sequence_index(row, col), NO_CELL]
    slots = targets.cell_glyphs[row * grid.side + col]
    assert slots[0, 0] == tokenizer.convert_tokens_to_ids("W")
    assert int((targets.cell_glyphs >= 0).sum()) == 1


def test_markup_and_joins_have_no_cell_and_slots_follow_reading_order(tokenizer):
    grid = ViewGrid(MODES["base"][0])
    pdf = _page([((40, 50), "Hi", 28.0), ((40, 122), "ab", 20.0), ((40, 146), "cd", 20.0)])
    markdown = "# Hi\n\nab cd"
    targets = glyph_targets(tokenizer, markdown, pdf, render(pdf, DEFAULT_DPI).size, grid)
    ids = tokenizer.encode(markdown, add_special_tokens=False)
    assert len(targets.token_cells) == len(ids) + 1  # and EOS
    cells = dict(zip(markdown, targets.token_cells, strict=False))
    assert [targets.token_cells[i] for i in (0, 1, 4, 5, 8)] == [NO_CELL] * 5  # "# ", "\n\n", the join
    assert NO_CELL not in (cells["H"], cells["a"], cells["c"])
    # "ab" and "cd" sit 24 pt apart: two lines of the same 37 pt cell row, each in its own slot line.
    cell = targets.token_cells[6] - (targets.token_cells[6] // (grid.side + 1))
    slots = targets.cell_glyphs[cell]
    names = [[tokenizer.convert_ids_to_tokens(int(i)) if i >= 0 else "" for i in line] for line in slots]
    assert names[0][:2] == ["a", "b"] and names[1][:2] == ["c", "d"]


def _ink_tile_cell(pdf_bytes: bytes) -> tuple[int, int]:
    """(row, col) of the big-grid cell holding the centre of the ink on the processor's gundam tiles."""
    image = render(pdf_bytes, DEFAULT_DPI)
    views = JinaOCRImageProcessor(mode="gundam")([image])
    cols, _ = views["image_grids"][0].tolist()
    ys, xs = [], []
    for k, tile in enumerate(views["pixel_values_local"].mean(1).numpy()):
        rows, columns = np.nonzero(tile < -0.5)
        ys += list(rows + (k // cols) * tile.shape[0])
        xs += list(columns + (k % cols) * tile.shape[1])
    return int(np.mean(ys) // PIXELS_PER_TOKEN), int(np.mean(xs) // PIXELS_PER_TOKEN)


@pytest.mark.parametrize("point", [(40.0, 60.0), (200.0, 300.0), (380.0, 560.0)])
def test_on_tiles_a_glyph_gets_the_cell_of_the_tiles_big_grid_its_ink_lands_in(tokenizer, point):
    pdf = _page([(point, "W", 24.0)])
    image_size = render(pdf, DEFAULT_DPI).size
    grid = ViewGrid.of_page(JinaOCRImageProcessor(mode="gundam"), image_size)
    assert (grid.tiles, grid.rows, grid.cols) == ((2, 3), 30, 20)  # A5: 2 x 3 tiles of 10 x 10 tokens
    targets = glyph_targets(tokenizer, "W", pdf, image_size, grid)
    row, col = _ink_tile_cell(pdf)
    assert targets.token_cells == [row * 21 + col, NO_CELL]  # 20 cells and a newline per row
    assert targets.cell_glyphs[row * 20 + col, 0, 0] == tokenizer.convert_tokens_to_ids("W")
    assert int((targets.cell_glyphs >= 0).sum()) == 1


def test_cell_tokens_are_the_tiles_tokens_where_the_model_puts_them():
    """Cell (row, col) of the glyph targets is the vector the decoder sees at ``sequence_index``."""
    import torch
    from small_config import SMALL

    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    torch.manual_seed(0)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).eval()
    grid = ViewGrid(640, (2, 3))
    tiles = torch.rand(6, 3, 640, 640) * 2 - 1
    with torch.no_grad():
        sequence = model.model.get_image_features(
            torch.rand(1, 3, 128, 128) * 2 - 1, tiles, torch.tensor([[2, 3]])
        )[0]
        cells = grid.cell_tokens(model.model.encode_views(tiles))[0]
    assert cells.shape == (grid.rows * grid.cols, SMALL["hidden_size"])
    for row in range(grid.rows):
        for col in range(grid.cols):
            torch.testing.assert_close(cells[row * grid.cols + col], sequence[grid.sequence_index(row, col)])
