"""Diagnostic: where the vision towers misread glyphs, for one or more training runs side by side.

    python benchmarks/glyph_slots.py RUN [RUN ...] [--stage rows] [--pages 48] [--threads 2]

Each ``RUN`` is a ``jina-ocr train sft`` folder: its checkpoint holds the weights and the training-only
glyph head that reads, from each visual token, the glyphs of its cell (``GLYPH_LINES`` lines of
``GLYPH_SLOTS`` slots, in reading order). On the same held-out pages of a curriculum stage it prints
the head's accuracy per slot of the first line of a cell, per body font, and the commonest confusions.
Slot accuracy that falls with the slot's index says the towers find the first glyphs of a cell but
lose track of later ones; confusions between similar shapes (i/l, n/r) say they see glyphs too coarsely.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import torch

from jina_ocr.train.drills import BODY_FONTS, STAGES
from jina_ocr.train.glyphs import GLYPH_SLOTS
from jina_ocr.train.model_files import load_model_files
from jina_ocr.train.sft import CHECKPOINT, SFTOptions, held_out_batch
from jina_ocr.train.supervision import GlyphHead

EMPTY = -1  # how glyph targets mark an empty slot


def glyph_predictions(run: Path, stage: int, pages: int, autocast) -> tuple:
    """(progress, predicted slots, true slots, held-out pages, tokenizer) of ``run``'s checkpoint; an
    empty slot is -1 in both."""
    model, processor = load_model_files(run / "model", weights=False)
    state = torch.load(run / CHECKPOINT, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    model.eval()
    head = GlyphHead(model.config.hidden_size, model.config.vocab_size)
    head.load_state_dict(state["glyph_head"])
    held_out, batch = held_out_batch(processor, SFTOptions(out=run, eval_pages=pages), stage)
    with torch.no_grad(), autocast:
        logits = head(model.model.encode_views(batch["pixel_values"]))
    predicted = logits.argmax(-1)
    predicted = predicted.masked_fill(predicted == head.empty, EMPTY)
    return state["progress"], predicted, batch["cell_glyphs"], held_out, processor.tokenizer


def rate(right: torch.Tensor, filled: torch.Tensor) -> str:
    count = int(filled.sum())
    return f"{int(right.sum()) / count:.3f}" if count else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders with a checkpoint")
    parser.add_argument("--stage", choices=STAGES, default="rows")
    parser.add_argument("--pages", type=int, default=48, help="held-out pages (eval seed 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16, as train sft --bf16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)

    slots = [f"slot {s}" for s in range(GLYPH_SLOTS)]
    print(f"held-out {args.stage} pages: {args.pages}; glyph slot accuracy of the first line of each cell")
    print("| run | step | all | " + " | ".join(slots + list(BODY_FONTS)) + " |")
    print("|---|---|---|" + "---|" * (len(slots) + len(BODY_FONTS)))
    confusions = {}
    for run in args.runs:
        progress, predicted, truth, pages, tokenizer = glyph_predictions(
            run, STAGES.index(args.stage), args.pages, autocast
        )
        filled = truth >= 0
        right = (predicted == truth) & filled
        per_slot = [rate(right[:, :, 0, s], filled[:, :, 0, s]) for s in range(GLYPH_SLOTS)]
        per_font = []
        for font in BODY_FONTS:
            rows = [i for i, page in enumerate(pages) if page.font == font]
            per_font.append(rate(right[rows], filled[rows]) if rows else "-")
        print(
            f"| {run.name} | {progress['step']} | {rate(right, filled)} | "
            + " | ".join(per_slot + per_font)
            + " |"
        )
        wrong = filled & ~right
        confusions[run.name] = Counter(
            (tokenizer.decode([t]), "(none)" if p == EMPTY else tokenizer.decode([p]))
            for t, p in zip(truth[wrong].tolist(), predicted[wrong].tolist(), strict=True)
        )
    for name, counter in confusions.items():
        common = ", ".join(f"{t!r}->{p!r} {n}" for (t, p), n in counter.most_common(12))
        print(f"{name}: commonest confusions (truth->read count): {common}")


if __name__ == "__main__":
    main()
