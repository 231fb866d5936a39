"""Our olmOCR-Bench scorer against olmocr's own, side by side on the same tests and outputs.

Both scorers judge, in one run: the fixture pages' olmOCR-Bench tests on the outputs of Tesseract,
RapidOCR and pymupdf4llm, on the careful transcriptions of ``tests/test_bench_fixtures.py`` and
each of its targeted mistakes, and on a generated two-page PDF (one baseline per PDF); plus every
hand-made case of ``tests/test_bench_verdicts.py``. olmocr's side is olmocr's ``benchmark.py``
itself (its test classes, the baselines it adds, its score and bootstrap interval), run in its own
environment, which ``--olmocr-python`` names; it is never imported here. It needs::

    python3 -m venv OLMOCR_VENV
    OLMOCR_VENV/bin/pip install olmocr==0.4.27 --no-deps
    OLMOCR_VENV/bin/pip install beautifulsoup4 fuzzysearch rapidfuzz numpy tqdm playwright lxml pypdf pillow

Playwright's own browser download is not needed: the installed Chromium (the one our renderer uses)
is passed to it. Prints one row per system: tests, verdicts that differ (target 0), and both
overall scores with their 95 % intervals (the same bootstrap, drawn from different random streams).

    python benchmarks/olmocr_agreement.py --olmocr-python OLMOCR_VENV/bin/python
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pymupdf

from jina_ocr.bench import katex, peers
from jina_ocr.bench.olmocr import evaluate, load_tests
from jina_ocr.bench.scoring import score_outputs

ROOT = Path(__file__).resolve().parents[1]

# Run inside olmocr's environment: point Playwright at our Chromium, then either run olmocr's
# benchmark.py on a folder (mode "bench") or its test classes on single cases (mode "cases").
_DRIVER = r"""
import json, runpy, sys
from playwright.sync_api._generated import BrowserType
_launch, chromium = BrowserType.launch, sys.argv[2]
def launch(self, *args, **kwargs):
    kwargs.setdefault("executable_path", chromium)
    return _launch(self, *args, **kwargs)
BrowserType.launch = launch
mode = sys.argv[1]
if mode == "bench":
    sys.argv = ["benchmark", "--dir", sys.argv[3]]
    runpy.run_module("olmocr.bench.benchmark", run_name="__main__")
else:
    from olmocr.bench.tests import load_single_test
    verdicts = []
    for case in json.load(open(sys.argv[3])):
        try:
            verdicts.append(bool(load_single_test(dict(case["test"])).run(case["page"])[0]))
        except Exception as error:
            verdicts.append(f"{type(error).__name__}: {error}")
    open(sys.argv[4], "w").write(json.dumps(verdicts))
"""


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _olmocr(python: str, chromium: str, *args: str) -> str:
    done = subprocess.run(
        [python, "-c", _DRIVER, *args[:1], chromium, *args[1:]], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"olmocr failed (exit {done.returncode}): {done.stderr[-800:]}")
    return done.stdout


_CANDIDATE = re.compile(r"^Candidate: (\S+)$")
_FAIL = re.compile(r"^\s+\[FAIL\] Test (\S+) on ")
_SCORE = re.compile(r"Average Score: ([\d.]+)% \(95% CI: \[([\d.]+)%, ([\d.]+)%\]\) over (\d+) tests")


def olmocr_bench(python: str, chromium: str, folder: Path) -> dict[str, dict]:
    """olmocr's benchmark.py on ``folder``: per candidate, the failing test ids, score, interval, count."""
    results: dict[str, dict] = {}
    current = None
    for line in _olmocr(python, chromium, "bench", str(folder)).splitlines():
        if match := _CANDIDATE.match(line):
            current = results.setdefault(match.group(1), {"failed": set()})
        elif current is not None and (match := _FAIL.match(line)):
            current["failed"].add(match.group(1))
        elif current is not None and (match := _SCORE.search(line)):
            score, low, high, total = match.groups()
            current.update(overall=float(score), ci=(float(low), float(high)), total=int(total))
            current = None
    return results


def write_candidate(folder: Path, pages: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stem, text in pages.items():
        (folder / f"{stem}.md").write_text(text, encoding="utf-8")


def fixture_folder(work: Path, fixtures: Path) -> Path:
    """The fixture benchmark in olmocr's layout: tests, pdfs/, and one folder per candidate system."""
    folder = work / "fixtures"
    (folder / "pdfs").mkdir(parents=True)
    shutil.copy(fixtures / "tests.jsonl", folder / "fixture_tests.jsonl")
    for pdf in fixtures.glob("*.pdf"):
        shutil.copy(pdf, folder / "pdfs" / pdf.name)
    gold_module = _load(ROOT / "tests" / "test_bench_fixtures.py")
    gold = {f"{stem}_pg1_repeat1": text for stem, text in gold_module.GOLD.items()}
    write_candidate(folder / "gold", gold)
    # The targeted mistakes are the parameters of the fixture test that checks them.
    mistakes = gold_module.test_targeted_mistakes_fail_exactly_their_tests.pytestmark[0].args[1]
    for number, (stem, old, new, _) in enumerate(mistakes, start=1):
        write_candidate(
            folder / f"mistake{number}",
            dict(gold, **{f"{stem}_pg1_repeat1": gold[f"{stem}_pg1_repeat1"].replace(old, new)}),
        )
    tests = load_tests(folder / "fixture_tests.jsonl")
    for name in peers.PEERS:
        reason = peers.unavailable(name)
        if reason:
            print(f"{name}: skipped, {reason}")
            continue
        peers.run_peer(name, tests, folder / "pdfs", folder)
    return folder


def multipage_folder(work: Path) -> Path:
    """A two-page PDF with tests on both pages, and two candidates: page 2 right, and page 2 looping."""
    folder = work / "multipage"
    (folder / "pdfs").mkdir(parents=True)
    with pymupdf.open() as doc:
        for text in ("Chapter one begins here.", "Chapter two follows."):
            doc.new_page(width=300, height=200).insert_text((20, 60), text, fontsize=14)
        doc.save(folder / "pdfs" / "book.pdf")
    tests = [
        {
            "pdf": "book.pdf",
            "page": 1,
            "id": "book_p1",
            "type": "present",
            "text": "Chapter one begins here.",
        },
        {"pdf": "book.pdf", "page": 2, "id": "book_p2", "type": "present", "text": "Chapter two follows."},
    ]
    (folder / "book.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests), encoding="utf-8")
    page1 = "Chapter one begins here."
    write_candidate(folder / "right", {"book_pg1_repeat1": page1, "book_pg2_repeat1": "Chapter two follows."})
    write_candidate(
        folder / "looping", {"book_pg1_repeat1": page1, "book_pg2_repeat1": "Chapter two" + " la" * 40}
    )
    return folder


def compare(folder: Path, theirs: dict[str, dict], rows: list[list[str]]) -> int:
    tests = load_tests(folder)
    differing = 0
    for name in sorted(theirs):
        score = score_outputs(tests, folder / name)
        ours_failed = {r.id for r in score.results if not r.passed}
        other = theirs[name]
        diff = ours_failed ^ other["failed"]
        differing += len(diff)
        rows.append(
            [
                f"{folder.name}/{name}",
                f"{len(score.results)}/{other['total']}",
                str(len(score.results) - len(ours_failed)),
                str(other["total"] - len(other["failed"])),
                str(len(diff)) + (f" ({', '.join(sorted(diff))})" if diff else ""),
                f"{100 * score.overall:.1f} [{100 * score.ci[0]:.1f}, {100 * score.ci[1]:.1f}]",
                f"{other['overall']:.1f} [{other['ci'][0]:.1f}, {other['ci'][1]:.1f}]",
            ]
        )
    return differing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--olmocr-python", required=True, help="the python of an environment with olmocr 0.4.27"
    )
    parser.add_argument(
        "--fixtures",
        type=Path,
        default=ROOT / "tests" / "fixtures" / "olmocr",
        help="the olmOCR-Bench fixture folder",
    )
    args = parser.parse_args()
    if not args.fixtures.is_dir():
        sys.exit(f"--fixtures {args.fixtures}: no such folder")
    renderer = katex.default_renderer()
    if renderer is None:
        sys.exit("needs Chromium and KaTeX (.ci/deps/bench.sh installs both): math is compared by rendering")
    rows = [
        [
            "system",
            "tests (ours/olmocr)",
            "passed ours",
            "passed olmocr",
            "verdicts differing",
            "overall ours [95% CI]",
            "overall olmocr [95% CI]",
        ]
    ]
    differing = 0
    with tempfile.TemporaryDirectory(prefix="olmocr-agreement-") as tmp:
        work = Path(tmp)
        for folder in (fixture_folder(work, args.fixtures), multipage_folder(work)):
            differing += compare(
                folder, olmocr_bench(args.olmocr_python, renderer.chromium, str(folder)), rows
            )
        cases = _load(ROOT / "tests" / "test_bench_verdicts.py").CASES
        job, out = work / "cases.json", work / "verdicts.json"
        job.write_text(json.dumps([{"test": test, "page": page} for _, test, page, _ in cases]))
        _olmocr(args.olmocr_python, renderer.chromium, "cases", str(job), str(out))
        theirs = json.loads(out.read_text())
    ours = [evaluate(test, page, renderer=renderer)[0] for _, test, page, _ in cases]
    recorded = [verdict for *_, verdict in cases]
    case_diff = [what for (what, *_), a, b in zip(cases, ours, theirs, strict=True) if a is not b]
    stale = [what for (what, *_), a, b in zip(cases, recorded, theirs, strict=True) if a is not b]
    differing += len(case_diff)
    rows.append(
        [
            "hand-made cases",
            f"{len(cases)}/{len(theirs)}",
            str(sum(ours)),
            str(sum(v is True for v in theirs)),
            str(len(case_diff)) + (f" ({'; '.join(case_diff)})" if case_diff else ""),
            "-",
            "-",
        ]
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))
    print(f"verdicts that differ: {differing}")
    if stale:
        print(
            "recorded verdicts in tests/test_bench_verdicts.py that olmocr no longer gives: "
            + "; ".join(stale)
        )


if __name__ == "__main__":
    main()
