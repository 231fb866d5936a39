"""The scorer on the real olmOCR-Bench fixture tests: a careful transcription passes all of them.

The transcriptions below were written by reading the fixture PDFs (tables as HTML with their
header spans, formulas as LaTeX, running headers and page numbers left out, the blank page as
``null``). Every one of the 33 benchmark tests plus the added baselines must pass, which checks
the rules against real tests rather than only against our own examples; then targeted mistakes
must fail exactly the tests that look for them.
"""

from __future__ import annotations

import pytest

from jina_ocr.bench.olmocr import load_tests
from jina_ocr.bench.scoring import score_outputs

EARNINGS = """## Note 3 - Stock-Based Compensation

Stock-based compensation expense is associated with RSUs, PSUs, market-based PSUs, and our ESPP.

Consolidated Statements of Income include stock-based compensation expense, net of amounts capitalized into \
inventory and subsequently recognized to cost of revenue, as follows:

<table>
<thead>
<tr><th></th><th colspan="3">Year Ended</th></tr>
<tr><th></th><th>Jan 26, 2025</th><th>Jan 28, 2024</th><th>Jan 29, 2023</th></tr>
</thead>
<tbody>
<tr><td></td><td colspan="3">(In millions)</td></tr>
<tr><td>Cost of revenue</td><td>$ 178</td><td>$ 141</td><td>$ 138</td></tr>
<tr><td>Research and development</td><td>3,423</td><td>2,532</td><td>1,892</td></tr>
<tr><td>Sales, general and administrative</td><td>1,136</td><td>876</td><td>680</td></tr>
<tr><td>Total</td><td>$ 4,737</td><td>$ 3,549</td><td>$ 2,710</td></tr>
</tbody>
</table>

Stock-based compensation capitalized in inventories was not significant during fiscal years 2025, 2024, and 2023.
"""

OLMO2 = """<table>
<tr><th>Source</th><th>Type</th><th>Tokens</th><th>Words</th><th>Bytes</th><th>Docs</th></tr>
<tr><td colspan="6">Pretraining ✦ OLMo 2 1124 Mix</td></tr>
<tr><td>DCLM-Baseline</td><td>Web pages</td><td>3.71T</td><td>3.32T</td><td>21.32T</td><td>2.95B</td></tr>
<tr><td>StarCoder filtered version from OLMoE Mix</td><td>Code</td><td>83.0B</td><td>70.0B</td><td>459B</td><td>78.7M</td></tr>
<tr><td>peS2o from Dolma 1.7</td><td>Academic papers</td><td>58.6B</td><td>51.1B</td><td>413B</td><td>38.8M</td></tr>
<tr><td>arXiv</td><td>STEM papers</td><td>20.8B</td><td>19.3B</td><td>77.2B</td><td>3.95M</td></tr>
<tr><td>OpenWebMath</td><td>Math web pages</td><td>12.2B</td><td>11.1B</td><td>47.2B</td><td>2.89M</td></tr>
<tr><td>Algebraic Stack</td><td>Math proofs code</td><td>11.8B</td><td>10.8B</td><td>44.0B</td><td>2.83M</td></tr>
<tr><td>Wikipedia &amp; Wikibooks from Dolma 1.7</td><td>Encyclopedic</td><td>3.7B</td><td>3.16B</td><td>16.2B</td><td>6.17M</td></tr>
<tr><td>Total</td><td></td><td>3.90T</td><td>3.48T</td><td>22.38T</td><td>3.08B</td></tr>
</table>

**Table 1** Composition of the pretraining data for OLMo 2. The OLMo 2 1124 Mix is composed of StarCoder \
(Li et al., 2023b; Kocetkov et al., 2022), peS2o (Soldaini and Lo, 2023), web text from DCLM (Li et al., 2024) \
and Wiki come from Dolma 1.7 (Soldaini et al., 2024).
"""

MATHFUNCS = r"""# The 20 Most Important Mathematical Equations

A journey through the most elegant and influential formulas in mathematics

## 1. Euler's Identity

$$e^{i\pi} + 1 = 0$$

Connects five fundamental constants (e, i, π, 1, 0), revealing the profound relationship between exponential \
functions and trigonometry.

## 2. Pythagorean Theorem

$$a^2 + b^2 = c^2$$

In right triangles, the hypotenuse squared equals the sum of the squares of the other sides.

## 3. The Fundamental Theorem of Calculus

$$\int_a^b f(x)\,dx = F(b) - F(a)$$

Establishes that differentiation and integration are inverse operations.

## 4. Maxwell's Equations

$$\nabla \times \mathbf{E} = -\frac{\partial \mathbf{B}}{\partial t}$$

Unified electricity and magnetism as manifestations of the same force.
"""

MULTI_COLUMN = """stakeholders has occurred in other nations, with groups and individuals refusing to risk being \
appropriated into the industry's public relations ambitions. It now looks like that with vigilance, tobacco \
control advocates can easily foment similar distaste in many areas of the business community.

Tobacco industry posturing about its corporate responsibility can never hide the ugly consequences of its \
ongoing efforts. With 4.9 million smokers currently dying from tobacco use each year, and the industry \
unblinkingly concurring that its products are addictive, this leaves BAT to argue why it should not be held \
to be largely accountable for the annual deaths of some 754 600 smokers, and Philip Morris some 803 600 smokers.

## INDUSTRY WATCH

# Corporate social responsibility and the tobacco industry: hope or hype?

N Hirschhorn

Corporate social responsibility (CSR) emerged from a realisation among transnational corporations of the \
need to account for and redress their adverse impact on society. This report explains the origins and \
theory behind CSR; examines internal company documents from Philip Morris showing the company's \
deliberations on the matter, and the company's perspective on its own behaviour; and reflects on whether \
marketing tobacco is antithetical to social responsibility.

Over the past three decades increasing pressure from non-governmental organisations (NGOs), governments \
and the United Nations, has required transnational corporations (TNCs) to examine and redress the adverse \
impact their businesses have on society and the environment. This report first provides the context and \
development of CSR; then, from internal company documents, examines how PM came to its own version. This \
paper examines whether a tobacco company espousing CSR should be judged simply as a corporate entity along \
standards of business ethics, or as an irretrievably negative force in the realm of public health, thereby \
rendering CSR an oxymoron.

## CORPORATE SOCIAL RESPONSIBILITY: THE CONTEXT

The term “corporate social responsibility” is in vogue at the moment but as a concept it is vague and \
means different things to different people. The unprecedented expansion of power and influence of TNCs \
over the past three decades has accelerated global trade and development, but also environmental damage \
and abuses of
"""

GOLD = {
    "earnings": EARNINGS,
    "olmo2-pg4": OLMO2,
    "mathfuncs": MATHFUNCS,
    "multi_column_miss": MULTI_COLUMN,
    "blank_book_pg1": "null",
}


@pytest.fixture(scope="module")
def tests(fixtures_dir):
    return load_tests(fixtures_dir / "olmocr" / "tests.jsonl")


def write_outputs(folder, pages):
    for stem, text in pages.items():
        (folder / f"{stem}_pg1_repeat1.md").write_text(text, encoding="utf-8")
    return folder


def test_gold_transcription_passes_every_fixture_test(tests, tmp_path):
    score = score_outputs(tests, write_outputs(tmp_path, GOLD), renderer=None)
    failed = [(r.id, r.explanation) for r in score.results if not r.passed]
    assert failed == []
    assert len(score.results) == 33 + 4  # a baseline added for each page without one
    assert score.overall == 1.0
    assert score.math_fallback == [t["id"] for t in tests if t["type"] == "math"]


@pytest.mark.parametrize(
    ("stem", "old", "new", "failing"),
    [
        # Leaving the page number in fails the absent test.
        ("earnings", "2023.\n", "2023.\n\n62\n", {"earnings_table04"}),
        # "Year Ended" over the label column instead of the year columns is no longer their heading.
        (
            "earnings",
            '<tr><th></th><th colspan="3">Year Ended</th></tr>',
            '<tr><th>Year Ended</th><th colspan="3"></th></tr>',
            {"earnings_table00"},
        ),
        # Swapping two cells breaks left/right and the heading test of 3.32T: under the full-width
        # "Pretraining" row the heading is still looked for in the cell's own column only.
        (
            "olmo2-pg4",
            "<td>3.71T</td><td>3.32T</td>",
            "<td>3.32T</td><td>3.71T</td>",
            {"olmo2-pg4_table01", "olmo2-pg4_table02", "olmo2-pg4_table05"},
        ),
        ("mathfuncs", "c^2$$", "c^3$$", {"mathfuncs_05"}),
        ("mathfuncs", "## 2. Pythagorean Theorem", "## 5. Pythagorean Theorem (moved)", set()),
        ("blank_book_pg1", "null", "Chapter One begins", {"test1_blank"}),
    ],
)
def test_targeted_mistakes_fail_exactly_their_tests(tests, tmp_path, stem, old, new, failing):
    assert old in GOLD[stem]
    pages = dict(GOLD, **{stem: GOLD[stem].replace(old, new)})
    score = score_outputs(tests, write_outputs(tmp_path, pages), renderer=None, baselines="none")
    assert {r.id for r in score.results if not r.passed} == failing


def test_reading_order_mistake_fails_the_order_tests(tests, tmp_path):
    sections = MATHFUNCS.split("## ")
    # Calculus, Pythagoras, Euler, Maxwell: the first two order tests break, the third still holds.
    swapped = "## ".join([sections[0], sections[3], sections[2], sections[1], sections[4]])
    pages = dict(GOLD, mathfuncs=swapped)
    score = score_outputs(tests, write_outputs(tmp_path, pages), renderer=None, baselines="none")
    assert {r.id for r in score.results if not r.passed} == {"mathfuncs_00", "mathfuncs_01"}
