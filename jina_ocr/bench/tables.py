"""Tables in OCR output: HTML element trees, Markdown pipe tables, and the cell grid behind both.

OCR systems write tables either as HTML (``<table>`` with ``rowspan``/``colspan``) or as Markdown
pipe tables, and every scorer here must treat the two alike. This module turns both into one
representation:

- :class:`Node`, a small element tree built with the standard library's HTML parser (forgiving
  about unclosed tags, as model output often is), used by TEDS and the reward's table term;
- :class:`Grid`, the logical cell grid with each cell stored once at its top-left corner and the
  up/down/left/right neighbours worked out through spans, used by olmOCR-style table tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape
from html.parser import HTMLParser

# Elements that never have children; the tree builder must not wait for their end tags.
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "col", "area", "base", "wbr", "source"})
# An open <td>/<th>/<tr> is closed implicitly by the next sibling, as HTML parsers do.
_IMPLIED_END = {"td": {"td", "th"}, "th": {"td", "th"}, "tr": {"tr"}}


@dataclass
class Node:
    """One element (or the document root, tag ``""``) with its attributes, text and children."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)

    def text(self) -> str:
        """All text below this node in document order; ``<br>`` counts as a line break."""
        out: list[str] = []
        self._collect(out)
        return "".join(out)

    def _collect(self, out: list[str]) -> None:
        # text_parts[i] is the text before children[i]; the last part follows the last child.
        for index, child in enumerate(self.children):
            out.append(self.text_parts[index] if index < len(self.text_parts) else "")
            if child.tag == "br":
                out.append("\n")
            child._collect(out)
        if len(self.text_parts) > len(self.children):
            out.append(self.text_parts[len(self.children)])

    def iter(self, tag: str):
        """Every descendant (and self) with this tag, depth first, in document order."""
        if self.tag == tag:
            yield self
        for child in self.children:
            yield from child.iter(tag)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("")
        self.root.text_parts.append("")
        self.stack = [self.root]

    def _append_text(self, text: str) -> None:
        node = self.stack[-1]
        node.text_parts[-1] += text

    def handle_starttag(self, tag, attrs):
        if tag in _IMPLIED_END:
            # A new cell ends an open cell of the same row; a new row ends the open row. Never
            # reach across a row (for cells) or a table (for rows) boundary.
            barrier = {"table", "tr"} if tag != "tr" else {"table"}
            for depth in range(len(self.stack) - 1, 0, -1):
                open_tag = self.stack[depth].tag
                if open_tag in _IMPLIED_END[tag]:
                    del self.stack[depth:]
                    break
                if open_tag in barrier:
                    break
        node = Node(tag, {k: (v or "") for k, v in attrs})
        node.text_parts.append("")
        parent = self.stack[-1]
        parent.children.append(node)
        parent.text_parts.append("")
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        node = Node(tag, {k: (v or "") for k, v in attrs})
        node.text_parts.append("")
        parent = self.stack[-1]
        parent.children.append(node)
        parent.text_parts.append("")

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return
        # A stray end tag closes nothing, as browsers do.

    def handle_data(self, data):
        self._append_text(data)


def parse_html(markup: str) -> Node:
    """Parse HTML (or Markdown with embedded HTML) into a :class:`Node` tree rooted at tag ``""``."""
    builder = _TreeBuilder()
    builder.feed(markup)
    builder.close()
    return builder.root


def span_value(raw: str | None) -> int:
    """A ``rowspan``/``colspan`` attribute as a positive int; junk or missing means 1."""
    try:
        value = int(str(raw).strip())
    except (TypeError, ValueError):
        return 1
    return value if value > 0 else 1


@dataclass
class Cell:
    text: str
    row: int
    col: int
    rowspan: int = 1
    colspan: int = 1
    heading: bool = False


@dataclass
class Grid:
    """A table as logical cells on a grid; ``occupancy[r][c]`` is the index of the cell covering (r, c).

    A spanning cell is stored once (at its top-left corner) and is the neighbour of every cell
    next to any of the grid positions it covers, which is what makes spans testable.
    """

    cells: list[Cell]
    occupancy: list[list[int | None]]

    @property
    def n_rows(self) -> int:
        return len(self.occupancy)

    @property
    def n_cols(self) -> int:
        return len(self.occupancy[0]) if self.occupancy else 0

    def _first_in_direction(self, index: int, d_row: int, d_col: int) -> set[int]:
        cell = self.cells[index]
        found: set[int] = set()
        if d_row:
            lines = range(cell.col, cell.col + cell.colspan)
            start = cell.row - 1 if d_row < 0 else cell.row + cell.rowspan
        else:
            lines = range(cell.row, cell.row + cell.rowspan)
            start = cell.col - 1 if d_col < 0 else cell.col + cell.colspan
        for line in lines:
            pos = start
            while True:
                r, c = (pos, line) if d_row else (line, pos)
                if not (0 <= r < self.n_rows and 0 <= c < self.n_cols):
                    break
                other = self.occupancy[r][c]
                if other is not None and other != index:
                    found.add(other)
                    break
                pos += d_row or d_col
        return found

    def up(self, index: int) -> set[int]:
        return self._first_in_direction(index, -1, 0)

    def down(self, index: int) -> set[int]:
        return self._first_in_direction(index, 1, 0)

    def left(self, index: int) -> set[int]:
        return self._first_in_direction(index, 0, -1)

    def right(self, index: int) -> set[int]:
        return self._first_in_direction(index, 0, 1)

    def _headings(self, index: int, step) -> set[int]:
        """Walk ``step`` to the table edge: the heading cells met on the way, else the edge cells."""
        headings: set[int] = set()
        edge: set[int] = set()
        seen = {index}
        frontier = [index]
        while frontier:
            current = frontier.pop()
            neighbours = step(current)
            if current != index:
                if self.cells[current].heading:
                    headings.add(current)
                if not neighbours:
                    edge.add(current)
            fresh = neighbours - seen
            seen |= fresh
            frontier.extend(fresh)
        return headings or edge

    def top_headings(self, index: int) -> set[int]:
        return self._headings(index, self.up)

    def left_headings(self, index: int) -> set[int]:
        return self._headings(index, self.left)


def build_grid(rows: list[list[Cell]]) -> Grid | None:
    """Lay cells given row by row (as in HTML source order) onto a grid, honouring spans."""
    cells: list[Cell] = []
    pending: dict[tuple[int, int], int] = {}  # grid positions taken, including by rowspans from above
    for r, row in enumerate(rows):
        c = 0
        for cell in row:
            while (r, c) in pending:
                c += 1
            cell.row, cell.col = r, c
            index = len(cells)
            cells.append(cell)
            for dr in range(cell.rowspan):
                for dc in range(cell.colspan):
                    pending[(r + dr, c + dc)] = index
            c += cell.colspan
    if not cells:
        return None
    height = max(pos[0] for pos in pending) + 1
    width = max(pos[1] for pos in pending) + 1
    occupancy = [[pending.get((r, c)) for c in range(width)] for r in range(height)]
    return Grid(cells, occupancy)


def html_table_grid(table: Node) -> Grid | None:
    """The grid of one ``<table>`` node; ``<th>`` cells and cells inside ``<thead>`` are headings."""
    rows: list[list[Cell]] = []

    def visit(node: Node, in_head: bool) -> None:
        for child in node.children:
            if child.tag == "table":
                continue  # a nested table is a table of its own
            if child.tag == "tr":
                row = [
                    Cell(
                        text=cell.text().strip(),
                        row=0,
                        col=0,
                        rowspan=span_value(cell.attrs.get("rowspan")),
                        colspan=span_value(cell.attrs.get("colspan")),
                        heading=cell.tag == "th" or in_head,
                    )
                    for cell in child.children
                    if cell.tag in ("td", "th")
                ]
                rows.append(row)
            else:
                visit(child, in_head or child.tag == "thead")

    visit(table, False)
    return build_grid(rows)


_SEPARATOR_CELL = re.compile(r"^\s*:?-{1,}:?\s*$")


def _split_pipe_row(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    # An escaped pipe is cell text, not a boundary.
    parts = re.split(r"(?<!\\)\|", body)
    return [part.strip().replace("\\|", "|") for part in parts]


def _is_separator(line: str) -> bool:
    cells = _split_pipe_row(line)
    return bool(cells) and all(_SEPARATOR_CELL.match(cell) for cell in cells)


def markdown_tables(markdown: str) -> list[list[list[str]]]:
    """Every pipe table in the text as rows of cell strings (the ``|---|`` rule line dropped).

    A table is a run of at least two consecutive lines containing ``|``; Markdown has no spans,
    so each row is a plain list.
    """
    tables: list[list[list[str]]] = []
    block: list[str] = []
    for line in markdown.split("\n") + [""]:
        if "|" in line:
            block.append(line)
            continue
        if len(block) >= 2:
            rows = [_split_pipe_row(row) for row in block if not _is_separator(row)]
            rows = [row for row in rows if any(cell for cell in row)]
            if rows:
                tables.append(rows)
        block = []
    return tables


def markdown_table_grid(rows: list[list[str]]) -> Grid | None:
    """The grid of a pipe table; its first row and first column are the headings."""
    return build_grid(
        [
            [Cell(text=text, row=0, col=0, heading=(r == 0 or c == 0)) for c, text in enumerate(row)]
            for r, row in enumerate(rows)
        ]
    )


def all_grids(markdown: str, include_markdown: bool = True) -> list[Grid]:
    """Grids for every HTML table, then (optionally) every Markdown pipe table, in the output."""
    grids = []
    if "<table" in markdown.lower():
        for table in parse_html(markdown).iter("table"):
            grid = html_table_grid(table)
            if grid is not None:
                grids.append(grid)
    if include_markdown:
        for rows in markdown_tables(markdown):
            grid = markdown_table_grid(rows)
            if grid is not None:
                grids.append(grid)
    return grids


_HTML_TABLE = re.compile(r"<table\b.*?</table\s*>", re.IGNORECASE | re.DOTALL)


def split_tables(markdown: str) -> tuple[list[str], str]:
    """Split out tables as HTML strings (Markdown tables converted), returning (tables, the rest).

    Used by the page metrics and the reward, which score tables with TEDS and the remaining
    text with edit distance; a Markdown table is converted so that both notations compare alike.
    An unterminated ``<table>`` runs to the end of the text, as a browser would read it.
    """
    tables: list[str] = []
    rest_parts: list[str] = []
    pos = 0
    lower = markdown.lower()
    while True:
        start = lower.find("<table", pos)
        if start < 0:
            rest_parts.append(markdown[pos:])
            break
        match = _HTML_TABLE.match(markdown, start)
        end = match.end() if match else len(markdown)
        rest_parts.append(markdown[pos:start])
        tables.append(markdown[start:end])
        pos = end
    rest = "\n".join(rest_parts)
    if "|" in rest:
        kept: list[str] = []
        block: list[str] = []
        for line in rest.split("\n") + [""]:
            if "|" in line:
                block.append(line)
                continue
            if len(block) >= 2:
                tables.extend(rows_to_html(rows) for rows in markdown_tables("\n".join(block)))
            else:
                kept.extend(block)
            block = []
            kept.append(line)
        rest = "\n".join(kept[:-1])
    return tables, rest


def rows_to_html(rows: list[list[str]]) -> str:
    """A Markdown table as HTML, so TEDS can compare it with HTML tables."""
    out = ["<table>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>")
    out.append("</table>")
    return "".join(out)
