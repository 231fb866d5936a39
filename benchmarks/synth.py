"""Throughput of JinaOCRSynth: pages per minute per profile, written to a folder as `jina-ocr synth` does.

Each row generates N pages (PNG at 150 dpi, PDF, Markdown, tests.jsonl) with 1 worker process and
with --jobs workers, so the table shows both the per-core cost and how it scales.

    python benchmarks/synth.py --n 24 --jobs 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from jina_ocr.synth import write_pages


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=24, help="pages per measurement")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for the parallel rows")
    parser.add_argument("--page-size", default="a4")
    parser.add_argument("--dpi", type=int, default=150)
    args = parser.parse_args()

    # Warm-up: font files and TeX's format file come into the page cache.
    with tempfile.TemporaryDirectory() as tmp:
        write_pages(tmp, 1, seed=1, profile="dense", dpi=args.dpi)

    rows = []
    for profile in ("dense", "plain"):
        for jobs in sorted({1, args.jobs}):
            with tempfile.TemporaryDirectory() as tmp:
                started = time.perf_counter()
                write_pages(
                    tmp, args.n, seed=7, profile=profile, page_size=args.page_size, dpi=args.dpi, jobs=jobs
                )
                elapsed = time.perf_counter() - started
            rows.append((profile, jobs, args.n, elapsed))

    print(f"JinaOCRSynth throughput ({args.page_size}, {args.dpi} dpi, {os.cpu_count()} CPUs visible)")
    print(f"{'profile':<8} {'jobs':>4} {'pages':>5} {'seconds':>8} {'pages/min':>9} {'s/page':>7}")
    for profile, jobs, n, elapsed in rows:
        print(f"{profile:<8} {jobs:>4} {n:>5} {elapsed:>8.1f} {60 * n / elapsed:>9.1f} {elapsed / n:>7.2f}")


if __name__ == "__main__":
    main()
