"""Table parsing shared by the table tests, TEDS and the reward: spans, headings, sloppy HTML, Markdown."""

from __future__ import annotations

from jina_ocr.bench.tables import bench_tables, markdown_tables, parse_html, split_tables


def test_bench_layout_of_spans():
    # A colspan takes one slot (the cells after it move left); a rowspan repeats its text below.
    html = (
        "<table><tr><td rowspan=2>A</td><td colspan=2>B</td><td>E</td></tr>"
        "<tr><td>C</td><td>D</td><td>F</td></tr></table>"
    )
    (table,) = bench_tables(html)
    assert table.rows == [["A", "B", "E", ""], ["A", "C", "D", "F"]]


def test_bench_headings_of_th_cells_and_spanning_headings():
    html = (
        '<table><tr><th></th><th colspan="2">Year</th></tr>'
        "<tr><th>Item</th><th>2024</th><th>2023</th></tr>"
        "<tr><td>Revenue</td><td>10</td><td>20</td></tr></table>"
    )
    (table,) = bench_tables(html)
    assert table.header_rows == {0, 1} and table.header_cols == {0, 1, 2}
    # The spanning "Year" heads its own columns and every column after them in the data rows.
    assert table.col_headers[2] == ["Year", "2023"]
    assert table.row_headers[2] == ["Revenue", "10", "20"]


def test_markdown_bench_table_heads_first_row_and_column():
    (table,) = bench_tables("| a | b |\n|---|---|\n| 1 | 2 |\n| 3 |")
    assert table.rows == [["a", "b"], ["1", "2"], ["3", ""]]
    assert table.col_headers == {0: ["a"], 1: ["b"]} and table.row_headers == {1: ["1"], 2: ["3"]}
    assert bench_tables("| a | b |\n|---|---|", include_markdown=False) == []


def test_cell_text_keeps_line_breaks_and_entities():
    (table,) = bench_tables("<table><tr><td>Old<br>scans &amp; math</td></tr></table>")
    assert table.rows == [["Old\nscans & math"]]


def test_nested_tables_are_separate():
    html = "<table><tr><td>outer<table><tr><td>inner</td></tr></table></td><td>o2</td></tr></table>"
    outer, inner = bench_tables(html)
    assert inner.rows == [["inner"]]
    # As the benchmark collects them, the outer table's rows include the nested table's cells.
    assert outer.rows == [["outerinner", "inner", "o2"], ["inner", "", ""]]


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
