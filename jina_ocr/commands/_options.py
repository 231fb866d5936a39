"""Options that several subcommands share (not a subcommand itself: the leading underscore hides it)."""

from __future__ import annotations

import argparse


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how the model runs: resolution mode, device and dtype."""
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
