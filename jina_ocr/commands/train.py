"""``jina-ocr train``: train a small jina-ocr model on JinaOCRSynth pages (``sft``), then its FastMTP head (``mtp``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jina_ocr.commands._options import MODES
from jina_ocr.errors import UserError

NAME = "train"
HELP = "Train a small model on synthetic pages (sft), then its FastMTP head by self-distillation (mtp)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    phases = parser.add_subparsers(dest="phase", required=True, metavar="{sft,graft,mtp,bundle}")
    sft = phases.add_parser(
        "sft",
        help="supervised training of the whole model (teacher forcing plus dense glyph supervision)",
        description="Train the whole model on drill and synth pages; run again with the same OUT to resume.",
    )
    sft.add_argument(
        "out", type=Path, help="run folder: model/, checkpoint.pt, log.jsonl (resumes if present)"
    )
    sft.add_argument(
        "--steps", type=int, default=8000, help="optimizer steps; the schedule ends there (8000)"
    )
    sft.add_argument("--batch-size", type=int, default=8, help="pages per step (8)")
    sft.add_argument("--lr", type=float, default=1e-3, help="peak learning rate of AdamW (1e-3)")
    sft.add_argument("--min-lr-ratio", type=float, default=0.1, help="final / peak learning rate (0.1)")
    sft.add_argument(
        "--decay-steps",
        type=int,
        help="hold the peak rate, then fall linearly to the final rate over the last N steps before --steps "
        "(default: a cosine over the whole run)",
    )
    sft.add_argument("--grad-clip", type=float, default=1.0, help="gradient-norm clipping threshold (1.0)")
    sft.add_argument("--warmup", type=int, default=100, help="linear warm-up steps (100)")
    sft.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay on matrices (0.05)")
    sft.add_argument("--seed", type=int, default=0, help="seed of the training pages, tokenizer and init (0)")
    sft.add_argument("--eval-seed", type=int, default=1, help="seed of the held-out pages (1)")
    sft.add_argument("--eval-every", type=int, default=250, help="steps between held-out evaluations (250)")
    sft.add_argument(
        "--eval-pages", type=int, default=16, help="held-out pages per stage and evaluation (16)"
    )
    sft.add_argument("--log-every", type=int, default=10, help="steps per logged mean loss (10)")
    sft.add_argument("--checkpoint-minutes", type=float, default=5.0, help="minutes between checkpoints (5)")
    sft.add_argument("--max-minutes", type=float, help="stop (and checkpoint) after this long; resume later")
    sft.add_argument(
        "--stop-at",
        type=int,
        help="stop (and checkpoint) after this step; the schedule still ends at --steps",
    )
    start = sft.add_mutually_exclusive_group()
    start.add_argument(
        "--init", type=Path, help="fine-tune these model files instead of starting from scratch"
    )
    start.add_argument(
        "--resume-from",
        type=Path,
        help="continue the run these model files record (step, stage, tokenizer) with a fresh optimizer, "
        "when OUT has no checkpoint (e.g. jina_ocr/models/jina-ocr-tiny)",
    )
    sft.add_argument("--stage", help="curriculum stage a new run starts in: line, rows or page (line)")
    sft.add_argument(
        "--mode",
        choices=MODES,
        help="processor mode the pages are read in (default: the starting files' mode, base for a new "
        "model); starting from files of another mode, the towers learn the new scale again first",
    )
    sft.add_argument(
        "--advance-cer",
        type=float,
        nargs="+",
        metavar="CER",
        help="held-out character error rate under which each stage but the last hands over (0.25 0.15)",
    )
    sft.add_argument(
        "--glyph-weight", type=float, default=1.0, help="weight of the per-glyph loss on visual tokens (1.0)"
    )
    sft.add_argument(
        "--align-weight", type=float, default=1.0, help="weight of the attention-alignment loss (1.0)"
    )
    sft.add_argument(
        "--align-layers",
        type=int,
        nargs="+",
        default=[1, 2],
        help="decoder layers whose first head the alignment loss supervises (1 2)",
    )
    sft.add_argument(
        "--towers-first",
        type=float,
        default=0.0,
        metavar="ACC",
        help="train the vision towers alone on the glyph loss until their held-out glyph accuracy "
        "reaches ACC, then the whole model (0: whole model from the first step)",
    )
    sft.add_argument(
        "--towers-from-glyphs",
        action="store_true",
        help="the vision towers learn from the glyph loss alone, at --vision-lr-scale of the rate: the "
        "decoder's losses stop at the visual tokens",
    )
    sft.add_argument(
        "--tokenizer-pages", type=int, default=300, help="pages BPE merges are learnt from (300)"
    )
    sft.add_argument(
        "--vocab-size", type=int, help="tokenizer size with specials (default: bytes only, no merges)"
    )
    sft.add_argument("--max-target-tokens", type=int, default=512, help="ground-truth tokens per page (512)")
    sft.add_argument(
        "--vision-warmup-steps",
        type=int,
        default=0,
        help="steps a fresh model trains with SAM, CLIP and the projector frozen at init (0)",
    )
    sft.add_argument(
        "--vision-lr-scale", type=float, default=1.0, help="learning rate of the vision towers / --lr (1.0)"
    )
    sft.add_argument(
        "--dense-fraction",
        type=float,
        help="share of synth pages with tables and formulas (recipe: 0.15); 0 needs no pdflatex",
    )
    sft.add_argument(
        "--letter-words",
        type=float,
        help="share of drill words made of random letters, which only reading predicts (recipe: 0)",
    )
    sft.add_argument(
        "--repeat-words",
        type=float,
        help="share of drill words that repeat the word before them, exactly or with one letter changed, "
        "so the decoder keeps its place where text repeats (recipe: 0)",
    )
    sft.add_argument(
        "--near-copies",
        type=float,
        help="share of those repeated words that change one letter rather than repeat exactly (recipe: 0.5)",
    )
    sft.add_argument(
        "--row-phase",
        type=float,
        help="share of a row of visual tokens over which the early stages' lines move within it, so the "
        "towers learn glyphs at every height (recipe: 1; 0: the fixed height of earlier runs)",
    )
    sft.add_argument(
        "--drill-fonts",
        nargs="+",
        help="body fonts of the drills, of helv, tiro and cour (recipe: all three)",
    )
    sft.add_argument(
        "--freeze-vision", action="store_true", help="keep SAM, CLIP and the projector fixed (with --init)"
    )
    sft.add_argument(
        "--gradient-checkpointing", action="store_true", help="recompute activations to save memory"
    )
    sft.add_argument(
        "--compile-towers",
        action="store_true",
        help="torch.compile SAM and CLIP (inductor; needs a C++ compiler on a CPU): faster steps after "
        "a minute or two of compiling",
    )
    sft.add_argument("--bf16", action="store_true", help="bfloat16 autocast (CUDA with bf16, or CPU)")
    sft.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    sft.add_argument("--workers", type=int, default=1, help="DataLoader processes that render pages (1)")
    sft.add_argument("--threads", type=int, help="torch CPU threads of each training process")
    sft.add_argument(
        "--processes",
        type=int,
        help="data-parallel CPU training processes, each with its share of every batch (1); on two "
        "cores, --processes 2 --threads 1 trains faster than one process with two threads",
    )

    graft = phases.add_parser(
        "graft",
        help="put another run's vision towers and glyph head into a run's checkpoint",
        description="Replace RUN's vision towers (SAM, CLIP, projector), glyph head and their optimizer "
        "moments with DONOR's, towers trained alone for instance; RUN's decoder and progress stay. "
        "Go on with train sft RUN.",
    )
    graft.add_argument("run", type=Path, help="the sft run folder that gets the towers")
    graft.add_argument("donor", type=Path, help="the sft run folder whose towers it gets")

    mtp = phases.add_parser(
        "mtp",
        help="train the FastMTP head on the frozen model's own greedy outputs (self-distillation)",
        description="Train the FastMTP head with the main model frozen; writes OUT/model.",
    )
    mtp.add_argument("model", type=Path, help="model files of a finished sft run (its model/ folder)")
    mtp.add_argument("out", type=Path, help="run folder: distill.pt (the greedy outputs), model/, log.jsonl")
    mtp.add_argument("--pages", type=int, default=256, help="synth pages to self-distil (256)")
    mtp.add_argument("--seed", type=int, default=2, help="seed of those pages; use one sft never saw (2)")
    mtp.add_argument("--epochs", type=int, default=3, help="passes over the distilled sequences (3)")
    mtp.add_argument("--batch-size", type=int, default=8, help="sequences per step (8)")
    mtp.add_argument("--lr", type=float, default=1e-3, help="peak learning rate of AdamW (1e-3)")
    mtp.add_argument("--held-out", type=int, default=32, help="distilled sequences kept for evaluation (32)")
    mtp.add_argument("--max-new-tokens", type=int, default=192, help="greedy tokens per page (192)")
    mtp.add_argument(
        "--letter-words",
        type=float,
        default=0.0,
        help="share of the pages' drill words made of random letters, which only the image predicts (0)",
    )
    mtp.add_argument(
        "--head-from",
        type=Path,
        help="model files whose FastMTP head this one starts from, the bundle before for instance "
        "(default: the head MODEL carries)",
    )
    mtp.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    mtp.add_argument("--threads", type=int, help="torch CPU threads")
    _add_bundle_arguments(phases)


def _add_bundle_arguments(phases) -> None:
    bundle = phases.add_parser(
        "bundle",
        help="make trained model files the bundled jina-ocr-tiny, if they read better than the bundled ones",
        description="Copy model files into the package's bundled model (weights in bf16) with a model card, "
        "when their held-out CER is at least one point lower than the bundled model's on the same pages.",
    )
    bundle.add_argument("model", type=Path, help="model files of a run (its model/ folder)")
    bundle.add_argument(
        "--card", type=Path, required=True, help="the model card (Markdown) to ship with them"
    )
    bundle.add_argument("--into", type=Path, help="bundle folder (default: the package's jina-ocr-tiny)")
    bundle.add_argument(
        "--pages",
        type=int,
        help="held-out pages of the comparison (200, a seed no training evaluation reads)",
    )
    bundle.add_argument("--threads", type=int, help="torch CPU threads")


def run(args: argparse.Namespace) -> int:
    if args.phase == "bundle":
        return _bundle(args)
    if args.phase == "graft":
        from jina_ocr.train.graft import graft

        record = graft(args.run, args.donor)
        print(
            f"{args.run}: towers of {args.donor} (its step {record['donor_step']}) at step {record['step']}"
        )
        return 0
    folder = _sft(args) if args.phase == "sft" else _mtp(args)
    print(f"model files: {folder}")
    return 0


def _bundle(args: argparse.Namespace) -> int:
    import torch

    from jina_ocr.models import BUNDLED
    from jina_ocr.train.bundle import GATE_PAGES, NotBetterError, bundle

    if args.threads:
        torch.set_num_threads(args.threads)
    if not (args.model / "config.json").exists():
        raise UserError(f"{args.model}: no config.json there; give the model/ folder of an sft or mtp run")
    pages = GATE_PAGES if args.pages is None else args.pages
    _check_positive(pages, "--pages")
    into = args.into or BUNDLED
    try:
        result = bundle(args.model, into, args.card, pages)
    except NotBetterError as refusal:
        print(f"jina-ocr train: {refusal}", file=sys.stderr)
        return 1
    print(f"bundled {args.model} into {into}: {result}")
    return 0


def _sft(args: argparse.Namespace) -> Path:
    from jina_ocr.train.drills import BODY_FONTS, STAGES
    from jina_ocr.train.recipe import PageRecipe
    from jina_ocr.train.sft import SFTOptions, train_sft

    if args.drill_fonts is not None:
        unknown = sorted(set(args.drill_fonts) - set(BODY_FONTS))
        if unknown:
            raise UserError(
                f"--drill-fonts: unknown {', '.join(unknown)}; choose from {', '.join(BODY_FONTS)}"
            )
        args.drill_fonts = tuple(args.drill_fonts)

    if args.stage is not None and args.stage not in STAGES:
        raise UserError(f"--stage: unknown {args.stage}; choose from {', '.join(STAGES)}")
    if args.advance_cer is not None:
        if len(args.advance_cer) != len(STAGES) - 1:
            raise UserError(
                f"--advance-cer takes {len(STAGES) - 1} values, one per stage before the last "
                f"({', '.join(STAGES[:-1])})"
            )
        args.advance_cer = tuple(args.advance_cer)
    for flag, share in (
        ("--letter-words", args.letter_words),
        ("--row-phase", args.row_phase),
        ("--repeat-words", args.repeat_words),
        ("--near-copies", args.near_copies),
    ):
        _check_share(share, flag)
    args.align_layers = tuple(args.align_layers)
    names = {
        name
        for name in SFTOptions.__dataclass_fields__
        if name != "recipe" and getattr(args, name, None) is not None
    }
    recipe = PageRecipe(
        **{
            name: value
            for name in (
                "drill_fonts",
                "dense_fraction",
                "advance_cer",
                "letter_words",
                "row_phase",
                "repeat_words",
                "near_copies",
            )
            if (value := getattr(args, name)) is not None
        }
    )
    options = SFTOptions(**{name: getattr(args, name) for name in names}, recipe=recipe)
    _check_positive(options.steps, "--steps")
    _check_positive(options.batch_size, "--batch-size")
    if options.decay_steps is not None:
        _check_positive(options.decay_steps, "--decay-steps")
    for flag, folder in (("--init", options.init), ("--resume-from", options.resume_from)):
        if folder is not None and not (folder / "config.json").exists():
            raise UserError(f"{flag} {folder}: no config.json there; give the model/ folder of a run")
    return train_sft(options)


def _mtp(args: argparse.Namespace) -> Path:
    from jina_ocr.train.mtp import MTPOptions, train_mtp

    names = set(MTPOptions.__dataclass_fields__)
    options = MTPOptions(**{name: getattr(args, name) for name in names})
    _check_positive(options.pages, "--pages")
    _check_share(options.letter_words, "--letter-words")
    if options.held_out >= options.pages:
        raise UserError(
            f"--held-out {options.held_out} leaves no training pages out of --pages {options.pages}"
        )
    if not (options.model / "config.json").exists():
        raise UserError(f"{options.model}: no config.json there; give the model/ folder of an sft run")
    if options.head_from is not None and not (options.head_from / "config.json").exists():
        raise UserError(
            f"--head-from {options.head_from}: no config.json there; give a folder of model files"
        )
    return train_mtp(options)


def _check_share(share: float | None, flag: str) -> None:
    if share is not None and not 0 <= share <= 1:
        raise UserError(f"{flag} {share}: give a share from 0 to 1")


def _check_positive(value: int, flag: str) -> None:
    if value < 1:
        raise UserError(f"{flag} must be at least 1, got {value}")
