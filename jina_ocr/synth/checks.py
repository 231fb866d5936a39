"""olmOCR-Bench unit tests drawn from a page's ground truth (SPEC section 8 schema).

The tests are chosen so that each one checks something only this page has: whole sentences (unique
by the size of the vocabulary), formulas long enough not to recur, table cells whose texts are
unique in their table and whose neighbours are unambiguous (plain 1x1 cells, so no reading of
rowspan/colspan can disagree), and the running head, which must be absent because the model leaves
page furniture out. A baseline test guards against empty or looping output.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from jina_ocr.synth.blocks import Block, Formula
from jina_ocr.synth.tables import Table

# Shorter texts could occur by chance on another page (or inside a longer sentence there).
MIN_TEXT = 30
MIN_MATH = 8


def _plain(table: Table, row: int, col: int) -> bool:
    """Whether grid position (row, col) is a 1x1 cell (no span touches it)."""
    cell = table.cell_at(row, col)
    return cell.rowspan == 1 and cell.colspan == 1


def table_tests(rng: random.Random, table: Table, limit: int) -> list[dict]:
    """Cell-neighbour tests on body cells: up/down/left/right, top_heading and left_heading."""
    n_rows, n_cols = len(table.grid), len(table.grid[0])
    candidates = []
    for r in range(table.header_rows, n_rows):
        for c in range(n_cols):
            if not _plain(table, r, c):
                continue
            cell = table.cell_at(r, c).text
            relations = {}
            for name, (dr, dc) in {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}.items():
                rr, cc = r + dr, c + dc
                if 0 <= rr < n_rows and 0 <= cc < n_cols and _plain(table, rr, cc):
                    relations[name] = table.cell_at(rr, cc).text
            if table.header_rows and _plain(table, table.header_rows - 1, c):
                relations["top_heading"] = table.cell_at(table.header_rows - 1, c).text
            if c > 0 and _plain(table, r, 0):
                relations["left_heading"] = table.cell_at(r, 0).text
            for name, value in relations.items():
                candidates.append({"type": "table", "cell": cell, name: value})
    return rng.sample(candidates, min(limit, len(candidates)))


def page_tests(
    rng: random.Random, blocks: Sequence[Block], formulas: Sequence[Formula], running_head: str
) -> list[dict]:
    """The unit tests of one page, without ``pdf``/``page``/``id`` (the writer adds those)."""
    tests: list[dict] = []
    texts = [(i, s) for i, block in enumerate(blocks) for s in block.sentences if len(s) >= MIN_TEXT]
    for _, sentence in rng.sample(texts, min(5, len(texts))):
        tests.append({"type": "present", "text": sentence, "max_diffs": 0})
    pairs = [(a, b) for a in texts for b in texts if a[0] < b[0]]
    for (_, before), (_, after) in rng.sample(pairs, min(3, len(pairs))):
        tests.append({"type": "order", "before": before, "after": after, "max_diffs": 2})
    if running_head:
        tests.append({"type": "absent", "text": running_head, "max_diffs": 0})
    for block in blocks:
        if block.table is not None:
            tests.extend({**t, "max_diffs": 0} for t in table_tests(rng, block.table, 4))
    math = [
        formulas[i].latex for block in blocks for i in block.formulas if len(formulas[i].latex) >= MIN_MATH
    ]
    displayed = [formulas[i].latex for block in blocks if block.kind == "formula" for i in block.formulas]
    inline = [m for m in math if m not in displayed]
    chosen = [m for m in displayed if len(m) >= MIN_MATH] + rng.sample(inline, min(3, len(inline)))
    tests.extend({"type": "math", "math": m, "max_diffs": 0} for m in dict.fromkeys(chosen))
    tests.append({"type": "baseline", "max_diffs": 0})
    return tests
