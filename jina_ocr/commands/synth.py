"""``jina-ocr synth``: write JinaOCRSynth pages (PNG, PDF, Markdown) and their olmOCR-Bench tests."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from jina_ocr.commands._options import check_positive
from jina_ocr.errors import UserError

NAME = "synth"
HELP = "Generate synthetic pages with ground-truth Markdown and olmOCR-Bench unit tests."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from jina_ocr.synth import PAGE_SIZES, PROFILES

    parser.add_argument("out", type=Path, help="output folder (page_NNNNN.png/.pdf/.md and tests.jsonl)")
    parser.add_argument("--n", type=int, default=10, help="number of pages (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="run seed: the same seed gives the same files")
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="dense",
        help="dense: formulas and tables (default); plain: text only; mixed: 70%% dense, 30%% plain",
    )
    parser.add_argument(
        "--page-size",
        default="a4",
        help=f"{', '.join(PAGE_SIZES)} or WIDTHxHEIGHT in points (default a4)",
    )
    parser.add_argument("--font-size", type=float, default=None, help="body size in points (default: varies)")
    parser.add_argument("--dpi", type=int, default=150, help="resolution of the PNG images (default 150)")
    parser.add_argument(
        "--degrade", action="store_true", help="scan-like images: noise, blur, skew, JPEG (PDFs stay clean)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (output does not depend on it)")


def run(args: argparse.Namespace) -> int:
    from jina_ocr.synth import Degradation, parse_page_size, write_pages
    from jina_ocr.synth.fonts import FontMissingError
    from jina_ocr.synth.page import PageTooSmallError
    from jina_ocr.synth.tex import TexMissingError

    check_positive(args, "n")
    if not 1 <= args.jobs <= (os.cpu_count() or 1) * 4:
        raise UserError(f"--jobs must be between 1 and {(os.cpu_count() or 1) * 4}, got {args.jobs}")
    if not 36 <= args.dpi <= 600:
        raise UserError(f"--dpi must be between 36 and 600, got {args.dpi}")
    if args.font_size is not None and not 4 <= args.font_size <= 72:
        raise UserError(f"--font-size must be between 4 and 72 points, got {args.font_size:g}")
    try:
        page_size = parse_page_size(args.page_size)
    except ValueError as error:
        raise UserError(f"--page-size: {error}") from None
    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"{args.out} exists and is not a folder")
    started = time.perf_counter()
    try:
        write_pages(
            args.out,
            args.n,
            args.seed,
            jobs=args.jobs,
            profile=args.profile,
            page_size=page_size,
            font_size=args.font_size,
            dpi=args.dpi,
            degradation=Degradation() if args.degrade else None,
        )
    except (TexMissingError, FontMissingError, PageTooSmallError) as error:
        raise UserError(str(error)) from None
    elapsed = time.perf_counter() - started
    print(f"wrote {args.n} pages to {args.out} in {elapsed:.1f} s", file=sys.stderr)
    return 0
