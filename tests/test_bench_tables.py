"""Table parsing shared by the table tests, TEDS and the reward: spans, headings, sloppy HTML, Markdown."""

from __future__ import annotations

from jina_ocr.bench.tables import all_grids, markdown_tables, parse_html, split_tables


def texts(grid, indices):
    return sorted(grid.cells[i].text for i in indices)


def test_rowspan_and_colspan_occupancy():
    html = "<table><tr><td rowspan=2>A</td><td colspan=2>B</td></tr><tr><td>C</td><td>D</td></tr></table>"
    (grid,) = all_grids(html)
    assert grid.occupancy == [[0, 1, 1], [0, 2, 3]]
    a, b, c, d = range(4)
    assert texts(grid, grid.right(a)) == ["B", "C"]
    assert texts(grid, grid.down(b)) == ["C", "D"]
    assert texts(grid, grid.left(d)) == ["C"]
    assert texts(grid, grid.up(c)) == ["B"]
    assert grid.up(a) == set()


def test_headings_walk_to_th_cells_or_the_table_edge():
    html = "<table><tr><th>h1</th><th>h2</th></tr><tr><td>x</td><td>y</td></tr><tr><td>z</td><td>w</td></tr></table>"
    (grid,) = all_grids(html)
    w = next(i for i, c in enumerate(grid.cells) if c.text == "w")
    assert texts(grid, grid.top_headings(w)) == ["h2"]
    # No heading cell to the left: the left edge is the answer.
    assert texts(grid, grid.left_headings(w)) == ["z"]


def test_cell_text_keeps_line_breaks_and_entities():
    (grid,) = all_grids("<table><tr><td>Old<br>scans &amp; math</td></tr></table>")
    assert grid.cells[0].text == "Old\nscans & math"


def test_nested_tables_are_separate():
    html = "<table><tr><td>outer<table><tr><td>inner</td></tr></table></td><td>o2</td></tr></table>"
    grids = all_grids(html)
    assert len(grids) == 2
    assert [c.text for c in grids[1].cells] == ["inner"]
    assert [c.text for c in grids[0].cells][1] == "o2"


def test_stray_end_tags_are_ignored():
    root = parse_html("</td>text<table><tr><td>a</td></tr></table></div>")
    assert [node.tag for node in root.children] == ["table"]
    assert root.text() == "texta"


def test_markdown_tables_rules_and_escaped_pipes():
    md = "intro\n| a | b \\| c |\n|:--|--:|\n| 1 | 2 |\n\n| single line | not a table |\n"
    assert markdown_tables(md) == [[["a", "b | c"], ["1", "2"]]]


def test_split_tables_separates_html_and_markdown_tables_from_text():
    md = "before\n\n| h | k |\n|---|---|\n| 1 | 2 |\n\nmiddle <table><tr><td>z</td></tr></table> after"
    tables, rest = split_tables(md)
    assert len(tables) == 2 and all(t.startswith("<table>") for t in tables)
    assert "| h |" not in rest and "<td>" not in rest
    assert rest.split() == ["before", "middle", "after"]


def test_unterminated_table_runs_to_the_end():
    tables, rest = split_tables("text <table><tr><td>a</td>")
    assert tables == ["<table><tr><td>a</td>"] and rest.strip() == "text"
