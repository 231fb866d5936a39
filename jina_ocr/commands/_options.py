"""Options that several subcommands share (not a subcommand itself: the leading underscore hides it)."""

from __future__ import annotations

import argparse

from jina_ocr.documents import DEFAULT_DPI


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """How pages are read and the model runs: PDF resolution, resolution mode, decoding, device, dtype."""
    parser.add_argument(
        "--dpi", type=int, default=DEFAULT_DPI, help="PDF render resolution (default: %(default)s)"
    )
    parser.add_argument(
        "--mode",
        choices=("tiny", "small", "base", "large", "gundam"),
        help="resolution: tiny 512 px, small 640, base 1024, large 1280, gundam 1024 plus 640 px tiles "
        "(default: the model's, gundam for jina-ocr-v1)",
    )
    parser.add_argument(
        "--device", help="torch device, e.g. cuda, cuda:1, mps, cpu (default: best available)"
    )
    parser.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="weights dtype (default: bfloat16 on GPU, float32 on CPU)",
    )
    parser.add_argument(
        "--no-mtp", action="store_true", help="plain greedy decoding without FastMTP drafting"
    )
