"""``jina-ocr export``: write a Hub folder (flat remote code, config, weights, tokenizer, processor).

Three sources: ``--random --preset tiny|full`` (random weights, for tests and benchmarks), ``--from
DIR_OR_HUB_ID`` (a checkpoint laid out like deepseek-ai/DeepSeek-OCR or jinaai/jina-ocr-v1, a folder or
downloaded by its Hub id, converted to our code), and ``--no-weights`` with either, which writes
everything but the weights. The tools themselves load released checkpoints directly
(:mod:`jina_ocr.loading`); the export is for publishing a folder that plain Transformers loads.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jina_ocr.errors import UserError

NAME = "export"
HELP = "Write a Hub folder that loads with trust_remote_code=True."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", type=Path, help="folder to write (new or empty)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--random", action="store_true", help="random weights of a preset size")
    source.add_argument(
        "--from",
        dest="source",
        help="a checkpoint to convert: a folder, or a Hub id such as jinaai/jina-ocr-v1 (downloaded)",
    )
    parser.add_argument(
        "--preset", default="tiny", help="with --random: tiny (seconds on CPU) or full (3.34 B)"
    )
    parser.add_argument("--seed", type=int, default=0, help="with --random: the weights' seed")
    parser.add_argument("--no-weights", action="store_true", help="write config, code and processor only")
    parser.add_argument(
        "--mtp",
        choices=("on", "off"),
        help="FastMTP drafting by default in generation_config.json (default: off with --random, whose "
        "random head drafts nothing useful; with --from, on when the checkpoint has a head)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier export in the folder (the files an export writes; others stay)",
    )


def run(args: argparse.Namespace) -> int:
    from jina_ocr.export.folder import check_output, export_folder
    from jina_ocr.export.presets import export_random
    from jina_ocr.loading import load_released, local_folder

    if args.source is not None and Path(args.source).exists():
        _check_apart(args.out, Path(args.source))
    check_output(args.out, args.overwrite, flag="--overwrite")
    use_mtp = None if args.mtp is None else args.mtp == "on"
    if args.random:
        out = export_random(
            args.out,
            preset=args.preset,
            seed=args.seed,
            weights=not args.no_weights,
            overwrite=args.overwrite,
            mtp=bool(use_mtp),
        )
    else:
        source = load_released(local_folder(args.source, origin="--from"), weights=not args.no_weights)
        for note in source.notes:
            print(note)
        out = export_folder(
            args.out,
            config=source.config,
            model=source.model,
            tokenizer=source.tokenizer,
            overwrite=args.overwrite,
            use_mtp=use_mtp,
            processor_mode=source.mode,
        )
    print(f"wrote {out}")
    return 0


def _check_apart(out: Path, source: Path) -> None:
    """Refuse an output folder that is the source folder, holds it or lies inside it: replacing the
    output would delete the source, or the source would change under the export of it."""
    here, there = out.resolve(), source.resolve()
    if here == there or here in there.parents or there in here.parents:
        raise UserError(
            f"{out}: the output folder must lie apart from the checkpoint it converts (--from {source}); "
            "choose another folder"
        )
