"""Where each character of a training page is printed, in the coordinates of the model's visual tokens.

Every training page is a PDF, so its text layer (``page.get_text("rawdict")``) gives the box of every
printed glyph. Matched to the page's ground-truth Markdown, the boxes say two things per page that
teacher forcing alone never tells a model trained from scratch:

- which visual token (cell of the global view, or of the tiles in a tiled mode) holds each target
  token's glyph, the target of the attention-alignment loss (:mod:`jina_ocr.train.supervision`);
- which glyphs each cell holds, in reading order, the target of the per-glyph loss on the visual
  tokens: up to ``GLYPH_LINES`` text lines per cell, up to ``GLYPH_SLOTS`` glyphs of each line.

Markup that is not printed (``# ``, the blank line after a heading, the space that joins two printed
lines) has no box and no cell (-1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymupdf
import torch
from rapidfuzz.distance import Levenshtein

from jina_ocr.remote_code.processing_jina_ocr import (
    MODES,
    PIXELS_PER_TOKEN,
    TILE_SIZE,
    global_view_placement,
)
from jina_ocr.train.degrade import warp_point

GLYPH_LINES = 2
GLYPH_SLOTS = 6
NO_CELL = -1


@dataclass(frozen=True)
class Glyph:
    """One printed character: its text, its box in PDF points and the text line it belongs to."""

    char: str
    box: tuple[float, float, float, float]
    line: int


def printed_glyphs(pdf_bytes: bytes) -> tuple[list[Glyph], tuple[float, float]]:
    """The glyphs of the PDF's first page in reading order, and the page size in points."""
    with pymupdf.open(stream=pdf_bytes, filetype="pdf") as doc:
        page = doc[0]
        glyphs, line_number = [], 0
        for block in page.get_text("rawdict")["blocks"]:
            for line in block.get("lines", ()):
                for span in line["spans"]:
                    glyphs.extend(Glyph(c["c"], tuple(c["bbox"]), line_number) for c in span["chars"])
                line_number += 1
        return glyphs, (page.rect.width, page.rect.height)


def markdown_glyphs(markdown: str, glyphs: list[Glyph]) -> list[Glyph | None]:
    """For each character of ``markdown``, the glyph that printed it (None for markup and joins).

    The two texts are aligned by edit distance; only characters that match exactly get a glyph.
    """
    matched: list[Glyph | None] = [None] * len(markdown)
    printed = "".join(g.char for g in glyphs)
    for tag, m0, m1, p0, _ in Levenshtein.opcodes(markdown, printed):
        if tag == "equal":
            matched[m0:m1] = glyphs[p0 : p0 + (m1 - m0)]
    return matched


@dataclass(frozen=True)
class ViewGrid:
    """The cells glyph targets address: ``rows`` x ``cols`` visual tokens, a newline vector after each row.

    In an untiled mode they are the global view's (``view_size`` px square, the page placed as
    :func:`global_view_placement` does). On a tiled page (``tiles`` = (i, j) columns and rows of 640 px
    tiles) they are the tiles' big grid, which the decoder reads before the global view: there a row of
    tokens is a third as tall on an A5 page, so that a cell holds glyphs of one text line.
    """

    view_size: int
    tiles: tuple[int, int] | None = None

    @classmethod
    def of_page(cls, image_processor, image_size: tuple[int, int]) -> ViewGrid:
        """The grid of a ``image_size`` page in ``image_processor``'s mode."""
        tiles = image_processor.grid_for(*image_size)
        if tiles is None:
            return cls(MODES[image_processor.mode.lower()][0])
        return cls(TILE_SIZE, tuple(tiles))

    @property
    def side(self) -> int:
        """Tokens along each side of one view."""
        return self.view_size // PIXELS_PER_TOKEN

    @property
    def rows(self) -> int:
        return self.side * (self.tiles[1] if self.tiles else 1)

    @property
    def cols(self) -> int:
        return self.side * (self.tiles[0] if self.tiles else 1)

    def sequence_index(self, row: int, col: int) -> int:
        """Index of cell (row, col) among the image's visual vectors (a newline follows every row)."""
        return row * (self.cols + 1) + col

    def cell_tokens(self, views: torch.Tensor) -> torch.Tensor:
        """(N * views, side * side, hidden) projected views -> (N, rows * cols, hidden), row-major cells
        (tile k of a page is column k % i, row k // i of its grid, as the model arranges them)."""
        i, j = self.tiles or (1, 1)
        side, hidden = self.side, views.shape[-1]
        grid = views.reshape(-1, j, i, side, side, hidden).permute(0, 1, 3, 2, 4, 5)
        return grid.reshape(-1, self.rows * self.cols, hidden)

    def cells(
        self,
        glyphs: list[Glyph],
        page_size: tuple[float, float],
        image_size: tuple[int, int],
        warp: np.ndarray | None = None,
    ) -> list[tuple[int, int]]:
        """(row, col) of the cell holding each glyph's centre, as the processor places the rendered
        ``image_size`` image of the ``page_size`` page (points) in its views; ``warp`` moves the centres
        where a degraded copy of the page has them (:attr:`jina_ocr.train.degrade.DegradedPage.warp`)."""
        width, height = page_size
        if self.tiles:
            x0, y0, w, h = 0, 0, self.cols * PIXELS_PER_TOKEN, self.rows * PIXELS_PER_TOKEN
        else:
            x0, y0, w, h = global_view_placement(*image_size, self.view_size)
        cells = []
        for glyph in glyphs:
            left, top, right, bottom = glyph.box
            fx, fy = (left + right) / 2 / width, (top + bottom) / 2 / height
            if warp is not None:
                fx, fy = warp_point(warp, fx, fy)
            x = x0 + fx * w
            y = y0 + fy * h
            cells.append(
                (
                    min(self.rows - 1, max(0, int(y // PIXELS_PER_TOKEN))),
                    min(self.cols - 1, max(0, int(x // PIXELS_PER_TOKEN))),
                )
            )
        return cells


@dataclass
class GlyphTargets:
    """A page's dense targets: per target token its cell's sequence index (or -1), per cell its glyphs."""

    token_cells: list[int]
    cell_glyphs: torch.Tensor  # (rows * cols, GLYPH_LINES, GLYPH_SLOTS) token ids, -1 where empty


def glyph_targets(
    tokenizer,
    markdown: str,
    pdf_bytes: bytes,
    image_size: tuple[int, int],
    grid: ViewGrid,
    warp: np.ndarray | None = None,
) -> GlyphTargets:
    """Dense targets of a page whose target tokens are ``tokenizer.encode(markdown)`` (then EOS), on an
    image of the PDF's page, or on a degraded copy of it whose ``warp`` says where its points went.

    A token takes the cell of its first character that was printed; the cell slots take the tokens of
    single-token characters (every printable ASCII character of a byte-level tokenizer).
    """
    glyphs, page_size = printed_glyphs(pdf_bytes)
    cells = grid.cells(glyphs, page_size, image_size, warp)
    cell_of = {id(g): cell for g, cell in zip(glyphs, cells, strict=True)}
    matched = markdown_glyphs(markdown, glyphs)
    encoded = tokenizer(markdown, add_special_tokens=False, return_offsets_mapping=True)
    token_cells = []
    for start, end in encoded["offset_mapping"]:
        first = next((g for g in matched[start:end] if g is not None), None)
        token_cells.append(NO_CELL if first is None else grid.sequence_index(*cell_of[id(first)]))
    token_cells.append(NO_CELL)  # EOS

    slots = torch.full((grid.rows * grid.cols, GLYPH_LINES, GLYPH_SLOTS), -1, dtype=torch.long)
    lines_in_cell: dict[tuple[int, int], list[int]] = {}
    filled: dict[tuple[int, int, int], int] = {}
    for glyph in (g for g in matched if g is not None):
        ids = tokenizer.encode(glyph.char, add_special_tokens=False)
        row, col = cell_of[id(glyph)]
        lines = lines_in_cell.setdefault((row, col), [])
        if glyph.line not in lines:
            lines.append(glyph.line)
        line = lines.index(glyph.line)
        slot = filled.get((row, col, line), 0)
        filled[(row, col, line)] = slot + 1
        if len(ids) == 1 and line < GLYPH_LINES and slot < GLYPH_SLOTS:
            slots[row * grid.cols + col, line, slot] = ids[0]
    return GlyphTargets(token_cells, slots)
