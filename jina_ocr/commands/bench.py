"""``jina-ocr bench``: score OCR outputs with olmOCR-Bench unit tests, optionally beside Tesseract, RapidOCR and pymupdf4llm."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from jina_ocr.errors import UserError

NAME = "bench"
HELP = (
    "score OCR outputs (any system's) against olmOCR-Bench unit tests, "
    "and/or against reference pages with OmniDocBench-style metrics"
)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--tests",
        type=Path,
        help="a JSONL test file, or a folder of them (one category per file)",
    )
    parser.add_argument(
        "--references",
        type=Path,
        help="folder of reference Markdown pages: score --outputs' pages of the same relative path with "
        "text edit distance, table TEDS / TEDS-S and formula edit distance (OmniDocBench style)",
    )
    parser.add_argument(
        "--outputs",
        type=Path,
        help="folder of candidate outputs named {pdf_stem}_pg{page}_repeat{n}.md, in subfolders mirroring the PDF paths",
    )
    parser.add_argument("--report", type=Path, help="write the per-test JSON report here")
    parser.add_argument(
        "--peers",
        nargs="*",
        choices=["tesseract", "rapidocr", "pymupdf4llm"],
        help="also read the same PDF pages with these engines (default: all three) and score them for comparison",
    )
    parser.add_argument(
        "--pdfs",
        type=Path,
        help="folder the tests' PDF paths are relative to, for --peers (default: TESTS' folder, or its pdfs/)",
    )
    parser.add_argument(
        "--peers-out", type=Path, help="keep the peers' outputs in this folder (default: a temporary one)"
    )
    parser.add_argument(
        "--skip-baseline",
        action="store_true",
        help="do not add default baseline tests (the test files' own baseline tests still run)",
    )
    parser.add_argument(
        "--baseline-per-page",
        action="store_true",
        help="add a default baseline test to every page without one, not only to page 1 of each PDF "
        "as olmOCR-Bench does (the overall score is then no longer the benchmark's)",
    )
    parser.add_argument(
        "--no-render",
        action="store_true",
        help="decide math tests by the normalised-LaTeX rule even when KaTeX and Chromium are installed",
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap samples for the interval (default 1000)"
    )


def _pdf_root(args) -> Path:
    if args.pdfs is not None:
        if not args.pdfs.is_dir():
            raise UserError(f"--pdfs {args.pdfs}: not a folder")
        return args.pdfs
    base = args.tests if args.tests.is_dir() else args.tests.parent
    return base / "pdfs" if (base / "pdfs").is_dir() else base


def run(args) -> int:
    if args.tests is None and args.references is None:
        raise UserError("give --tests (olmOCR-Bench unit tests), --references (reference pages), or both")
    if args.outputs is not None and not args.outputs.is_dir():
        raise UserError(f"--outputs {args.outputs}: not a folder")
    if args.report is not None:
        _check_writable(args.report)
    report: dict = {}
    if args.tests is not None:
        report.update(_unit_tests(args))
    elif args.peers is not None:
        raise UserError("--peers needs --tests: the peers are scored with the unit tests")
    if args.references is not None:
        report["page_metrics"] = _page_metrics(args)
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def _check_writable(path: Path) -> None:
    """Refuse a --report path that cannot be written before any work is done (not after the table)."""
    if path.is_dir():
        raise UserError(f"--report {path}: is a folder")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"--report {path}: {parent} is a file, not a folder")
            return


def _page_metrics(args) -> dict:
    from jina_ocr.bench.omnidoc import score_pages

    if args.outputs is None:
        raise UserError("--references needs --outputs: the folder of pages to score")
    if not args.references.is_dir():
        raise UserError(f"--references {args.references}: not a folder")
    result = score_pages(args.references, args.outputs)
    if not result["pages"]:
        raise UserError(f"--references {args.references}: no .md pages in this folder")

    def show(value, digits: int = 4) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    print(f"page metrics over {len(result['pages'])} pages (OmniDocBench style)")
    print(f"  text edit distance      {show(result['text_edit'])}")
    print(f"  table TEDS / TEDS-S     {show(result['table_teds'])} / {show(result['table_teds_s'])}")
    print(f"  formula edit distance   {show(result['formula_edit'])}  (edit-distance based, not CDM)")
    print(f"  overall                 {show(result['overall'], 1)}  (formula term: {result['formula_term']})")
    if result["missing_outputs"]:
        print(f"{len(result['missing_outputs'])} page(s) without output scored as empty", file=sys.stderr)
    return result


def _score(score_outputs, tests, folder, options):
    try:
        return score_outputs(tests, folder, **options)
    except RuntimeError as error:  # the browser that renders math failed
        raise UserError(
            f"{error}; rerun with --no-render to decide math tests by the normalised-LaTeX rule"
        ) from None


def _unit_tests(args) -> dict:
    from jina_ocr.bench import katex
    from jina_ocr.bench import peers as peer_engines
    from jina_ocr.bench.olmocr import load_tests
    from jina_ocr.bench.scoring import format_table, score_outputs

    if args.outputs is None and args.peers is None:
        raise UserError("give --outputs DIR to score, --peers to score the reference engines, or both")
    if args.bootstrap < 0:
        raise UserError("--bootstrap must be 0 or more")
    tests = load_tests(args.tests)
    if not tests:
        raise UserError(f"{args.tests}: contains no tests")
    renderer = None if args.no_render else katex.default_renderer()
    if renderer is not None:
        _refuse_unrenderable_references(tests, renderer)
    baselines = "none" if args.skip_baseline else "per-page" if args.baseline_per_page else "per-pdf"
    options = {"renderer": renderer, "baselines": baselines, "bootstrap": args.bootstrap}

    scores = {}
    if args.outputs is not None:
        scores[args.outputs.name or "outputs"] = _score(score_outputs, tests, args.outputs, options)
    peer_scores = {}
    if args.peers is not None:
        names = args.peers or list(peer_engines.PEERS)
        for name in names:
            reason = peer_engines.unavailable(name)
            if reason:
                raise UserError(f"--peers {name}: {reason}")
        root = _pdf_root(args)
        seconds = {}
        with tempfile.TemporaryDirectory(prefix="jina-ocr-peers-") as tmp:
            out_dir = args.peers_out or Path(tmp)
            for name in names:
                start = time.perf_counter()
                folder = peer_engines.run_peer(name, tests, root, out_dir)
                seconds[name] = time.perf_counter() - start
                peer_scores[name] = _score(score_outputs, tests, folder, options)
    scores.update(peer_scores)

    print(format_table(scores))
    if peer_scores:
        pages = len({(t["pdf"], t.get("page", 1)) for t in tests})
        print(
            "seconds per page: " + ", ".join(f"{name} {spent / pages:.2f}" for name, spent in seconds.items())
        )
    for name, score in scores.items():
        if score.missing:
            shown = ", ".join(score.missing[:5]) + (" ..." if len(score.missing) > 5 else "")
            print(
                f"{name}: {len(score.missing)} page(s) without output, their tests fail: {shown}",
                file=sys.stderr,
            )
        if score.math_fallback:
            print(
                f"{name}: {len(score.math_fallback)} math test(s) decided by the normalised-LaTeX rule, "
                "their references unchecked (no KaTeX renderer to show that they render): "
                + ", ".join(score.math_fallback),
                file=sys.stderr,
            )
    if renderer is not None and (version := katex.katex_version(renderer.katex_dir)) != katex.BENCHMARK_KATEX:
        print(
            f"warning: KaTeX {version or '(unknown release)'} in {renderer.katex_dir}; olmOCR-Bench renders "
            f"with {katex.BENCHMARK_KATEX} (.ci/deps/bench.sh installs it), so math verdicts may differ",
            file=sys.stderr,
        )
    report = scores[next(iter(scores))].to_report() if args.outputs is not None else {}
    if peer_scores:
        report["peers"] = {name: score.to_report() for name, score in peer_scores.items()}
    return report


def _refuse_unrenderable_references(tests: list[dict], renderer) -> None:
    """A math test whose reference KaTeX cannot render is refused as the tests load, as olmOCR-Bench's
    loader means to: such a test could never be passed by rendering, only by an exact copy."""
    references = [t["math"].strip() for t in tests if t["type"] == "math"]
    if not references:
        return
    try:
        rendered = renderer.render_many(references)
    except RuntimeError as error:
        raise UserError(
            f"{error}; rerun with --no-render to decide math tests by the normalised-LaTeX rule"
        ) from None
    for test in tests:
        if test["type"] == "math" and rendered[test["math"].strip()] is None:
            raise UserError(
                f"math test {test['id']!r} ({test.get('_category', 'tests')}.jsonl): its reference does not "
                f"render in KaTeX ({renderer.error(test['math'].strip())})"
            )
