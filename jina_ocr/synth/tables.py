"""Random data tables with their HTML ground truth and the cell grid the unit tests are drawn from.

Tables imitate what papers and reports print: a results table (methods by metrics, with a header
row and sometimes grouped column headers using ``colspan`` and a ``rowspan`` corner), a report
table (row groups spanning several rows) and a plain grid without a header. Every cell text is
unique inside its table so a test like "the cell right of 0.734 is 0.812" has one answer.
"""

from __future__ import annotations

import html
import random
from dataclasses import dataclass, field

from jina_ocr.synth import text


@dataclass
class Cell:
    """One HTML cell: its text, its span, and whether it is a header cell (``<th>``)."""

    text: str
    header: bool = False
    rowspan: int = 1
    colspan: int = 1


@dataclass
class Table:
    """A table as rows of cells (HTML order), the number of leading header rows, and a caption."""

    rows: list[list[Cell]]
    header_rows: int
    caption: str = ""
    grid: list[list[tuple[int, int]]] = field(init=False)

    def __post_init__(self) -> None:
        self.grid = _grid(self.rows)

    def html(self) -> str:
        """The ground-truth HTML: one line, ``<thead>`` for header rows, spans as attributes."""
        parts = ["<table>"]
        sections = (("thead", self.rows[: self.header_rows]), ("tbody", self.rows[self.header_rows :]))
        for tag, rows in sections:
            if not rows:
                continue
            parts.append(f"<{tag}>")
            for row in rows:
                parts.append("<tr>")
                for cell in row:
                    name = "th" if cell.header else "td"
                    attrs = (f' rowspan="{cell.rowspan}"' if cell.rowspan > 1 else "") + (
                        f' colspan="{cell.colspan}"' if cell.colspan > 1 else ""
                    )
                    parts.append(f"<{name}{attrs}>{html.escape(cell.text, quote=False)}</{name}>")
                parts.append("</tr>")
            parts.append(f"</{tag}>")
        parts.append("</table>")
        return "".join(parts)

    def cell_at(self, row: int, col: int) -> Cell:
        """The cell covering grid position (row, col); spanning cells cover several positions."""
        r, c = self.grid[row][col]
        return self.rows[r][c]


def _grid(rows: list[list[Cell]]) -> list[list[tuple[int, int]]]:
    """Lay the HTML cells on a rectangular grid the way browsers do (spans fill later rows)."""
    grid: dict[tuple[int, int], tuple[int, int]] = {}
    for r, row in enumerate(rows):
        col = 0
        for i, cell in enumerate(row):
            while (r, col) in grid:
                col += 1
            for dr in range(cell.rowspan):
                for dc in range(cell.colspan):
                    grid[(r + dr, col + dc)] = (r, i)
            col += cell.colspan
    width = max(c for _, c in grid) + 1
    if any((r, c) not in grid for r in range(len(rows)) for c in range(width)):
        raise ValueError("table rows do not fill a rectangle")
    return [[grid[(r, c)] for c in range(width)] for r in range(len(rows))]


METRICS = (
    "Accuracy", "F1", "Recall", "Precision", "BLEU", "Loss", "Error", "Latency", "Throughput",
    "AUC", "RMSE", "MAE", "Yield", "Cost", "Energy", "Gain", "Drift", "Score",
)  # fmt: skip
GROUPS = ("Validation", "Test", "In-domain", "Out-of-domain", "Small", "Large", "Day", "Night", "Train")
UNITS = ("ms", "%", "kg", "mm", "kW", "s", "MB", "dB", "K")


def _name(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return f"{rng.choice(text.ADJECTIVES).capitalize()} {rng.choice(text.NOUNS)}"
    if roll < 0.7:
        return f"{rng.choice(text.SURNAMES)}-{rng.randint(2, 99)}"
    return f"{rng.choice(text.NOUNS).capitalize()} {rng.choice('ABCDEFGH')}{rng.randint(1, 9)}"


def _value(rng: random.Random, style: int) -> str:
    if style == 0:
        return f"{rng.uniform(0, 1):.3f}"
    if style == 1:
        return f"{rng.uniform(10, 99.9):.1f}"
    if style == 2:
        return f"{rng.randint(100, 99999):,}"
    return f"{rng.uniform(0.1, 500):.2f} {rng.choice(UNITS)}"


class _Unique:
    """Draws texts until one not yet used in this table comes up."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, make) -> str:
        while True:
            value = make()
            if value not in self.used:
                self.used.add(value)
                return value


def results_table(rng: random.Random, max_cols: int) -> Table:
    """Methods by metrics; optionally metrics grouped under spanning headers with a rowspan corner."""
    unique = _Unique()
    style = rng.randrange(4)
    n_rows = rng.randint(3, 8)
    grouped = rng.random() < 0.5 and max_cols >= 5
    corner = unique(lambda: rng.choice(("Method", "Model", "System", "Configuration", "Sample")))
    if grouped:
        n_groups = rng.randint(2, max(2, min(3, (max_cols - 1) // 2)))
        per_group = rng.randint(2, max(2, min(3, (max_cols - 1) // n_groups)))
        groups = rng.sample(GROUPS, n_groups)
        top = [Cell(corner, header=True, rowspan=2)] + [
            Cell(g, header=True, colspan=per_group) for g in groups
        ]
        metrics = rng.sample(METRICS, per_group)
        second = [
            Cell(unique(lambda m=m, g=g: f"{m} ({g[:3].lower()})"), header=True)
            for g in groups
            for m in metrics
        ]
        header = [top, second]
        n_values = n_groups * per_group
    else:
        n_values = rng.randint(2, max(2, max_cols - 1))
        header = [
            [Cell(corner, header=True)]
            + [Cell(unique(lambda: rng.choice(METRICS)), header=True) for _ in range(n_values)]
        ]
    body = [
        [Cell(unique(lambda: _name(rng)))]
        + [Cell(unique(lambda: _value(rng, style))) for _ in range(n_values)]
        for _ in range(n_rows)
    ]
    return Table(header + body, header_rows=len(header), caption=_caption(rng))


def report_table(rng: random.Random, max_cols: int) -> Table:
    """Row groups: the first column names a group that spans several rows, as in reports by region or year."""
    unique = _Unique()
    style = rng.randrange(4)
    n_values = rng.randint(2, max(2, min(4, max_cols - 2)))
    header = [
        Cell(unique(lambda: rng.choice(("Region", "Year", "Site", "Phase", "Batch"))), header=True),
        Cell(unique(lambda: rng.choice(("Item", "Component", "Line", "Unit", "Sensor"))), header=True),
    ] + [Cell(unique(lambda: rng.choice(METRICS)), header=True) for _ in range(n_values)]
    rows = [header]
    for _ in range(rng.randint(2, 3)):
        size = rng.randint(1, 3)
        group = Cell(unique(lambda: f"{rng.choice(GROUPS)} {rng.randint(1, 40)}"), rowspan=size)
        for k in range(size):
            row = [group] if k == 0 else []
            row.append(Cell(unique(lambda: _name(rng))))
            row += [Cell(unique(lambda: _value(rng, style))) for _ in range(n_values)]
            rows.append(row)
    return Table(rows, header_rows=1, caption=_caption(rng))


def plain_table(rng: random.Random, max_cols: int) -> Table:
    """A header-less grid of labels and values, as in specification sheets."""
    unique = _Unique()
    n_cols = rng.randint(2, max(2, min(4, max_cols)))
    style = rng.randrange(4)
    rows = [
        [Cell(unique(lambda: _name(rng)))]
        + [Cell(unique(lambda: _value(rng, style))) for _ in range(n_cols - 1)]
        for _ in range(rng.randint(3, 6))
    ]
    return Table(rows, header_rows=0, caption=_caption(rng) if rng.random() < 0.5 else "")


def _caption(rng: random.Random) -> str:
    subject = text.noun_phrase(rng).split(" ", 1)[1]
    return f"{rng.choice(('Comparison of the', 'Summary of the', 'Measured values of the', 'Overview of the'))} {subject}."


def random_table(rng: random.Random, max_cols: int = 7) -> Table:
    """One of the table shapes above, at most ``max_cols`` grid columns wide."""
    maker = rng.choice((results_table, results_table, report_table, plain_table))
    return maker(rng, max_cols)
