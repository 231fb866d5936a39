"""OmniDocBench-style metrics: edit distances, TEDS / TEDS-S on hand-counted trees, the page overall."""

from __future__ import annotations

import pytest

from jina_ocr.bench.omnidoc import (
    FORMULA_TERM,
    formula_edit_distance,
    overall_score,
    page_metrics,
    teds,
    teds_tree,
    text_edit_distance,
)

TABLE = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"  # 1 + 2 + 4 = 7 nodes


def test_text_edit_distance_is_normalised_by_the_longer_string():
    assert text_edit_distance("kitten", "sitting") == pytest.approx(3 / 7)
    assert text_edit_distance("", "") == 0.0
    assert text_edit_distance("", "abc") == 1.0


def test_teds_identical_and_hand_counted_edits():
    assert teds(TABLE, TABLE) == 1.0
    # One cell's content fully replaced: rename cost 1 over 7 nodes.
    assert teds(TABLE.replace(">d<", ">x<"), TABLE) == pytest.approx(1 - 1 / 7)
    # Half-changed content costs half a rename.
    assert teds(TABLE.replace(">d<", ">dd<"), TABLE) == pytest.approx(1 - 0.5 / 7)
    # Dropping a cell deletes one node.
    assert teds(TABLE.replace("<td>d</td>", ""), TABLE) == pytest.approx(1 - 1 / 7)
    # A changed span is a structural rename.
    assert teds(TABLE.replace("<td>d</td>", '<td colspan="2">d</td>'), TABLE) == pytest.approx(1 - 1 / 7)


def test_teds_s_ignores_content_but_not_structure():
    changed = TABLE.replace(">a<", ">zzz<").replace(">d<", ">yyy<")
    assert teds(changed, TABLE, structure_only=True) == 1.0
    assert teds(changed, TABLE) < 1.0
    assert teds(TABLE.replace("<td>d</td>", ""), TABLE, structure_only=True) == pytest.approx(1 - 1 / 7)


def test_markdown_and_html_headers_compare_equal():
    html = "<table><thead><tr><th>h</th><th>k</th></tr></thead><tbody><tr><td>1</td><td>2</td></tr></tbody></table>"
    md = "| h | k |\n|---|---|\n| 1 | 2 |"
    metrics = page_metrics(md, html)
    assert metrics.table_teds == 1.0 and metrics.table_teds_s == 1.0
    assert teds_tree(html).size() == 7


def test_missing_table_scores_zero():
    assert teds(None, TABLE) == 0.0
    assert page_metrics("no table", TABLE).table_teds == 0.0


def test_formula_edit_distance_uses_canonical_latex():
    assert formula_edit_distance(r"x^{2} + \frac{1}{2}", r"x^2+\frac12") == 0.0
    assert formula_edit_distance(r"\left( a \right)", "(a)") == 0.0
    assert 0 < formula_edit_distance("a+b", "a-b") < 1


def test_page_metrics_and_overall():
    reference = "Intro text here.\n\n" + TABLE + "\n\n$$E = mc^2$$\n\nClosing words."
    perfect = page_metrics(reference, reference)
    assert (perfect.text_edit, perfect.table_teds, perfect.formula_edit, perfect.overall) == (
        0.0,
        1.0,
        0.0,
        100.0,
    )
    assert perfect.formula_term == FORMULA_TERM == "edit-distance"
    worse = page_metrics(reference.replace("mc^2", "mc^3").replace("Closing", "Clsing"), reference)
    assert worse.formula_edit > 0 and worse.text_edit > 0 and worse.table_teds == 1.0
    expected = ((1 - worse.text_edit) * 100 + 100 + (1 - worse.formula_edit) * 100) / 3
    assert worse.overall == pytest.approx(expected)
    assert overall_score(worse.text_edit, 1.0, worse.formula_edit) == pytest.approx(expected)


def test_page_without_tables_or_formulas_averages_only_text():
    metrics = page_metrics("hello world", "hello there")
    assert metrics.table_teds is None and metrics.formula_edit is None
    assert metrics.overall == pytest.approx((1 - metrics.text_edit) * 100)


def test_same_shape_shortcut_agrees_with_full_tree_edit_distance():
    from apted import APTED

    from jina_ocr.bench.omnidoc import _TedsConfig

    reference = teds_tree(TABLE)
    for changed in (
        TABLE.replace(">a<", ">ab<"),
        TABLE.replace(">a<", ">x<").replace(">b<", ">y<"),
        TABLE.replace(">a<", ">x<").replace(">b<", ">y<").replace(">c<", ">z<"),
        # Shifted contents: renaming node for node costs 4, deleting and inserting costs 2.
        TABLE.replace("<td>a</td><td>b</td>", "<td>b</td><td>q</td>").replace(
            "<td>c</td><td>d</td>", "<td>d</td><td>r</td>"
        ),
    ):
        tree = teds_tree(changed)
        full = APTED(tree, reference, _TedsConfig(False)).compute_edit_distance()
        assert teds(tree, reference) == pytest.approx(1 - full / 7), changed


def test_cli_page_metrics_over_a_folder(tmp_path, capsys):
    import json

    from jina_ocr.cli import main

    refs, outs = tmp_path / "refs", tmp_path / "outs"
    (refs / "sub").mkdir(parents=True)
    (outs / "sub").mkdir(parents=True)
    (refs / "a.md").write_text("Hello world.\n\n" + TABLE)
    (outs / "a.md").write_text("Hello world.\n\n" + TABLE.replace(">d<", ">x<"))
    (refs / "sub" / "b.md").write_text("$$x^2$$ and text")
    (outs / "sub" / "b.md").write_text("$$x^{2}$$ and text")
    (refs / "c.md").write_text("A page nobody transcribed.")
    report = tmp_path / "r.json"
    assert main(["bench", "--references", str(refs), "--outputs", str(outs), "--report", str(report)]) == 0
    printed = capsys.readouterr()
    assert "edit-distance based, not CDM" in printed.out and "1 page(s) without output" in printed.err
    result = json.loads(report.read_text())["page_metrics"]
    assert result["missing_outputs"] == ["c.md"]
    assert result["table_teds"] == pytest.approx(1 - 1 / 7) and result["formula_edit"] == 0.0
    assert result["text_edit"] == pytest.approx((0 + 0 + 1) / 3)
    expected = ((1 - result["text_edit"]) * 100 + result["table_teds"] * 100 + 100) / 3
    assert result["overall"] == pytest.approx(expected)
    assert result["formula_term"] == "edit-distance"
    assert main(["bench", "--references", str(refs)]) == 2
