"""Score a folder of OCR outputs against olmOCR-Bench tests, as the benchmark does.

Outputs are Markdown files named ``{pdf_stem}_pg{page}_repeat{n}.md`` in subfolders mirroring the
PDF paths of the tests (``arxiv_math/2503.01234.pdf`` page 1 -> ``arxiv_math/2503.01234_pg1_repeat1.md``),
so the output of any OCR system can be scored, not only ours. A test passes when more than half
of its repeats pass; a category (one JSONL file) scores its pass rate; the overall score is the
unweighted mean of the categories, with a bootstrap interval that resamples tests within each
category, as the benchmark stratifies its bootstrap by JSONL file. Like olmOCR-Bench, every PDF
without a ``baseline`` test gets one on its page 1 (category ``baseline``), so an empty or looping
page costs something; :func:`with_baselines` can add one per page instead.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jina_ocr.bench import latex
from jina_ocr.bench.olmocr import evaluate
from jina_ocr.errors import UserError


@dataclass
class TestResult:
    id: str
    type: str
    pdf: str
    page: int
    category: str
    passed: bool
    explanation: str
    repeats: int
    repeats_passed: int
    method: str


@dataclass
class Score:
    """One system's results: per test, per category, per test type, overall and its interval."""

    results: list[TestResult]
    categories: dict[str, dict] = field(default_factory=dict)
    types: dict[str, dict] = field(default_factory=dict)
    overall: float = 0.0
    ci: tuple[float, float] = (0.0, 0.0)
    math_fallback: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def to_report(self) -> dict:
        """The JSON report: ``tests``, ``categories``, ``overall`` plus interval, types and fallbacks."""
        return {
            "tests": [
                {
                    "id": r.id,
                    "type": r.type,
                    "pdf": r.pdf,
                    "page": r.page,
                    "passed": r.passed,
                    "explanation": r.explanation,
                    "category": r.category,
                    "repeats": r.repeats,
                    "repeats_passed": r.repeats_passed,
                    "method": r.method,
                }
                for r in self.results
            ],
            "categories": self.categories,
            "types": self.types,
            "overall": self.overall,
            "overall_ci95": list(self.ci),
            "math_fallback": {
                "tests": self.math_fallback,
                "rule": "no KaTeX renderer (Chromium + KaTeX) was used: these math tests were "
                "decided by the normalised-LaTeX rule instead of a rendered comparison, and their "
                "references were not checked to render",
            }
            if self.math_fallback
            else None,
            "missing_outputs": self.missing,
        }


BASELINES = ("per-pdf", "per-page", "none")


def with_baselines(tests: list[dict], mode: str = "per-pdf") -> list[dict]:
    """The tests plus the default ``baseline`` tests (category ``baseline``) that olmOCR-Bench adds.

    ``"per-pdf"`` is the benchmark's rule, and what its overall score counts: every PDF without a
    baseline test on any page gets one on page 1, id ``{pdf}_baseline``. ``"per-page"`` checks
    every page of a multi-page PDF instead (ids ``{pdf}_pg{page}_baseline``), so a blank or looping
    page 2 costs something too; the score is then no longer the benchmark's. ``"none"`` adds none
    (the test files' own baseline tests still run).
    """
    if mode not in BASELINES:
        raise ValueError(f"unknown baseline mode {mode!r}; known: {', '.join(BASELINES)}")
    if mode == "none":
        return list(tests)
    per_page = mode == "per-page"
    covered = {(t["pdf"], t.get("page", 1) if per_page else 1) for t in tests if t["type"] == "baseline"}
    extra = []
    for pdf, page in dict.fromkeys((t["pdf"], t.get("page", 1) if per_page else 1) for t in tests):
        if (pdf, page) in covered:
            continue
        covered.add((pdf, page))
        extra.append(
            {
                "pdf": pdf,
                "page": page,
                "id": f"{pdf}_pg{page}_baseline" if per_page else f"{pdf}_baseline",
                "type": "baseline",
                "_category": "baseline",
            }
        )
    return tests + extra


def output_files(outputs: Path, pdf: str, page: int) -> list[Path]:
    """The repeats of one page's output: ``{stem}_pg{page}_repeat{n}.md`` beside the PDF's relative path."""
    rel = Path(pdf)
    folder = outputs / rel.parent
    pattern = re.compile(rf"^{re.escape(rel.stem)}_pg{page}_repeat\d+\.md$")
    if not folder.is_dir():
        return []
    found = sorted(p for p in folder.iterdir() if pattern.match(p.name))
    for path in found:
        if not path.is_file():
            raise UserError(f"{path}: named like an output page but not a file")
    return found


def score_outputs(
    tests: list[dict],
    outputs,
    *,
    renderer="auto",
    baselines: str = "per-pdf",
    bootstrap: int = 1000,
    seed: int = 0,
) -> Score:
    """Score every test on the outputs in folder ``outputs``; missing outputs fail their tests.

    ``renderer`` is passed on to the math tests (see :func:`jina_ocr.bench.olmocr.run_test`);
    with a renderer every equation on the pages with math tests is rendered up front in batches,
    so the browser starts once per batch rather than once per comparison.
    """
    outputs = Path(outputs)
    tests = with_baselines(tests, baselines)
    pages: dict[tuple[str, int], list[str]] = {}
    missing: list[str] = []
    for test in tests:
        key = (test["pdf"], test.get("page", 1))
        if key not in pages:
            files = output_files(outputs, *key)
            if not files:
                stem = Path(key[0]).with_suffix("")
                missing.append(f"{stem}_pg{key[1]}_repeat*.md")
            pages[key] = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    if renderer == "auto":
        from jina_ocr.bench import katex

        renderer = katex.default_renderer()
    if renderer is not None:
        wanted = []
        for test in tests:
            if test["type"] == "math":
                wanted.append(test["math"].strip())
                for text in pages[(test["pdf"], test.get("page", 1))]:
                    wanted.extend(
                        latex.extract_equations(text, not test.get("ignore_dollar_delimited", False))
                    )
        renderer.render_many(wanted)
    results = []
    for test in tests:
        texts = pages[(test["pdf"], test.get("page", 1))]
        outcomes = [evaluate(test, text, renderer=renderer) for text in texts]
        passes = sum(ok for ok, _, _ in outcomes)
        explanation = next((why for ok, why, _ in outcomes if not ok), "")
        if not texts:
            explanation = "no output file for this page"
        methods = {method for _, _, method in outcomes}
        method = (
            "latex-fallback"
            if "latex-fallback" in methods
            else (sorted(methods)[0] if methods else "missing")
        )
        results.append(
            TestResult(
                id=test["id"],
                type=test["type"],
                pdf=test["pdf"],
                page=test.get("page", 1),
                category=test.get("_category", "tests"),
                passed=passes * 2 > len(texts),
                explanation=explanation,
                repeats=len(texts),
                repeats_passed=passes,
                method=method,
            )
        )
    return summarize(results, missing=missing, bootstrap=bootstrap, seed=seed)


def _rates(results: list[TestResult], key) -> dict[str, dict]:
    groups: dict[str, list[bool]] = defaultdict(list)
    for result in results:
        groups[key(result)].append(result.passed)
    return {
        name: {"passed": sum(flags), "total": len(flags), "score": sum(flags) / len(flags)}
        for name, flags in sorted(groups.items())
    }


def summarize(results: list[TestResult], *, missing=(), bootstrap: int = 1000, seed: int = 0) -> Score:
    """Category and type pass rates, the mean over categories, and its 95 % bootstrap interval."""
    categories = _rates(results, lambda r: r.category)
    overall = float(np.mean([c["score"] for c in categories.values()])) if categories else 0.0
    return Score(
        results=results,
        categories=categories,
        types=_rates(results, lambda r: r.type),
        overall=overall,
        ci=bootstrap_interval(results, samples=bootstrap, seed=seed),
        math_fallback=[r.id for r in results if r.method == "latex-fallback"],
        missing=list(missing),
    )


def bootstrap_interval(
    results: list[TestResult], *, samples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the overall score when each category's tests are resampled.

    Resampling within categories keeps every category in every replicate, so the interval
    reflects the uncertainty of each pass rate, not of which categories happened to be drawn.
    """
    groups: dict[str, list[bool]] = defaultdict(list)
    for result in results:
        groups[result.category].append(result.passed)
    if not groups or samples <= 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = np.zeros(samples)
    for flags in groups.values():
        values = np.asarray(flags, dtype=float)
        draws = rng.integers(0, len(values), size=(samples, len(values)))
        means += values[draws].mean(axis=1)
    means /= len(groups)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return (float(low), float(high))


def format_table(scores: dict[str, Score]) -> str:
    """A plain-text table: one column per system, rows for categories, test types and the overall."""
    names = list(scores)
    categories = sorted({c for s in scores.values() for c in s.categories})
    types = sorted({t for s in scores.values() for t in s.types})
    rows: list[list[str]] = [["", *names]]

    def cell(block: dict, key: str) -> str:
        entry = block.get(key)
        return f"{100 * entry['score']:.1f} ({entry['passed']}/{entry['total']})" if entry else "-"

    rows.extend([f"category {c}", *(cell(scores[n].categories, c) for n in names)] for c in categories)
    rows.extend([f"type {t}", *(cell(scores[n].types, t) for n in names)] for t in types)
    rows.append(
        [
            "overall (95% CI)",
            *(
                f"{100 * scores[n].overall:.1f} [{100 * scores[n].ci[0]:.1f}, {100 * scores[n].ci[1]:.1f}]"
                for n in names
            ),
        ]
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
