"""olmOCR-Bench test rules on hand-made pages: one block per test type, plus normalisation and loading."""

from __future__ import annotations

import json
import random

import pytest
from rapidfuzz.distance import Levenshtein

from jina_ocr.bench.olmocr import (
    approximate_match_starts,
    evaluate,
    load_tests,
    normalize_text,
    run_test,
    tail_repeats,
)
from jina_ocr.errors import UserError


def t(kind: str, **fields) -> dict:
    return {"pdf": "doc.pdf", "page": 1, "id": fields.pop("id", f"doc_{kind}"), "type": kind, **fields}


# --- normalisation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("\u201cQuoted\u201d and \u2018single\u2019", "\"Quoted\" and 'single'"),
        ("en\u2013dash em\u2014dash minus\u22121", "en-dash em-dash minus-1"),
        ("**bold** and __also bold__ and *it* and _it_", "bold and also bold and it and it"),
        ("<b>b</b><i>i</i> x<br>y<br/>z", "bi x y z"),
        ("many   spaces\n\nand\tlines", "many spaces and lines"),
        ("e\u0301", "\u00e9"),  # NFC
        ("5 \u00b5m", "5 \u03bcm"),
    ],
)
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # Recorded from olmocr 0.4.27's normalize_text: whitespace is collapsed before emphasis is
        # removed, so the bullets of two list lines pair up as italics, and bold spans lines.
        ("* one\n* two", " one  two"),
        ("**two\nlines**", "two lines"),
        ("a<BR>b<br />c", "a<BR>b<br />c"),  # only <br> and <br/> are line breaks
    ],
)
def test_normalize_text_reads_markers_as_the_benchmark_does(raw, expected):
    assert normalize_text(raw) == expected


# --- present / absent ---------------------------------------------------------------------------


def test_present_ignores_typography_and_markdown():
    page = "The **\u201ccorporate social responsibility\u201d** is\nin vogue."
    passed, why = run_test(t("present", text='The "corporate social responsibility" is in vogue.'), page)
    assert passed, why


def test_present_max_diffs_threshold():
    page = "Over the past three decades increasing presure from non-governmental groups"
    test = t("present", text="Over the past three decades increasing pressure from non-governmental")
    assert not run_test(test, page)[0]  # one missing letter, max_diffs 0
    assert run_test({**test, "max_diffs": 1}, page)[0]


def test_present_case_sensitivity():
    page = "HELLO WORLD"
    assert not run_test(t("present", text="Hello World"), page)[0]
    assert run_test(t("present", text="Hello World", case_sensitive=False), page)[0]


def test_present_first_n_and_last_n():
    page = "Header line. " + "filler " * 50 + "Footer line."
    assert run_test(t("present", text="Header line", first_n=20), page)[0]
    assert not run_test(t("present", text="Footer line", first_n=20), page)[0]
    assert run_test(t("present", text="Footer line", last_n=20), page)[0]


def test_present_on_blank_output_is_the_benchmarks_verdict():
    # olmocr 0.4.27: a page of one space (a blank line, normalised) "contains" a query with a space,
    # an empty page contains nothing; the page's baseline test is what charges a blank page.
    assert run_test(t("present", text="a long phrase with spaces"), "\n")[0]
    assert not run_test(t("present", text="a long phrase with spaces"), "")[0]
    assert not run_test(t("present", text="a long phrase with spaces"), " x")[0]


def test_absent():
    page = "Body text.\n\nDownloaded from http://tobaccocontrol.bmj.com/ on July 12"
    assert not run_test(t("absent", text="Downloaded from http://tobaccocontrol.bmj.com/"), page)[0]
    assert run_test(
        t("absent", text="Downloaded from http://tobaccocontrol.bmj.com/"),
        "Body text only, nothing else here at all.",
    )[0]


# --- order --------------------------------------------------------------------------------------


def test_order_pass_fail_and_fuzzy():
    page = "Introduction comes first. Then the methods section. Finally the results."
    assert run_test(t("order", before="Introduction comes first", after="Finally the results"), page)[0]
    passed, why = run_test(t("order", before="Finally the results", after="Introduction comes first"), page)
    assert not passed and "never appears before" in why
    typo = page.replace("Introduction", "Intrduction")
    assert not run_test(t("order", before="Introduction comes first", after="Finally the results"), typo)[0]
    assert run_test(
        t("order", before="Introduction comes first", after="Finally the results", max_diffs=1), typo
    )[0]


def test_order_when_a_text_occurs_twice():
    # "A" occurs after "B" too; some occurrence of A before some occurrence of B is enough.
    page = "alpha block. beta block. alpha block."
    assert run_test(t("order", before="alpha block", after="beta block"), page)[0]
    assert run_test(t("order", before="beta block", after="alpha block"), page)[0]


def test_approximate_search_agrees_with_brute_force():
    rng = random.Random(7)
    for _ in range(400):
        pattern = "".join(rng.choice("abc") for _ in range(rng.randint(1, 9)))
        text = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 18)))
        k = rng.randint(0, 3)
        expected = sorted(
            {
                i
                for i in range(len(text) + 1)
                for j in range(i, len(text) + 1)
                if Levenshtein.distance(pattern, text[i:j]) <= k
            }
        )
        assert approximate_match_starts(pattern, text, k) == expected, (pattern, text, k)


# --- table --------------------------------------------------------------------------------------

MD_TABLE = """Some text.

| Source | Type | Words |
|---|:---:|---:|
| DCLM | web | 3.32T |
| arXiv | papers | 12.2B |
| StarCoder | code | 11.8B |

After."""

HTML_SPANS = """<table>
<thead><tr><th rowspan="2">Item</th><th colspan="2">Year Ended</th></tr>
<tr><th>2024</th><th>2023</th></tr></thead>
<tbody>
<tr><td>Revenue</td><td>1,892</td><td>1,136</td></tr>
<tr><td>Research and development</td><td>680</td><td>2,532</td></tr>
</tbody></table>"""


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"cell": "3.32T", "up": "Words"}, True),
        ({"cell": "3.32T", "down": "12.2B"}, True),
        ({"cell": "3.32T", "left": "web"}, True),
        ({"cell": "web", "right": "3.32T"}, True),
        ({"cell": "12.2B", "top_heading": "Words"}, True),
        ({"cell": "12.2B", "left_heading": "arXiv"}, True),
        ({"cell": "3.32T", "up": "12.2B"}, False),
        ({"cell": "3.32T", "left": "DCLM"}, False),
        ({"cell": "99.9T"}, False),
    ],
)
def test_markdown_table_relations(fields, expected):
    assert run_test(t("table", **fields), MD_TABLE)[0] is expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # The colspan header is the top heading of both year columns, above the year row.
        ({"cell": "1,136", "top_heading": "Year Ended"}, True),
        ({"cell": "1,892", "top_heading": "Year Ended"}, True),
        ({"cell": "1,136", "top_heading": "2023"}, True),
        ({"cell": "1,136", "up": "2023"}, True),
        ({"cell": "680", "up": "1,892"}, True),
        ({"cell": "2,532", "left_heading": "Research and development"}, True),
        # The rowspan cell is above "Revenue" and left of both header rows' second row.
        ({"cell": "Revenue", "up": "Item"}, True),
        ({"cell": "2024", "left": "Item"}, True),
        ({"cell": "2024", "up": "Year Ended"}, True),
        ({"cell": "680", "up": "1,136"}, False),
    ],
)
def test_html_table_with_spans(fields, expected):
    assert run_test(t("table", **fields), HTML_SPANS)[0] is expected


def test_table_cell_fuzzy_threshold_and_missing_tables():
    assert not run_test(t("table", cell="Research and developmnt"), HTML_SPANS)[0]
    assert run_test(t("table", cell="Research and developmnt", max_diffs=1), HTML_SPANS)[0]
    # The threshold never drops below 0.5, however large max_diffs is.
    assert run_test(t("table", cell="Revenue and things", max_diffs=50), HTML_SPANS)[0]  # ratio 0.56
    assert not run_test(t("table", cell="zzzzzzzz", max_diffs=50), HTML_SPANS)[0]
    passed, why = run_test(t("table", cell="Revenue"), "No tables on this page.")
    assert not passed and "no tables" in why
    assert not run_test(t("table", cell="DCLM", ignore_markdown_tables=True), MD_TABLE)[0]


# --- math ---------------------------------------------------------------------------------------

MATH_PAGE = r"""Euler: $e^{i\pi} + 1 = 0$ and

$$\int_a^b f(x)\,dx = F(b) - F(a)$$

and \(a^2+b^2=c^2\) and \[x = \frac{-b \pm \sqrt{b^2-4ac}}{2a}\]"""


def test_math_exact_match_needs_no_renderer():
    passed, _, method = evaluate(t("math", math=r"\int_a^b f(x)\,dx = F(b) - F(a)"), MATH_PAGE, renderer=None)
    assert passed and method == "exact"


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        (r"e^{i \pi}+1=0", True),
        (r"\int_{a}^{b} f(x) d x=F(b)-F(a)", True),
        (r"a^{2}+b^{2}=c^{2}", True),
        (r"x=\dfrac{-b\pm\sqrt{b^{2}-4ac}}{2a}", True),
        (r"a^{2}+b^{2}=c^{3}", False),
        (r"\frac{1}{2}", False),
    ],
)
def test_math_normalised_latex_fallback(reference, expected):
    passed, why, method = evaluate(t("math", math=reference), MATH_PAGE, renderer=None)
    assert method == "latex-fallback"
    assert passed is expected, why
    if not passed:
        assert "no KaTeX renderer" in why


def test_math_fallback_rejects_unbalanced_braces():
    assert not run_test(t("math", math=r"\frac{1}{2}"), r"$\frac{1}{2$", renderer=None)[0]


def test_math_without_equations_fails():
    assert not run_test(t("math", math="x^2"), "No math here, just x^2 in prose.", renderer=None)[0]


# --- baseline -----------------------------------------------------------------------------------


def test_baseline_blank_page():
    blank = t("baseline", max_length=10)
    assert run_test(blank, "null")[0]
    assert run_test(blank, "\n\n   ")[0]
    passed, why = run_test(blank, "Chapter One begins here")
    assert not passed and "blank" in why
    alt = t("baseline", max_length=10, max_length_skips_image_alt_tags=True)
    assert run_test(alt, "![a long description of a figure](fig.png)")[0]


def test_baseline_rejects_empty_looping_and_cjk_pages():
    base = t("baseline")
    assert run_test(base, "A normal page of text.")[0]
    assert not run_test(base, "  \n--- ***")[0]
    assert not run_test(base, "Text then " + "ab" * 31)[0]
    assert run_test(base, "Text then " + "ab" * 30)[0]
    assert not run_test(base, "Text with \u4e2d\u6587 inside")[0]
    assert run_test(t("baseline", check_disallowed_characters=False), "Text with \u4e2d\u6587 inside")[0]


def test_tail_repeats():
    assert tail_repeats("abcxyxyxy", 3) == [1, 3, 1]
    assert tail_repeats("", 2) == [0, 0]


# --- format and footnote ------------------------------------------------------------------------


def test_format_heading_bold_italic():
    page = "# Results\n\nSome **key finding** and *an aside* and <em>html italic</em>.\n<h2>Methods</h2>"
    assert run_test(t("format", text="Results", format="heading"), page)[0]
    assert run_test(t("format", text="Methods", format="heading"), page)[0]
    assert run_test(t("format", text="key finding", format="bold"), page)[0]
    assert run_test(t("format", text="an aside", format="italic"), page)[0]
    assert run_test(t("format", text="html italic", format="italic"), page)[0]
    assert not run_test(t("format", text="key finding", format="italic"), page)[0]
    assert not run_test(t("format", text="an aside", format="heading"), page)[0]


def test_footnote_markers_and_context():
    page = "As shown before[^3] the effect holds.\n\n[^3]: Smith et al. 2020."
    assert run_test(t("footnote", marker="3", appears_before_marker="As shown before"), page)[0]
    assert run_test(t("footnote", marker="3", appears_after_marker="the effect holds"), page)[0]
    assert not run_test(t("footnote", marker="4"), page)[0]
    assert run_test(t("footnote", marker="12"), "text\u00b9\u00b2 more")[0]
    assert run_test(t("footnote", marker="a"), "text<sup>a</sup> more")[0]
    assert not run_test(t("footnote", marker="3", appears_after_marker="unrelated words"), page)[0]


# --- loading and validation ---------------------------------------------------------------------


def test_load_tests_from_folder_gives_categories(tmp_path):
    (tmp_path / "arxiv_math.jsonl").write_text(json.dumps(t("math", id="m1", math="x")) + "\n\n")
    (tmp_path / "tables.jsonl").write_text(json.dumps(t("table", id="t1", cell="a")) + "\n")
    tests = load_tests(tmp_path)
    assert [(x["id"], x["_category"]) for x in tests] == [("m1", "arxiv_math"), ("t1", "tables")]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps(t("colour", text="x")), "unknown test type"),
        (json.dumps(t("present", text="  ")), "non-empty 'text'"),
        (json.dumps(t("present", text="x", max_diffs=-1)), "max_diffs"),
        (json.dumps(t("order", before="ab", after="abcdef", max_diffs=2)), "more than half"),
        (json.dumps(t("format", text="x", format="underline")), "heading, bold or italic"),
    ],
)
def test_load_tests_rejects_bad_tests_with_location(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UserError, match=message) as info:
        load_tests(path)
    assert "bad.jsonl:1" in str(info.value)


def test_load_tests_rejects_duplicate_ids(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text(
        json.dumps(t("present", id="x", text="a")) + "\n" + json.dumps(t("absent", id="x", text="b")) + "\n"
    )
    with pytest.raises(UserError, match="duplicate test id 'x'"):
        load_tests(path)


def test_fixture_tests_load(fixtures_dir):
    tests = load_tests(fixtures_dir / "olmocr" / "tests.jsonl")
    assert len(tests) == 33
    assert {x["type"] for x in tests} == {"present", "absent", "order", "table", "math", "baseline"}
