"""The GRPO reward: perfect output scores 1, each corruption lowers exactly its term, floors hold."""

from __future__ import annotations

import random

import numpy as np
import pytest

from jina_ocr.rewards import (
    FLOORS,
    TERMS,
    collapse_loops,
    floored,
    prepare_reference,
    redundant_mask,
    reward,
)

LOOPED = "We report results on the held-out split after training for one epoch over the full mixture."

PAGE = rf"""# Composition of the pretraining data

Table 1 Composition of the pretraining data for OLMo 2. The mix is dominated by web text, with smaller shares of code, papers and mathematics.

<table><tr><th>Source</th><th>Type</th><th>Tokens</th><th>Words</th></tr><tr><td>DCLM</td><td>web</td><td>3.71T</td><td>3.32T</td></tr><tr><td>StarCoder</td><td>code</td><td>83.0B</td><td>11.8B</td></tr><tr><td>arXiv</td><td>papers</td><td>20.8B</td><td>12.2B</td></tr></table>

The loss is $L = -\sum_{{t}} \log p_\theta(x_t \mid x_{{<t}})$ and the step size follows

$$\eta_t = \eta_0 \frac{{1}}{{\sqrt{{t}}}}$$

{LOOPED}
"""

TESTS = [
    {
        "pdf": "p.pdf",
        "page": 1,
        "id": "present",
        "type": "present",
        "text": "Table 1 Composition of the pretraining data for OLMo 2.",
    },
    {
        "pdf": "p.pdf",
        "page": 1,
        "id": "table",
        "type": "table",
        "cell": "3.32T",
        "top_heading": "Words",
        "left": "3.71T",
    },
    {
        "pdf": "p.pdf",
        "page": 1,
        "id": "order",
        "type": "order",
        "before": "Composition of the pretraining",
        "after": "held-out split",
    },
    {
        "pdf": "p.pdf",
        "page": 1,
        "id": "math",
        "type": "math",
        "math": r"L = -\sum_{t} \log p_\theta(x_t \mid x_{<t})",
    },
    {"pdf": "p.pdf", "page": 1, "id": "baseline", "type": "baseline"},
]


@pytest.fixture(scope="module")
def reference():
    return prepare_reference(PAGE, TESTS)


def changed_terms(prediction: str, reference) -> dict[str, float]:
    result = reward(prediction, reference)
    return {name: value for name, value in result.raw.items() if value != 1.0}


def test_perfect_output_scores_one(reference):
    result = reward(PAGE, reference)
    assert result.total == 1.0
    assert set(result.terms) == set(result.raw) == set(TERMS)
    assert all(value == 1.0 for value in result.terms.values())


def test_dropping_a_table_cell_lowers_only_tables(reference):
    changed = changed_terms(PAGE.replace("<td>20.8B</td>", ""), reference)
    assert set(changed) == {"tables"}
    assert 0.9 < changed["tables"] < 1.0  # one node of a 21-node tree


def test_breaking_a_brace_lowers_only_structure(reference):
    broken = PAGE.replace(r"\frac{1}{\sqrt{t}}", r"\frac{1}{\sqrt{t}")
    assert set(changed_terms(broken, reference)) == {"structure"}
    stray = PAGE.replace(r"\eta_t =", r"\eta_t} =")
    assert set(changed_terms(stray, reference)) == {"structure"}
    # The same fault in the formula a unit test checks also fails that test, as KaTeX would.
    tested = PAGE.replace(r"x_{<t})", r"x_{<t}})")
    assert set(changed_terms(tested, reference)) == {"structure", "unit_tests"}


def test_looping_a_sentence_40_times_lowers_only_repetition_to_zero(reference):
    looped = PAGE.replace(LOOPED, " ".join([LOOPED] * 40))
    result = reward(looped, reference)
    assert {name for name, value in result.raw.items() if value != 1.0} == {"repetition"}
    assert result.raw["repetition"] == 0.0
    assert result.total == 0.0  # no floor: a loop is never rewarded


@pytest.mark.parametrize(
    "wrong",
    [
        "```markdown\n" + PAGE + "\n```",
        PAGE.replace("$$", "\\[", 1).replace("$$", "\\]", 1),
        PAGE.replace(LOOPED, LOOPED + " <|ref|>"),
        "null",
    ],
    ids=["code-fence", "bracket-delimiters", "leaked-token", "null-for-content"],
)
def test_wrong_format_lowers_format(reference, wrong):
    changed = changed_terms(wrong, reference)
    assert "format" in changed
    if wrong != "null":  # an empty answer also loses its content, of course
        assert set(changed) == {"format"}


def test_markdown_table_instead_of_html_lowers_only_format():
    reference = prepare_reference(
        "Text.\n\n<table><tr><td>a</td><td>b</td></tr><tr><td>1</td><td>2</td></tr></table>"
    )
    changed = changed_terms("Text.\n\n| a | b |\n|---|---|\n| 1 | 2 |", reference)
    assert set(changed) == {"format"}


def test_blank_page_convention():
    blank = prepare_reference("null")
    assert reward("null", blank).total == 1.0
    result = reward("Some hallucinated text.", blank)
    assert result.raw["format"] < 1.0 and result.raw["content"] == 0.0


def test_floors_hold_for_the_worst_outputs(reference):
    garbage = "``` <table><tr><td>x " + "\\( {{{ \\) $ " + "<|det|>"
    for prediction in ("", garbage, "| a |\n|---|\n| b |", "zzz " * 500):
        result = reward(prediction, reference)
        for name in TERMS:
            assert 0.0 <= result.raw[name] <= 1.0
            assert result.terms[name] >= FLOORS[name]
            assert result.terms[name] == pytest.approx(floored(result.raw[name], FLOORS[name]))
        assert result.total == pytest.approx(float(np.prod(list(result.terms.values()))))
    result = reward(garbage, reference)
    assert result.terms["structure"] == pytest.approx(0.2) and result.terms["tables"] >= 0.1
    assert FLOORS == {
        "content": 0.0,
        "formulas": 0.0,
        "tables": 0.1,
        "structure": 0.2,
        "unit_tests": 0.2,
        "repetition": 0.0,
        "format": 0.2,
    }


def test_unit_test_term_is_the_pass_rate(reference):
    result = reward(PAGE.replace("OLMo 2", "OLMo two"), reference)
    assert result.raw["unit_tests"] == pytest.approx(4 / 5)
    assert reward(PAGE, reference, tests=[]).raw["unit_tests"] == 1.0


def test_reference_may_be_plain_markdown_and_results_are_pure(reference):
    assert reward(PAGE, PAGE).total == 1.0
    first = reward(PAGE.replace("web", "www"), reference)
    second = reward(PAGE.replace("web", "www"), reference)
    assert first == second
    assert set(first.log_dict()) == {"reward/total"} | {f"reward/{t}" for t in TERMS} | {
        f"reward/raw/{t}" for t in TERMS
    }


def test_repetition_in_the_reference_is_not_penalised():
    rows = " ".join(["0 0 0 0 0"] * 6)
    reference = prepare_reference(f"Counts: {rows} end.")
    assert reward(f"Counts: {rows} end.", reference).raw["repetition"] == 1.0


def loops_by_definition(words: list[str]) -> np.ndarray:
    """Slow reference: mark whole periods of blocks repeated 3+ times back to back, spanning 4+ words."""
    n = len(words)
    mask = np.zeros(n, dtype=bool)
    for period in range(1, n // 2 + 1):
        i = 0
        while i + period < n:
            run = 0
            while i + period + run < n and words[i + run] == words[i + period + run]:
                run += 1
            whole = (run // period) * period
            if run // period + 1 >= 3 and whole >= 4:
                mask[i + period : i + period + whole] = True
            i += max(run, 1)
    return mask


def test_redundant_mask_matches_the_definition_where_periods_are_detectable():
    rng = random.Random(3)
    for _ in range(200):
        block = [rng.choice("abcdefgh") for _ in range(rng.randint(1, 6))]
        words = [rng.choice("xyz") for _ in range(rng.randint(0, 5))]
        words += block * rng.randint(1, 6) + [rng.choice("xyz") for _ in range(rng.randint(0, 5))]
        if len(set(block)) < len(block):
            continue  # candidate periods need mostly distinct words inside a block
        assert redundant_mask(words).tolist() == loops_by_definition(words).tolist(), words


def test_collapse_loops_keeps_exactly_one_copy():
    assert collapse_loops("c a b c a b c a b c y") == "c a b c y"
    assert collapse_loops("one two three four") == "one two three four"
    assert collapse_loops(" ".join(["the same sentence here."] * 40)) == "the same sentence here."
