"""Options that several subcommands share (not a subcommand itself: the leading underscore hides it)."""

from __future__ import annotations

import argparse

from jina_ocr.errors import UserError
from jina_ocr.remote_code.processing_jina_ocr import MODES, TILE_SIZE
from jina_ocr.runtime.documents import DEFAULT_DPI
from jina_ocr.services.fetch import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT, FetchPolicy

QUANTIZE_CHOICES = ("int8", "int4")
"""The schemes of :mod:`jina_ocr.quantization` (not imported here: it would load torch for ``--help``)."""


def check_positive(args: argparse.Namespace, *names: str) -> None:
    """Options that count something (pages, tokens, dots per inch, pixels, requests) must be at least 1:
    checked before anything loads, the message naming the flag as typed."""
    for name in names:
        value = getattr(args, name)
        if value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


def _mode_help() -> str:
    """The resolution modes, written from the processor's own table so the help cannot drift from it."""
    sizes = [
        f"{name} {size} px" + (f" plus {TILE_SIZE} px tiles" if tiled else "")
        for name, (size, tiled) in MODES.items()
    ]
    return ", ".join(sizes)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Which model: a folder or a Hub id (see :mod:`jina_ocr.loading`), and the Hub revision."""
    parser.add_argument(
        "--model",
        help="a model folder (a jina-ocr export, model files, or jina-ocr-v1 / DeepSeek-OCR as released) or "
        "a Hub id such as jinaai/jina-ocr-v1 (default: $JINA_OCR_MODEL, else the bundled model)",
    )
    parser.add_argument("--revision", help="with a Hub id: the branch, tag or commit (default: main)")


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """How pages are read and the model runs: PDF resolution, resolution mode, decoding, device, dtype."""
    parser.add_argument(
        "--dpi", type=int, default=DEFAULT_DPI, help="PDF render resolution (default: %(default)s)"
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        help=f"resolution: {_mode_help()} (default: the model's, gundam for jina-ocr-v1)",
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
        "--quantize",
        choices=QUANTIZE_CHOICES,
        help="store the decoder's weights, experts included, in 8 or 4 bits (weights only; computes in "
        "bfloat16 unless --dtype says otherwise; default: as loaded)",
    )
    parser.add_argument(
        "--no-mtp", action="store_true", help="plain greedy decoding without FastMTP drafting"
    )


def add_fetch_arguments(parser: argparse.ArgumentParser, *, max_fetch_mb: bool) -> None:
    """How documents named by URL are fetched (see :mod:`jina_ocr.services.fetch`); ``max_fetch_mb`` adds the
    size option, which the server does without (its request body limit applies)."""
    group = parser.add_argument_group("documents by URL")
    group.add_argument(
        "--allow-private-urls",
        action="store_true",
        help="also fetch from loopback, private, link-local and metadata addresses (refused by default)",
    )
    group.add_argument(
        "--fetch-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="longest wait for a connection, and for each next piece of an answer (default: %(default)s)",
    )
    if max_fetch_mb:
        group.add_argument(
            "--max-fetch-mb",
            type=float,
            default=DEFAULT_MAX_BYTES / 2**20,
            help="largest document fetched from a URL (default: %(default)s)",
        )


def fetch_policy(args: argparse.Namespace, max_bytes: int) -> FetchPolicy:
    """The :class:`FetchPolicy` of the options of :func:`add_fetch_arguments`."""
    if not args.fetch_timeout > 0:
        raise UserError("--fetch-timeout must be positive")
    return FetchPolicy(max_bytes=max_bytes, timeout=args.fetch_timeout, allow_private=args.allow_private_urls)
