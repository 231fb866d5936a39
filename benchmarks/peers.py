"""Reference points: Tesseract, RapidOCR and pymupdf4llm scored on the olmOCR-Bench fixture PDFs.

Reads the five fixture pages with each engine (renderings of about 2,000 px for the OCR engines)
and scores them with the fixture's olmOCR-Bench tests exactly as ``jina-ocr bench --peers`` does, printing pass rates per
category and test type, the overall mean with its bootstrap interval, and the time per engine.

    python benchmarks/peers.py [--keep OUTPUT_DIR] [--report REPORT.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from jina_ocr.bench import peers
from jina_ocr.bench.olmocr import load_tests
from jina_ocr.bench.scoring import format_table, score_outputs

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "olmocr"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the engines' Markdown outputs here")
    parser.add_argument("--report", type=Path, help="write both engines' per-test reports here")
    args = parser.parse_args()

    tests = load_tests(FIXTURES / "tests.jsonl")
    scores, seconds = {}, {}
    with tempfile.TemporaryDirectory(prefix="jina-ocr-peers-") as tmp:
        out_dir = args.keep or Path(tmp)
        for name in peers.PEERS:
            reason = peers.unavailable(name)
            if reason:
                print(f"{name}: skipped, {reason}")
                continue
            start = time.perf_counter()
            folder = peers.run_peer(name, tests, FIXTURES, out_dir)
            seconds[name] = time.perf_counter() - start
            scores[name] = score_outputs(tests, folder)
    if not scores:
        return
    print(format_table(scores))
    pages = len({(t["pdf"], t.get("page", 1)) for t in tests})
    for name, spent in seconds.items():
        print(f"{name}: {pages} pages OCRed in {spent:.1f} s ({spent / pages:.1f} s/page)")
    if args.report:
        args.report.write_text(json.dumps({n: s.to_report() for n, s in scores.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
