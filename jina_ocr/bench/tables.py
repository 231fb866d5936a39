"""Tables in OCR output: HTML element trees, Markdown pipe tables, and the benchmark's reading of both.

OCR systems write tables either as HTML (``<table>`` with ``rowspan``/``colspan``) or as Markdown
pipe tables, and every scorer here must treat the two alike. This module turns both into one
representation:

- :class:`Node`, a small element tree built with the standard library's HTML parser (forgiving
  about unclosed tags, as model output often is), used by TEDS and the reward's table term;
- :class:`BenchTable`, a table laid out exactly as olmOCR-Bench's table tests read it (cells in
  source order per row, headings collected its way), so that their verdicts are the benchmark's.
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
    def __init__(self, implied_ends: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.implied_ends = implied_ends
        self.root = Node("")
        self.root.text_parts.append("")
        self.stack = [self.root]

    def _append_text(self, text: str) -> None:
        node = self.stack[-1]
        node.text_parts[-1] += text

    def handle_starttag(self, tag, attrs):
        if self.implied_ends and tag in _IMPLIED_END:
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


def parse_html(markup: str, implied_ends: bool = True) -> Node:
    """Parse HTML (or Markdown with embedded HTML) into a :class:`Node` tree rooted at tag ``""``.

    With ``implied_ends`` a new cell closes an open cell and a new row an open row, as browsers
    read HTML. Without, an unclosed ``<td>`` holds everything up to its end tag (the cells after it
    nest inside it), which is how olmOCR-Bench's parser (BeautifulSoup's ``html.parser``) reads it.
    """
    builder = _TreeBuilder(implied_ends)
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
class BenchTable:
    """A table as olmOCR-Bench's table tests read it: rows of cell texts plus its heading information.

    The benchmark does not place cells on a logical grid. Each row lists its cells in source order;
    a ``colspan`` cell takes one slot (so the cells after it move left), a ``rowspan`` cell repeats
    its text in the rows below at the slot it reaches there, and short rows are padded with empty
    strings. Neighbours (``up`` ...) are the adjacent slots of this padded array, and a check on the
    table's edge, where there is no neighbour, is skipped. Headings come from ``col_headers`` and
    ``row_headers`` (column or row -> heading texts), then from the heading rows and columns above
    or left of a cell. Reproducing this layout, not a truer one, is what makes the verdicts the
    benchmark's.
    """

    rows: list[list[str]]
    header_rows: set[int] = field(default_factory=set)
    header_cols: set[int] = field(default_factory=set)
    col_headers: dict[int, list[str]] = field(default_factory=dict)
    row_headers: dict[int, list[str]] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def n_cols(self) -> int:
        return len(self.rows[0]) if self.rows else 0


def _padded(rows: list[list[str]]) -> list[list[str]]:
    width = max(len(row) for row in rows)
    return [row + [""] * (width - len(row)) for row in rows]


def _add_heading(headings: dict[int, list[str]], key: int, text: str) -> None:
    entry = headings.setdefault(key, [])
    if text not in entry:
        entry.append(text)


def _cells_of(node: Node) -> list[Node]:
    """Every ``<td>``/``<th>`` below ``node``, nested tables included, as the benchmark collects them."""
    found = []
    for child in node.children:
        if child.tag in ("td", "th"):
            found.append(child)
        found.extend(_cells_of(child))
    return found


def html_bench_table(table: Node) -> BenchTable | None:
    """One ``<table>`` laid out as :class:`BenchTable` describes (rows of nested tables included)."""
    trs = list(table.iter("tr"))
    if not trs:
        return None
    heads = next(iter(table.iter("thead")), None)
    header_rows = {trs.index(tr) for tr in heads.iter("tr")} if heads is not None else set()
    header_cols: set[int] = set()
    col_headers: dict[int, list[str]] = {}
    row_headers: dict[int, list[str]] = {}
    spanning_col_heads: dict[str, set[int]] = {}
    spanning_row_heads: dict[str, set[int]] = {}
    reserved: dict[tuple[int, int], str] = {}
    rows: list[list[str]] = []
    for r, tr in enumerate(trs):
        cells = _cells_of(tr)
        if any(cell.tag == "th" for cell in cells):
            header_rows.add(r)
        row: list[str] = []
        c = 0
        for cell in cells:
            while (r, c) in reserved:
                row.append(reserved[(r, c)])
                c += 1
            text = cell.text().strip()
            rowspan, colspan = span_value(cell.attrs.get("rowspan")), span_value(cell.attrs.get("colspan"))
            row.append(text)
            for dr in range(rowspan):
                for dc in range(colspan):
                    if dr or dc:
                        reserved[(r + dr, c + dc)] = text if dr and not dc else ""
            if cell.tag == "th":
                header_cols.update(range(c, c + colspan))
                header_rows.update(k for k in range(r + 1, r + rowspan) if k < len(trs))
                for col in range(c, c + colspan):
                    col_headers.setdefault(col, []).append(text)
                if text and colspan > 1:
                    spanning_col_heads.setdefault(text, set()).update(range(c, c + colspan))
                if text and rowspan > 1:
                    spanning_row_heads.setdefault(text, set()).update(range(r, r + rowspan))
            elif rowspan > 1 and c in header_cols:
                for k in range(r + 1, min(r + rowspan, len(trs))):
                    row_headers.setdefault(k, []).append(text)
            c += colspan
        rows.append(row)
    # A spanning heading also heads every column from its first one to the end of the data rows.
    data_width = max((len(row) for r, row in enumerate(rows) if r not in header_rows), default=0)
    for text, cols in spanning_col_heads.items():
        for col in range(min(cols), data_width):
            _add_heading(col_headers, col, text)
    for text, covered in spanning_row_heads.items():
        for r in covered:
            if r < len(rows):
                _add_heading(row_headers, r, text)
    for col in header_cols:
        for r, row in enumerate(rows):
            if col < len(row) and row[col].strip():
                _add_heading(row_headers, r, row[col])
    return BenchTable(_padded(rows), header_rows, header_cols, col_headers, row_headers)


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


def _bench_markdown_rows(lines: list[str]) -> list[list[str]]:
    """The rows of one run of pipe lines as the benchmark splits them (escaped pipes are not special)."""
    rows = []
    separator = next(
        (
            k
            for k, line in enumerate(lines)
            if (body := line.replace("|", "").strip()) and set(body) <= set("- :")
        ),
        None,
    )
    for k, line in enumerate(lines):
        if k == separator or (line.strip() and set(line) <= set("- :|")):
            continue
        cells = [cell.strip() for cell in line.split("|")]
        if cells and cells[0] == "":
            cells = cells[1:]
        if cells and cells[-1] == "":
            cells = cells[:-1]
        if cells:
            rows.append(cells)
    return rows


def markdown_bench_tables(markdown: str) -> list[BenchTable]:
    """Pipe tables (runs of two or more lines holding ``|``) as :class:`BenchTable`: first row and column head."""
    tables = []
    block: list[str] = []
    for line in markdown.strip().split("\n") + [""]:
        if "|" in line:
            block.append(line)
            continue
        rows = _bench_markdown_rows(block) if len(block) >= 2 else []
        block = []
        if not rows:
            continue
        rows = _padded(rows)
        tables.append(
            BenchTable(
                rows,
                header_rows={0},
                header_cols={0},
                col_headers={col: [text] for col, text in enumerate(rows[0])},
                row_headers={r: [rows[r][0]] for r in range(1, len(rows))},
            )
        )
    return tables


def bench_tables(markdown: str, include_markdown: bool = True) -> list[BenchTable]:
    """Every table of the output as olmOCR-Bench's table test reads it: pipe tables, then HTML tables."""
    tables = markdown_bench_tables(markdown) if include_markdown else []
    if "<table" in markdown.lower():
        root = parse_html(markdown, implied_ends=False)
        tables.extend(t for t in map(html_bench_table, root.iter("table")) if t is not None)
    return tables


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
