"""olmOCR-Bench unit tests: load them, and run one against one candidate Markdown page.

The rules follow olmOCR-Bench (allenai/olmocr, ``olmocr/bench``) so that pass rates computed here
are comparable with published ones. Each test is a dict in the benchmark's JSONL schema (common
fields ``pdf``, ``page``, ``id``, ``type``, ``max_diffs``); the type decides the rule:

- ``present`` / ``absent``: ``text`` found (or not) with rapidfuzz ``partial_ratio`` at least
  ``1 - max_diffs / len(text)``, optionally case-insensitive and limited to the ``first_n`` /
  ``last_n`` characters;
- ``order``: ``before`` and ``after`` both found within ``max_diffs`` edits, some match of
  ``before`` starting before some match of ``after``;
- ``table``: some cell of some HTML or Markdown table matches ``cell`` and its neighbours match
  ``up`` / ``down`` / ``left`` / ``right`` / ``top_heading`` / ``left_heading``, each with ratio at
  least ``max(0.5, 1 - max_diffs / len)``, on the table as the benchmark lays it out
  (:class:`jina_ocr.bench.tables.BenchTable`);
- ``math``: an equation of the page equals ``math`` exactly, or renders the same (KaTeX);
- ``baseline``: the page has alphanumerics, does not end in a loop (counted after whitespace runs
  are collapsed), has no CJK or emoji; with
  ``max_length`` it is a blank-page check instead;
- ``format``: ``text`` appears as a heading, in bold or in italics;
- ``footnote``: a footnote ``marker`` exists, optionally with given text before or after it.

Texts are normalised first (:func:`normalize_text`), so Markdown emphasis, fancy quotes and
whitespace never decide a test.
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from pathlib import Path

from rapidfuzz import fuzz

from jina_ocr.bench import latex
from jina_ocr.bench.tables import BenchTable, bench_tables
from jina_ocr.errors import UserError

TEST_TYPES = ("present", "absent", "order", "table", "math", "baseline", "format", "footnote")

_REPLACEMENTS = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\uff3f": "_",
        "\u2013": "-",
        "\u2014": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2212": "-",
        "\u00b5": "\u03bc",
    }
)
# olmOCR-Bench's normalisation, in its order: <br> first, then whitespace, then emphasis markers.
# Whitespace is collapsed before emphasis is removed, so a "*" on one line pairs with one on a later
# line (two bullet lines lose their bullets), exactly as the benchmark reads them.
_BR = re.compile(r"<br/?>")
_SPACE = re.compile(r"\s+")
_EMPHASIS = (
    (re.compile(r"\*\*(.*?)\*\*"), r"\1"),
    (re.compile(r"__(.*?)__"), r"\1"),
    (re.compile(r"</?b>"), ""),
    (re.compile(r"</?i>"), ""),
    (re.compile(r"\*(.*?)\*"), r"\1"),
    (re.compile(r"_(.*?)_"), r"\1"),
)


@lru_cache(maxsize=1024)
def normalize_text(text: str) -> str:
    """The text as olmOCR-Bench compares it: formatting and typography removed, spacing collapsed.

    ``<br>`` / ``<br/>`` become a space; whitespace runs become one space; ``**bold**``,
    ``__bold__``, ``<b>`` / ``<i>`` tags, ``*italic*`` and ``_italic_`` lose their markers; the text
    is NFC-normalised; curly quotes, en/em dashes and the minus sign become ASCII, and the micro
    sign becomes Greek mu. Cached: every test of a page normalises the same page.
    """
    text = _SPACE.sub(" ", _BR.sub(" ", text))
    for pattern, replacement in _EMPHASIS:
        text = pattern.sub(replacement, text)
    text = unicodedata.normalize("NFC", text)
    return text.translate(_REPLACEMENTS)


def load_tests(path) -> list[dict]:
    """All tests of a JSONL file, or of every ``*.jsonl`` file in a folder (sorted by name).

    Each test gets ``_category`` (the stem of its file: olmOCR-Bench keeps one category per
    file). Tests are validated here, so a bad benchmark fails at load time with its file and
    line, not halfway through scoring.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise UserError(f"{path}: no .jsonl test files in this folder")
    elif path.is_file():
        files = [path]
    else:
        raise UserError(f"{path}: no such test file or folder")
    tests: list[dict] = []
    seen: dict[str, str] = {}
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise UserError(
                f"{file}: not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})"
            ) from None
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{file}:{number}"
            try:
                test = json.loads(line)
            except json.JSONDecodeError as error:
                raise UserError(f"{where}: not valid JSON ({error.msg})") from None
            if not isinstance(test, dict):
                raise UserError(f"{where}: a test must be a JSON object")
            problem = validate_test(test)
            if problem:
                raise UserError(f"{where}: {problem}")
            if test["id"] in seen:
                raise UserError(f"{where}: duplicate test id {test['id']!r} (first in {seen[test['id']]})")
            seen[test["id"]] = where
            test["_category"] = file.stem
            tests.append(test)
    return tests


_REQUIRED = {
    "present": ("text",),
    "absent": ("text",),
    "order": ("before", "after"),
    "table": ("cell",),
    "math": ("math",),
    "baseline": (),
    "format": ("text", "format"),
    "footnote": ("marker",),
}


def validate_test(test: dict) -> str | None:
    """Why this test dict is malformed, or None when it is valid."""
    for key in ("pdf", "id", "type"):
        if not test.get(key):
            return f"missing {key!r}"
    kind = test["type"]
    if kind not in _REQUIRED:
        return f"unknown test type {kind!r} (expected one of {', '.join(TEST_TYPES)})"
    page = test.get("page", 1)
    if not isinstance(page, int) or page < 1:
        return f"'page' must be a positive integer, got {page!r}"
    max_diffs = test.get("max_diffs", 0)
    if not isinstance(max_diffs, int) or max_diffs < 0:
        return f"'max_diffs' must be a non-negative integer, got {max_diffs!r}"
    for key in _REQUIRED[kind]:
        value = test.get(key)
        if not isinstance(value, str) or not value.strip():
            return f"a {kind} test needs a non-empty {key!r}"
    if kind == "order":
        before, after = normalize_text(test["before"]), normalize_text(test["after"])
        if max_diffs > len(before) // 2 or max_diffs > len(after) // 2:
            return "'max_diffs' is more than half of 'before' or 'after'"
    if kind == "format" and test["format"] not in ("heading", "bold", "italic"):
        return f"'format' must be heading, bold or italic, got {test['format']!r}"
    if kind == "footnote" and any(ch.isspace() for ch in test["marker"]):
        return "a footnote 'marker' cannot contain whitespace"
    return None


def run_test(test: dict, markdown: str, *, renderer="auto") -> tuple[bool, str]:
    """Run one olmOCR-Bench test on one candidate page; returns (passed, explanation).

    The explanation is empty when the test passes. ``renderer`` only matters for math tests:
    ``"auto"`` uses KaTeX in Chromium when both are installed, ``None`` forces the
    normalised-LaTeX rule (what the GRPO reward uses, as it must be fast), or pass a
    :class:`jina_ocr.bench.katex.Renderer`.
    """
    passed, explanation, _ = evaluate(test, markdown, renderer=renderer)
    return passed, explanation


def evaluate(test: dict, markdown: str, *, renderer="auto") -> tuple[bool, str, str]:
    """Like :func:`run_test`, plus how it was decided: ``"rule"``, ``"exact"``, ``"katex"`` or ``"latex-fallback"``.

    The third value lets the scorer report which math tests were not decided by rendering.
    """
    problem = validate_test(test)
    if problem:
        raise ValueError(f"test {test.get('id')!r}: {problem}")
    markdown = markdown or ""
    kind = test["type"]
    if kind == "math":
        return _math(test, markdown, renderer)
    check = {
        "present": _presence,
        "absent": _presence,
        "order": _order,
        "table": _table,
        "baseline": _baseline,
        "format": _format,
        "footnote": _footnote,
    }[kind]
    passed, explanation = check(test, markdown)
    return passed, explanation, "rule"


def _threshold(max_diffs: int, reference: str) -> float:
    return 1.0 - max_diffs / (len(reference) or 1)


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _presence(test: dict, markdown: str) -> tuple[bool, str]:
    query = normalize_text(test["text"])
    content = normalize_text(markdown)
    if not test.get("case_sensitive", True):
        query, content = query.lower(), content.lower()
    first_n, last_n = test.get("first_n"), test.get("last_n")
    if first_n and last_n:
        content = content[:first_n] + content[-last_n:]
    elif first_n:
        content = content[:first_n]
    elif last_n:
        content = content[-last_n:]
    max_diffs = test.get("max_diffs", 0)
    present = test["type"] == "present"
    # As in the benchmark, a page shorter than the query is aligned inside the query, so a page that
    # is one space "contains" any query with a space in it; that page's baseline test charges it.
    threshold = _threshold(max_diffs, query)
    ratio = fuzz.partial_ratio(query, content) / 100.0
    if present and ratio < threshold:
        return False, f"expected {_short(query)!r}: best match ratio {ratio:.3f} < {threshold:.3f}"
    if not present and ratio >= threshold:
        return False, f"expected {_short(query)!r} to be absent: match ratio {ratio:.3f} >= {threshold:.3f}"
    return True, ""


def approximate_match_ends(pattern: str, text: str, max_edits: int) -> list[int]:
    """End offsets (exclusive) of every substring of ``text`` within ``max_edits`` edits of ``pattern``.

    Myers' bit-vector algorithm for approximate string matching (Myers 1999, in Hyyrö's
    formulation): one pass over the text with the pattern's edit-distance column packed into a
    Python int, so a 200-character pattern over a 20,000-character page costs a few ms.
    """
    m = len(pattern)
    if m == 0:
        return list(range(len(text) + 1))
    peq: dict[str, int] = {}
    for i, ch in enumerate(pattern):
        peq[ch] = peq.get(ch, 0) | (1 << i)
    mask = (1 << m) - 1
    high = 1 << (m - 1)
    pv, mv, score = mask, 0, m
    ends = [0] if m <= max_edits else []  # the empty prefix is within reach when the pattern is short
    for j, ch in enumerate(text):
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & mask)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        # Searching, not aligning: the top row of the matrix is all zeros, so nothing is shifted in.
        ph = (ph << 1) & mask
        mh = (mh << 1) & mask
        pv = mh | (~(xv | ph) & mask)
        mv = ph & xv
        if score <= max_edits:
            ends.append(j + 1)
    return ends


def approximate_match_starts(pattern: str, text: str, max_edits: int) -> list[int]:
    """Start offsets of every substring of ``text`` within ``max_edits`` edits of ``pattern``, ascending.

    Cut the pattern into ``max_edits + 1`` pieces: a match with at most that many edits contains
    one piece unchanged (pigeonhole), so only windows around exact occurrences of a piece are
    searched with :func:`approximate_match_ends`. Pages are long and tests many, so this matters.
    """
    m, n = len(pattern), len(text)
    if max_edits == 0 or m <= 2 * max_edits + 1:
        if max_edits == 0:
            starts, pos = [], text.find(pattern)
            while pos >= 0:
                starts.append(pos)
                pos = text.find(pattern, pos + 1)
            return starts
        return sorted(n - end for end in approximate_match_ends(pattern[::-1], text[::-1], max_edits))
    pieces = max_edits + 1
    bounds = [m * i // pieces for i in range(pieces + 1)]
    windows = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        piece = pattern[lo:hi]
        pos = text.find(piece)
        while pos >= 0:
            windows.append((max(0, pos - lo - max_edits), min(n, pos - lo + m + max_edits)))
            pos = text.find(piece, pos + 1)
    starts: set[int] = set()
    for left, right in _merge(windows):
        window = text[left:right][::-1]
        starts.update(right - end for end in approximate_match_ends(pattern[::-1], window, max_edits))
    return sorted(starts)


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for left, right in sorted(intervals):
        if merged and left <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], right))
        else:
            merged.append((left, right))
    return merged


def _order(test: dict, markdown: str) -> tuple[bool, str]:
    content = normalize_text(markdown)
    before, after = normalize_text(test["before"]), normalize_text(test["after"])
    max_diffs = test.get("max_diffs", 0)
    before_starts = approximate_match_starts(before, content, max_diffs)
    if not before_starts:
        return False, f"'before' text {_short(before)!r} not found within {max_diffs} edits"
    after_starts = approximate_match_starts(after, content, max_diffs)
    if not after_starts:
        return False, f"'after' text {_short(after)!r} not found within {max_diffs} edits"
    if before_starts[0] < after_starts[-1]:
        return True, ""
    return False, f"{_short(before)!r} never appears before {_short(after)!r}"


_NEIGHBOURS = (("up", -1, 0), ("down", 1, 0), ("left", 0, -1), ("right", 0, 1))


def _ratio(a: str, b: str) -> float:
    return fuzz.ratio(a, b) / 100.0


def _heading_matches(expected: str, need: float, first: list[str], fallback: list[str]) -> tuple[bool, str]:
    """The benchmark's heading rule: the best of ``first`` must reach ``need``; only when none of
    them resembles ``expected`` at all (every ratio 0, empty headings included) are the non-empty
    ``fallback`` cells tried instead. Returns (passed, the best heading seen)."""
    scored = [(_ratio(expected, text), text) for text in map(normalize_text, first)]
    best = max(scored, default=(0.0, ""))
    if best[0] == 0.0:
        best = max(
            ((_ratio(expected, text), text) for text in map(normalize_text, fallback)), default=(0.0, "")
        )
    return best[0] >= need, best[1]


def _headings(table: BenchTable, r: int, c: int, vertical: bool) -> tuple[list[str], list[str]]:
    """A cell's heading candidates, then its fall-back cells: for the top heading the column's headings
    and the non-empty heading-row cells above it, else every non-empty cell above (leftwards alike)."""
    if vertical:
        line, headings, marked = (
            [row[c] for row in table.rows[:r]],
            table.col_headers.get(c, []),
            table.header_rows,
        )
    else:
        line, headings, marked = table.rows[r][:c], table.row_headers.get(r, []), table.header_cols
    filled = [(k, text) for k, text in enumerate(line) if text.strip()]
    return headings + [text for k, text in filled if k in marked], [text for _, text in filled]


def _table_cell_problems(table: BenchTable, r: int, c: int, test: dict, max_diffs: int) -> list[str]:
    """Why the cell at slot (r, c) does not satisfy the test's neighbour and heading fields."""
    rows = table.rows
    problems = []
    for name, dr, dc in _NEIGHBOURS:
        expected = normalize_text(test.get(name) or "")
        if not expected or not (0 <= r + dr < table.n_rows and 0 <= c + dc < table.n_cols):
            continue  # no such field, or the cell is on the table's edge: the benchmark skips the check
        other = normalize_text(rows[r + dr][c + dc])
        ratio = _ratio(expected, other)
        if ratio < max(0.5, _threshold(max_diffs, expected)):
            problems.append(f"{name} of the cell is {other!r}, expected {expected!r} (ratio {ratio:.2f})")
    for name, vertical in (("top_heading", True), ("left_heading", False)):
        expected = normalize_text(test.get(name) or "")
        if not expected:
            continue
        ok, seen = _heading_matches(
            expected, max(0.5, _threshold(max_diffs, expected)), *_headings(table, r, c, vertical)
        )
        if not ok:
            problems.append(f"{name} {seen!r}, expected {expected!r}" if seen else f"no {name} found")
    return problems


def _table(test: dict, markdown: str) -> tuple[bool, str]:
    tables = bench_tables(markdown, include_markdown=not test.get("ignore_markdown_tables", False))
    if not tables:
        return False, "no tables found in the page"
    max_diffs = test.get("max_diffs", 0)
    target = normalize_text(test["cell"])
    threshold = max(0.5, _threshold(max_diffs, target))
    reasons: list[str] = []
    for table in tables:
        for r, row in enumerate(table.rows):
            for c, text in enumerate(row):
                if _ratio(target, normalize_text(text)) < threshold:
                    continue
                problems = _table_cell_problems(table, r, c, test, max_diffs)
                if not problems:
                    return True, ""
                reasons.extend(problems)
    if not reasons:
        return False, f"no table cell matches {target!r} (threshold {threshold:.2f})"
    return False, "cells match but their neighbours do not: " + "; ".join(reasons[:4])


_DISALLOWED = re.compile(
    "[\u4e00-\u9fff\u3040-\u309f\u30a0-\u30ff\U0001f600-\U0001f64f\U0001f300-\U0001f5ff"
    "\U0001f680-\U0001f6ff\U0001f1e0-\U0001f1ff]"
)
_IMAGE_LINK = re.compile(r"!\[.*?\]\(.*?\)")


def tail_repeats(text: str, max_ngram: int = 5) -> list[int]:
    """For n = 1..max_ngram: how many times the last n characters repeat back to back at the end.

    ``"abcxyxyxy"`` gives 1 for n = 1 and 3 for n = 2. The baseline test fails a page whose
    tail repeats more than 30 times, the signature of a decoding loop.
    """
    counts = []
    for n in range(1, max_ngram + 1):
        if len(text) < n:
            counts.append(0)
            continue
        unit = text[-n:]
        count, end = 0, len(text)
        while end >= n and text[end - n : end] == unit:
            count += 1
            end -= n
        counts.append(count)
    return counts


def _baseline(test: dict, markdown: str) -> tuple[bool, str]:
    max_length = test.get("max_length")
    if max_length is not None:
        counted = _IMAGE_LINK.sub("", markdown) if test.get("max_length_skips_image_alt_tags") else markdown
        length = sum(ch.isalnum() for ch in counted)
        if length > max_length:
            return (
                False,
                f"{length} alphanumeric characters on a page expected to be blank (max {max_length})",
            )
        return True, ""
    if not any(ch.isalnum() for ch in markdown):
        return False, "the page has no alphanumeric characters"
    max_repeats = test.get("max_repeats", 30)
    # The benchmark collapses whitespace runs before it counts: 37 trailing newlines are one space.
    for n, count in enumerate(tail_repeats(_SPACE.sub(" ", markdown)), start=1):
        if count > max_repeats:
            return False, f"the page ends with {count} repeats of a {n}-character sequence"
    if test.get("check_disallowed_characters", True):
        found = _DISALLOWED.findall(markdown)
        if found:
            return False, f"disallowed characters (CJK or emoji): {''.join(found[:10])!r}"
    return True, ""


_FORMAT_PATTERNS = {
    "heading": [
        (re.compile(r"^#{1,6}\s+(.+?)$", re.MULTILINE), 0),
        (re.compile(r"<h[1-6][^>]*>(.*?)</h[1-6]>", re.IGNORECASE | re.DOTALL), 0),
    ],
    "bold": [
        (re.compile(r"\*\*(.*?)\*\*", re.DOTALL), 0),
        (re.compile(r"__(.*?)__", re.DOTALL), 0),
        (re.compile(r"<(b|strong)\b[^>]*>(.*?)</\1>", re.IGNORECASE | re.DOTALL), 1),
    ],
    "italic": [
        (re.compile(r"(?<!\*)\*(?!\*)(.*?)(?<!\*)\*(?!\*)", re.DOTALL), 0),
        (re.compile(r"(?<!_)_(?!_)(.*?)(?<!_)_(?!_)", re.DOTALL), 0),
        (re.compile(r"<(i|em)\b[^>]*>(.*?)</\1>", re.IGNORECASE | re.DOTALL), 1),
    ],
}


def _format(test: dict, markdown: str) -> tuple[bool, str]:
    kind = test["format"]
    found = []
    for pattern, group in _FORMAT_PATTERNS[kind]:
        for match in pattern.finditer(markdown):
            found.append(normalize_text(match.groups()[group]))
    query = normalize_text(test["text"])
    if not test.get("case_sensitive", True):
        query = query.lower()
        found = [text.lower() for text in found]
    threshold = _threshold(test.get("max_diffs", 0), query)
    if any(fuzz.partial_ratio(query, text) / 100.0 >= threshold for text in found):
        return True, ""
    sample = ", ".join(repr(_short(text, 20)) for text in found[:3]) or "none"
    return False, f"{_short(query)!r} not found in {kind} text (found: {sample})"


_SUPERSCRIPT_DIGITS = str.maketrans(
    "0123456789", "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)


def _alnum_lower(text: str) -> str:
    return "".join(ch for ch in normalize_text(text) if ch.isalnum()).lower()


def _footnote(test: dict, markdown: str) -> tuple[bool, str]:
    marker = test["marker"]
    escaped = re.escape(marker)
    spans = [m.span() for m in re.finditer(rf"\[\^{escaped}\](?!:)", markdown)]
    spans += [m.span() for m in re.finditer(rf"<sup[^>]*>{escaped}</sup>", markdown, re.IGNORECASE)]
    if marker.isdigit() and marker.isascii():
        spans += [m.span() for m in re.finditer(re.escape(marker.translate(_SUPERSCRIPT_DIGITS)), markdown)]
    if not spans:
        return (
            False,
            f"footnote marker {marker!r} not found as [^{marker}], <sup>{marker}</sup> or superscript",
        )
    failures = []
    for key, before in (("appears_before_marker", True), ("appears_after_marker", False)):
        if not test.get(key):
            continue
        wanted = normalize_text(test[key])
        target = _alnum_lower(wanted)
        threshold = _threshold(test.get("max_diffs", 0), wanted)
        ok = False
        for start, end in spans:
            window = _alnum_lower(
                markdown[max(0, start - 200) : start] if before else markdown[end : end + 200]
            )
            if not window:
                continue
            size = min(len(window), 2 * len(target))
            window = window[-size:] if before else window[:size]
            if fuzz.partial_ratio(target, window) / 100.0 >= threshold:
                ok = True
                break
        if not ok:
            side = "before" if before else "after"
            failures.append(f"{_short(wanted)!r} not found {side} marker {marker!r}")
    return (not failures), "; ".join(failures)


def _math(test: dict, markdown: str, renderer) -> tuple[bool, str, str]:
    reference = test["math"].strip()
    equations = latex.extract_equations(markdown, dollars=not test.get("ignore_dollar_delimited", False))
    if any(equation == reference for equation in equations):
        return True, "", "exact"
    # Try the most similar equations first: rendering is the expensive part.
    equations.sort(key=lambda equation: -fuzz.ratio(equation, reference))
    if renderer == "auto":
        from jina_ocr.bench import katex

        renderer = katex.default_renderer()
    if renderer is not None:
        if renderer.matches_any(reference, equations):
            return True, "", "katex"
        return False, f"no equation renders like {_short(reference, 60)!r} ({len(equations)} tried)", "katex"
    if any(latex.equivalent(reference, equation) for equation in equations):
        return True, "", "latex-fallback"
    return (
        False,
        f"no equation matches {_short(reference, 60)!r} after LaTeX normalisation "
        f"({len(equations)} tried; no KaTeX renderer available)",
        "latex-fallback",
    )
