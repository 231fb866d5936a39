"""Peak memory of converting a long PDF against a short one: memory must not grow with page count.

    python benchmarks/memory.py                    # 300 vs 3 pages: documents + processor
    python benchmarks/memory.py --stage convert    # the whole pipeline, model.generate included

Each PDF is converted in a fresh process, whose peak resident set size (``VmHWM`` on Linux, everything:
Python, torch, MuPDF's C heap, tensors) is read at the end. The pages are text pages of the same
kind, so a long PDF costs more time but, with pages rendered lazily and batches released, no more
memory; the script fails (exit 1) if the long PDF's peak exceeds the short one's by more than
``--budget-mb`` (150 MB by default). ``--stage convert`` runs ``Converter.convert`` with
``--max-new-tokens`` tokens per page (slow on CPU: every page goes through the vision encoder).
Without ``--model`` a tiny random-weight model is exported to a temporary folder: it exercises the
same code and tensor shapes as the real model, at a fraction of the weights' size.

The batch size defaults to 3 so that the short PDF fills one batch like every batch of the long
one; with a larger batch the comparison would measure batch size, not page count. glibc raises its
mmap threshold after the first large buffer is freed, so from the second batch on, the vision
encoder's buffers come from the heap and stay counted in RSS: a one-time step (about 150 MB for the
tiny model in gundam mode), not growth with page count. ``--mmap-threshold BYTES`` pins the
threshold (``MALLOC_MMAP_THRESHOLD_``) in the measured processes to show the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymupdf

from jina_ocr.runtime.pdf import DEFAULT_DPI


def make_pdf(pages: int, path: Path) -> None:
    """Text pages that all differ, like a long report."""
    document = pymupdf.open()
    for number in range(1, pages + 1):
        lines = [f"Chapter {number // 20 + 1}, page {number}"]
        lines += [f"Line {line} of page {number}: " + "lorem ipsum dolor sit amet " * 3 for line in range(40)]
        document.new_page().insert_text((56, 64), "\n".join(lines), fontsize=10)
    document.save(path, garbage=3, deflate=True)


def peak_rss_mb() -> float:
    """Peak resident set size of this process since it started its program.

    On Linux that is ``VmHWM``: ``ru_maxrss`` survives ``execve``, so a child spawned by a parent that
    had loaded torch would report the parent's peak, whatever the child itself used.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / 1024 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def child(args) -> None:
    """Convert one PDF and print one JSON line: pages, seconds, peak RSS before and after streaming."""
    import torch
    import transformers

    from jina_ocr.runtime.documents import open_document
    from jina_ocr.services.conversion import Converter, render_batches

    torch.set_grad_enabled(False)
    if args.stage == "convert":
        converter = Converter.from_pretrained(
            args.model, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, dpi=args.dpi
        )
    else:
        processor = transformers.AutoProcessor.from_pretrained(args.model, trust_remote_code=True)
    ready = peak_rss_mb()
    start = time.perf_counter()
    pages = 0
    if args.stage == "convert":
        for result in converter.convert(args.child):
            if result.error:
                raise SystemExit(f"page {result.page} failed: {result.error}")
            pages += 1
    else:
        with open_document(args.child, dpi=args.dpi) as document:
            for batch in render_batches(document, document.select(None), args.batch_size):
                inputs = processor.prepare_ocr_inputs([page.image for page in batch])
                pages += inputs["input_ids"].shape[0]
                del inputs
    seconds = time.perf_counter() - start
    print(json.dumps({"pages": pages, "seconds": seconds, "ready_mb": ready, "peak_mb": peak_rss_mb()}))


def measure(pdf: Path, args) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        str(pdf),
        "--model",
        str(args.model),
        "--stage",
        args.stage,
    ]
    command += ["--dpi", str(args.dpi), "--batch-size", str(args.batch_size)]
    command += ["--max-new-tokens", str(args.max_new_tokens)]
    environment = dict(os.environ)
    if args.mmap_threshold:
        environment["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        raise SystemExit(f"measuring {pdf.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="exported model folder (default: a tiny random export)")
    parser.add_argument("--stage", choices=("processor", "convert"), default="processor")
    parser.add_argument("--long", type=int, default=300, help="pages of the long PDF (default: %(default)s)")
    parser.add_argument("--short", type=int, default=3, help="pages of the short PDF (default: %(default)s)")
    parser.add_argument("--dpi", type=int, default=DEFAULT_DPI)
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument(
        "--mmap-threshold", type=int, help="pin glibc's mmap threshold (bytes) when measuring"
    )
    parser.add_argument("--max-new-tokens", type=int, default=1)
    parser.add_argument("--budget-mb", type=float, default=150.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        if args.model is None:
            from jina_ocr.export.presets import export_random

            args.model = export_random(folder / "jina-ocr-tiny", preset="tiny", seed=0)
        rows = []
        for pages in (args.short, args.long):
            pdf = folder / f"{pages}-pages.pdf"
            make_pdf(pages, pdf)
            rows.append((pdf, measure(pdf, args)))
    pinned = f", glibc mmap threshold {args.mmap_threshold}" if args.mmap_threshold else ""
    print(
        f"stage: {args.stage}, dpi {args.dpi}, batch size {args.batch_size}, model {Path(args.model).name}{pinned}"
    )
    return report([(pdf.name, row) for pdf, row in rows], args.budget_mb)


def report(rows: list[tuple[str, dict]], budget_mb: float) -> int:
    """Print the measurements of the short and the long PDF, in that order, and whether the long one's
    peak stays within ``budget_mb`` of the short one's; returns the exit status (1 when it does not)."""
    print(f"{'PDF':>14} {'pages/s':>8} {'RSS ready MB':>13} {'peak RSS MB':>12} {'growth MB':>10}")
    for name, row in rows:
        growth = row["peak_mb"] - row["ready_mb"]
        rate = row["pages"] / row["seconds"]
        print(f"{name:>14} {rate:8.1f} {row['ready_mb']:13.1f} {row['peak_mb']:12.1f} {growth:10.1f}")
    (_, short), (_, long) = rows
    difference = long["peak_mb"] - short["peak_mb"]
    verdict = "within" if difference <= budget_mb else "OVER"
    print(
        f"peak difference, {long['pages']} vs {short['pages']} pages: {difference:+.1f} MB "
        f"({verdict} {budget_mb:.0f} MB)"
    )
    return 0 if difference <= budget_mb else 1


if __name__ == "__main__":
    sys.exit(main())
