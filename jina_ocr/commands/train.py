"""``jina-ocr train``: train a small jina-ocr model on JinaOCRSynth pages (``sft``), then its FastMTP head (``mtp``);
post-train it with GRPO on the page reward (``grpo``)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from jina_ocr.errors import UserError

NAME = "train"
HELP = (
    "Train a small model on synthetic pages (sft), then its FastMTP head by self-distillation (mtp); "
    "post-train it with GRPO on the page reward (grpo)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    phases = parser.add_subparsers(dest="phase", required=True, metavar="{sft,mtp,grpo,bundle}")
    sft = phases.add_parser(
        "sft",
        help="supervised training of the whole model (teacher forcing plus dense glyph supervision)",
        description="Train the whole model on drill and synth pages with the settings of a recipe file "
        "(TOML; docs/training.md lists its keys), which the flags below override; run again with the same "
        "OUT to resume.",
    )
    sft.add_argument(
        "out", type=Path, help="run folder: model/, checkpoint.pt, log.jsonl (resumes if present)"
    )
    sft.add_argument(
        "--recipe",
        metavar="FILE",
        help="the run's settings: a TOML file, or the name of a bundled recipe (jina-ocr-tiny: the "
        "bundled model's); keys it leaves out keep their defaults (default: every setting's default)",
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
    sft.add_argument("--steps", type=int, help="optimizer steps; the schedule ends there (8000)")
    sft.add_argument("--batch-size", type=int, help="pages per step (8)")
    sft.add_argument("--lr", type=float, help="peak learning rate of AdamW (1e-3)")
    sft.add_argument("--seed", type=int, help="seed of the training pages, tokenizer and init (0)")
    sft.add_argument("--eval-every", type=int, help="steps between held-out evaluations; 0: at the end (250)")
    sft.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        help="bfloat16 autocast (CUDA with bf16, or CPU); --no-bf16 turns off a recipe's (off)",
    )
    sft.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    sft.add_argument("--threads", type=int, help="torch CPU threads of each training process")
    sft.add_argument(
        "--processes",
        type=int,
        help="data-parallel CPU training processes, each with its share of every batch (1); on two "
        "cores, --processes 2 --threads 1 trains faster than one process with two threads",
    )

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
    _add_grpo_arguments(phases)
    _add_bundle_arguments(phases)


def _add_grpo_arguments(phases) -> None:
    grpo = phases.add_parser(
        "grpo",
        help="GRPO post-training on TRL with the deterministic page reward (needs trl)",
        description="Sample several transcriptions of each page, score them against the page's reference with "
        "jina_ocr.rewards, and take GRPO steps on TRL's GRPOTrainer; run again with the same OUT to resume.",
    )
    grpo.add_argument("model", type=Path, help="model files to start from (and the KL reference with --beta)")
    grpo.add_argument(
        "out", type=Path, help="run folder: checkpoints/, model/, log.jsonl (resumes if present)"
    )
    grpo.add_argument(
        "--resume-from",
        type=Path,
        help="continue the grpo run these model files record (step, weights) with a fresh optimizer, when OUT "
        "has no checkpoint",
    )
    grpo.add_argument("--steps", type=int, default=200, help="GRPO steps; the run ends there (200)")
    grpo.add_argument("--pages", type=int, default=4, help="pages per step (4)")
    grpo.add_argument("--generations", type=int, default=8, help="sampled transcriptions per page (8)")
    grpo.add_argument("--lr", type=float, default=1e-5, help="constant learning rate of AdamW (1e-5)")
    grpo.add_argument("--beta", type=float, default=0.0, help="weight of the KL term to MODEL (0: none)")
    grpo.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (1.0)")
    grpo.add_argument("--seed", type=int, default=4, help="seed of the training pages and the sampling (4)")
    grpo.add_argument(
        "--repeat-words", type=float, default=0.2, help="share of drill words repeating the one before (0.2)"
    )
    grpo.add_argument(
        "--max-new-tokens", type=int, default=384, help="tokens per sample and evaluation (384)"
    )
    grpo.add_argument(
        "--eval-every", type=int, default=25, help="steps between evaluations; 0: at the end (25)"
    )
    grpo.add_argument("--eval-pages", type=int, default=16, help="held-out pages of each evaluation set (16)")
    grpo.add_argument("--eval-seed", type=int, default=1, help="seed of the held-out pages (1)")
    grpo.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints (25)")
    grpo.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    grpo.add_argument("--threads", type=int, help="torch CPU threads")


def _add_bundle_arguments(phases) -> None:
    bundle = phases.add_parser(
        "bundle",
        help="make trained model files the bundled jina-ocr-tiny, if they read better than the bundled ones",
        description="Copy model files into the package's bundled model (weights in bf16) with a model card, "
        "when their held-out CER is at least one point lower than the bundled model's on the same pages, "
        "clean and degraded, and no more than 0.002 higher on the clean ones.",
    )
    bundle.add_argument("model", type=Path, help="model files of a run (its model/ folder)")
    bundle.add_argument(
        "--card", type=Path, required=True, help="the model card (Markdown) to ship with them"
    )
    bundle.add_argument("--into", type=Path, help="bundle folder (default: the package's jina-ocr-tiny)")
    bundle.add_argument(
        "--pages",
        type=int,
        help="held-out pages of the comparison, each read clean and degraded "
        "(200, a seed no training evaluation reads)",
    )
    bundle.add_argument("--threads", type=int, help="torch CPU threads")


def run(args: argparse.Namespace) -> int:
    if args.phase == "bundle":
        return _bundle(args)
    folder = {"sft": _sft, "mtp": _mtp, "grpo": _grpo}[args.phase](args)
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


SFT_FLAGS = ("steps", "batch_size", "lr", "seed", "eval_every", "bf16", "device", "threads", "processes")
"""The recipe keys that ``train sft`` also takes as flags: what a run changes from one machine or one
segment to the next."""


def _sft(args: argparse.Namespace) -> Path:
    from jina_ocr.train.recipe_file import checked, find_recipe, read_recipe, sft_options
    from jina_ocr.train.sft import train_sft

    settings = read_recipe(find_recipe(args.recipe)) if args.recipe else {}
    settings.update(
        {key: checked(key, value) for key in SFT_FLAGS if (value := getattr(args, key)) is not None}
    )
    options = sft_options(args.out, settings, init=args.init, resume_from=args.resume_from)
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
    if not math.isfinite(options.lr):
        raise UserError(f"--lr {options.lr}: give a finite number")
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


def _grpo(args: argparse.Namespace) -> Path:
    from jina_ocr.train.grpo import GRPOOptions, train_grpo

    names = set(GRPOOptions.__dataclass_fields__)
    return train_grpo(GRPOOptions(**{name: getattr(args, name) for name in names}))


def _check_share(share: float | None, flag: str) -> None:
    if share is not None and not 0 <= share <= 1:
        raise UserError(f"{flag} {share}: give a share from 0 to 1")


def _check_positive(value: int, flag: str) -> None:
    if value < 1:
        raise UserError(f"{flag} must be at least 1, got {value}")
