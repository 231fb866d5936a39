"""The GRPO reward of jina-ocr-v1's post-training: graded terms in [0, 1], multiplied.

One sampled page transcription is compared with its reference Markdown (and, when given, the
page's olmOCR-style unit tests). Each failure mode is charged to exactly one term, so the logged
terms say what went wrong:

========== ===================================================================== ======
term       what it measures                                                      floor
========== ===================================================================== ======
content    1 - normalised edit distance of the prose (tables, equations and         -
           repetition loops removed first: those have their own terms)
formulas   matched similarity of the equations (canonical LaTeX, so spacing,        -
           redundant braces and broken braces do not count here)
tables     matched TEDS of the tables (HTML and Markdown tables alike)            0.1
structure  balanced braces, ``\\left``/``\\right`` and environments in every       0.2
           equation, balanced ``$``, closed HTML tags
unit_tests pass rate of the olmOCR-style tests (math by the normalised-LaTeX      0.2
           rule: rendering is far too slow for RL)
repetition share of the output that is looped copies beyond what the               none
           reference repeats; a quarter of the page looped zeroes it
format     the benchmark instruction's conventions: no wrapping code fence,       0.2
           HTML tables, ``$`` math delimiters, ``null`` for (only) a blank page,
           no leaked grounding or chat tokens
========== ===================================================================== ======

A floor ``f`` maps a raw score ``s`` to ``f + (1 - f) * s``: a page whose tables are all wrong
still earns something for its prose, while the ordering of raw scores (the signal GRPO needs)
is kept. Repetition has no floor, so a looping sample is never rewarded. Matched terms divide
by the larger of the predicted and reference counts, so extra tables or formulas cost as much
as missing ones; a term with nothing to compare on either side is 1.

Everything here is a pure function of its inputs. Precompute the reference once per prompt with
:func:`prepare_reference` when scoring a group of samples against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz.distance import Levenshtein

from jina_ocr.bench import latex
from jina_ocr.bench.olmocr import evaluate, normalize_text
from jina_ocr.bench.omnidoc import TedsNode, greedy_match, teds, teds_tree
from jina_ocr.bench.tables import markdown_tables, split_tables

TERMS = ("content", "formulas", "tables", "structure", "unit_tests", "repetition", "format")
FLOORS = {
    "content": 0.0,
    "formulas": 0.0,
    "tables": 0.1,
    "structure": 0.2,
    "unit_tests": 0.2,
    "repetition": 0.0,
    "format": 0.2,
}
# Redundant (looped) share of the output at which the repetition term reaches 0.
REPETITION_TOLERANCE = 0.25
# A repeat counts as a loop from the third copy on and once it spans a few words: a word said
# twice, or "0 0" in a table, is not a loop.
_MIN_COPIES = 3
_MIN_REDUNDANT_WORDS = 4


def floored(raw: float, floor: float) -> float:
    """``floor + (1 - floor) * raw``: at least ``floor``, still 1 for a perfect raw score."""
    return floor + (1.0 - floor) * raw


def redundant_mask(words: list[str]) -> np.ndarray:
    """Which words are looped copies: True for every copy of a repeated block beyond the first.

    A block of ``p`` words repeated back to back at least three times is a loop. In a loop the
    words of each later copy recur at distance ``p`` one after another, so the candidate periods
    are the distances shared by a few consecutive words (ordinary prose almost never has any);
    each candidate is then checked exactly by comparing the word ids with themselves shifted by
    ``p``. Only whole periods are marked, so removing the marked words leaves one copy.
    """
    n = len(words)
    mask = np.zeros(n, dtype=bool)
    if n < _MIN_COPIES:
        return mask
    # Each word's id is the position of its first occurrence (map runs the loop in C).
    first: dict[str, int] = {}
    ids = np.array(list(map(first.setdefault, words, range(n))), dtype=np.int64)
    if len(first) == n:
        return mask
    # Distance from each word back to the previous occurrence of the same word, all at once:
    # sort the positions by word (stably); neighbours with equal words give the distances.
    order = np.argsort(ids, kind="stable")
    same_word = ids[order][1:] == ids[order][:-1]
    previous = np.zeros(n, dtype=np.int64)
    previous[order[1:][same_word]] = np.diff(order)[same_word]
    # Runs of equal distances: a run of length r at distance p is r words repeating p words back.
    edges = np.flatnonzero(np.diff(previous)) + 1
    starts = np.concatenate(([0], edges))
    lengths = np.diff(np.concatenate((starts, [n])))
    values = previous[starts]
    keep = (values > 0) & (lengths >= np.minimum(values, 3)) & (values * (_MIN_COPIES - 1) <= n)
    for period in np.unique(values[keep]).tolist():
        same = np.concatenate(([False], ids[period:] == ids[:-period], [False]))
        bounds = np.flatnonzero(np.diff(same.astype(np.int8)))
        for begin, stop in zip(bounds[::2].tolist(), bounds[1::2].tolist(), strict=True):
            run = stop - begin
            whole = (run // period) * period
            if run // period + 1 >= _MIN_COPIES and whole >= _MIN_REDUNDANT_WORDS:
                mask[begin + period : begin + period + whole] = True
    return mask


def collapse_loops(text: str) -> str:
    """The text's words with looped copies removed (single-spaced)."""
    words = text.split()
    mask = redundant_mask(words)
    if not mask.any():
        return " ".join(words)
    return " ".join(w for w, drop in zip(words, mask, strict=True) if not drop)


def _redundant_words(text: str) -> tuple[int, int]:
    words = text.split()
    return int(redundant_mask(words).sum()), len(words)


_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


_LEAKED = re.compile(r"<\|(ref|/ref|det|/det|grounding|User|Assistant)\|>|<image>|<\|end▁of▁sentence\|>")


def unwrap(markdown: str) -> str:
    """The page without a code fence wrapped around all of it (a format fault, charged to format only)."""
    match = _FENCE.match(markdown)
    return match.group(1) if match else markdown


def _clean(markdown: str) -> str:
    """What every term but format reads: the page unwrapped and without leaked special tokens."""
    return _LEAKED.sub("", unwrap(markdown))


def _is_blank(markdown: str) -> bool:
    body = unwrap(markdown).strip()
    return body == "" or body.lower() == "null"


@dataclass(frozen=True)
class Reference:
    """A reference page parsed once: its prose, tables, equations, loops and unit tests."""

    markdown: str
    prose: str
    tables: tuple[TedsNode, ...]
    formulas: tuple[str, ...]
    redundant_words: int
    blank: bool
    tests: tuple[dict, ...] = field(default_factory=tuple)


def _parts(markdown: str) -> tuple[str, list[str], list[str]]:
    tables, rest = split_tables(markdown)
    equations = latex.extract_equations(rest)
    prose = normalize_text(collapse_loops(latex.remove_equations(rest))).strip()
    return prose, tables, equations


def prepare_reference(markdown: str, tests=()) -> Reference:
    """Parse a reference page (and attach its unit tests) for repeated use by :func:`reward`."""
    body = _clean(markdown)
    blank = _is_blank(markdown)
    prose, tables, equations = _parts("" if blank else body)
    trees = tuple(tree for tree in (teds_tree(t) for t in tables) if tree is not None)
    return Reference(
        markdown=markdown,
        prose=prose,
        tables=trees,
        formulas=tuple(latex.canonical(eq) for eq in equations),
        redundant_words=_redundant_words(body)[0],
        blank=blank,
        tests=tuple(tests),
    )


def content_term(prose: str, reference: Reference) -> float:
    """1 - normalised edit distance between the prose parts (both loop-collapsed and normalised)."""
    if not prose and not reference.prose:
        return 1.0
    return 1.0 - Levenshtein.normalized_distance(prose, reference.prose)


def _matched_mean(similarity: list[list[float]], n_pred: int, n_ref: int) -> float:
    if n_pred == 0 and n_ref == 0:
        return 1.0
    return sum(s for _, _, s in greedy_match(similarity)) / max(n_pred, n_ref)


def formula_term(equations: list[str], reference: Reference) -> float:
    """Matched mean of ``1 - normalised edit distance`` between canonical equations."""
    predicted = [latex.canonical(eq) for eq in equations]
    sims = [[1.0 - Levenshtein.normalized_distance(p, r) for r in reference.formulas] for p in predicted]
    return _matched_mean(sims, len(predicted), len(reference.formulas))


def table_term(tables: list[str], reference: Reference) -> float:
    """Matched mean TEDS between the predicted and reference tables."""
    trees = [tree for tree in (teds_tree(t) for t in tables) if tree is not None]
    sims = [[teds(p, r) for r in reference.tables] for p in trees]
    return _matched_mean(sims, len(trees), len(reference.tables))


_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9]*)\b[^<>]*?(/?)>")
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "col", "area", "base", "wbr", "source"})


def html_errors(markdown: str) -> tuple[list[str], int]:
    """Unclosed or stray HTML tags, and the number of elements checked."""
    errors: list[str] = []
    stack: list[str] = []
    elements = 0
    for match in _TAG.finditer(markdown):
        closing, tag, self_closing = match.group(1), match.group(2).lower(), match.group(3)
        if tag in _VOID or self_closing:
            continue
        if not closing:
            elements += 1
            stack.append(tag)
        elif tag in stack:
            while stack[-1] != tag:
                errors.append(f"<{stack.pop()}> not closed before </{tag}>")
            stack.pop()
        else:
            errors.append(f"</{tag}> without an opening tag")
    errors.extend(f"<{tag}> never closed" for tag in stack)
    return errors, elements


def _dollar_errors(markdown: str) -> list[str]:
    unescaped = re.sub(r"\\\$", "", markdown)
    doubles = unescaped.count("$$")
    singles = unescaped.replace("$$", "").count("$")
    errors = []
    if doubles % 2:
        errors.append("odd number of '$$'")
    if singles % 2:
        errors.append("odd number of '$'")
    return errors


def structure_errors(markdown: str) -> tuple[list[str], int]:
    """Every structural fault of a page and the number of units checked (equations, elements, delimiters)."""
    equations = latex.extract_equations(markdown)
    errors = [f"${eq}$: {problem}" for eq in equations for problem in latex.structure_errors(eq)]
    tag_errors, elements = html_errors(markdown)
    errors.extend(tag_errors)
    errors.extend(_dollar_errors(markdown))
    return errors, len(equations) + elements + 1


def structure_term(markdown: str) -> float:
    """1 - faults / units checked, at least 0."""
    errors, units = structure_errors(markdown)
    return max(0.0, 1.0 - len(errors) / units)


def unit_test_term(markdown: str, tests) -> float:
    """Pass rate of the olmOCR-style tests (1.0 without tests); math by the normalised-LaTeX rule."""
    if not tests:
        return 1.0
    return sum(evaluate(test, markdown, renderer=None)[0] for test in tests) / len(tests)


def repetition_term(markdown: str, reference: Reference) -> float:
    """1 - (looped words beyond the reference's own) / words / tolerance, at least 0."""
    redundant, total = _redundant_words(markdown)
    excess = max(0, redundant - reference.redundant_words)
    if total == 0 or excess == 0:
        return 1.0
    return max(0.0, 1.0 - excess / total / REPETITION_TOLERANCE)


def format_violations(markdown: str, reference: Reference) -> list[str]:
    """Departures from the benchmark instruction's output conventions (see the module docstring)."""
    violations = []
    if _FENCE.match(markdown):
        violations.append("the page is wrapped in a code fence")
    body = unwrap(markdown)
    if markdown_tables(body):
        violations.append("a table is written as a Markdown pipe table instead of HTML")
    if re.search(r"\\\(|\\\[", body):
        violations.append("math delimited by \\( \\) or \\[ \\] instead of $ / $$")
    if reference.blank and body.strip() != "null":
        violations.append("a blank page must be transcribed as 'null'")
    if not reference.blank and _is_blank(markdown):
        violations.append("'null' (blank) for a page that has content")
    if _LEAKED.search(body):
        violations.append("special or grounding tokens leaked into the text")
    return violations


_FORMAT_CHECKS = 5  # fence, tables, delimiters, blank-page convention, leaked tokens


def format_term(markdown: str, reference: Reference) -> float:
    """1 - violations / checks."""
    return 1.0 - len(format_violations(markdown, reference)) / _FORMAT_CHECKS


@dataclass(frozen=True)
class Reward:
    """The reward and its parts: ``raw`` terms before floors, ``terms`` after, ``total`` their product."""

    total: float
    terms: dict[str, float]
    raw: dict[str, float]

    def log_dict(self, prefix: str = "reward/") -> dict[str, float]:
        """Flat scalars for a training logger: the total and every floored and raw term."""
        out = {f"{prefix}total": self.total}
        out.update({f"{prefix}{name}": value for name, value in self.terms.items()})
        out.update({f"{prefix}raw/{name}": value for name, value in self.raw.items()})
        return out


def reward(prediction: str, reference: Reference | str, tests=None) -> Reward:
    """The GRPO reward of one sampled transcription against its reference page.

    ``reference`` is a :class:`Reference` from :func:`prepare_reference` or the reference Markdown
    itself; ``tests`` (olmOCR-style test dicts) override the reference's attached tests.
    """
    if isinstance(reference, str):
        reference = prepare_reference(reference)
    tests = reference.tests if tests is None else tuple(tests)
    body = _clean(prediction)
    prose, tables, equations = _parts("" if _is_blank(prediction) else body)
    raw = {
        "content": content_term(prose, reference),
        "formulas": formula_term(equations, reference),
        "tables": table_term(tables, reference),
        "structure": structure_term(body),
        "unit_tests": unit_test_term(body, tests),
        "repetition": repetition_term(body, reference),
        "format": format_term(prediction, reference),
    }
    terms = {name: floored(value, FLOORS[name]) for name, value in raw.items()}
    total = float(np.prod(list(terms.values())))
    return Reward(total=total, terms=terms, raw=raw)
