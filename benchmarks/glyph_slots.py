"""Diagnostic: where the vision towers misread glyphs, for one or more training runs side by side.

    python benchmarks/glyph_slots.py RUN [RUN ...] [--stage rows] [--pages 48] [--shifts 0 3 6 37.2]

Each ``RUN`` is a ``jina-ocr train sft`` folder: its checkpoint holds the weights and the training-only
glyph head that reads, from each visual token, the glyphs of its cell (``GLYPH_LINES`` lines of
``GLYPH_SLOTS`` slots, in reading order). On the same held-out pages of a curriculum stage it prints
the head's accuracy per slot of the first line of a cell, per body font, and the commonest confusions.
Slot accuracy that falls with the slot's index says the towers find the first glyphs of a cell but
lose track of later ones; confusions between similar shapes (i/l, n/r) say they see glyphs too coarsely.

``--shifts`` reads the same pages moved down by so many points (their glyph targets moved with them).
Towers that read glyphs at any height keep their accuracy; towers that learnt templates of one height
in a row of visual tokens lose it a few points off and get it back a whole row (37.2 pt) down.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from pathlib import Path

import pymupdf
import torch

from jina_ocr.synth.page import render
from jina_ocr.train.drills import BODY_FONTS, STAGES
from jina_ocr.train.glyphs import GLYPH_SLOTS
from jina_ocr.train.model_files import load_model_files
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.sft import SFTOptions, page_batch, read_checkpoint
from jina_ocr.train.supervision import GlyphHead

EMPTY = -1  # how glyph targets mark an empty slot


def shifted(page, points: float, dpi: int):
    """``page`` (rendered at ``dpi``) with everything printed on it moved down by ``points`` (up when
    negative)."""
    if not points:
        return page
    with pymupdf.open(stream=page.pdf_bytes, filetype="pdf") as source, pymupdf.open() as doc:
        width, height = source[0].rect.width, source[0].rect.height
        doc.new_page(width=width, height=height).show_pdf_page(
            pymupdf.Rect(0, points, width, height + points), source, 0
        )
        pdf_bytes = doc.tobytes()
    return dataclasses.replace(page, pdf_bytes=pdf_bytes, image=render(pdf_bytes, dpi))


def glyph_predictions(run: Path, recipe: PageRecipe, stage: int, pages: int, shifts: list[float], autocast):
    """(progress, tokenizer, held-out pages, and per shift the predicted and the true slots) of
    ``run``'s checkpoint; an empty slot is -1 in both."""
    model, processor = load_model_files(run / "model", weights=False)
    state = read_checkpoint(run)
    model.load_state_dict(state["model"])
    model.eval()
    head = GlyphHead(model.config.hidden_size, model.config.vocab_size)
    head.load_state_dict(state["glyph_head"])
    options = SFTOptions(out=run, recipe=recipe)
    held_out = options.recipe.held_out_pages(stage, options.eval_seed, pages)
    slots = []
    for points in shifts:
        batch = page_batch(processor, options, [shifted(page, points, recipe.dpi) for page in held_out])
        with torch.no_grad(), autocast:
            predicted = head(model.model.encode_views(batch["pixel_values"])).argmax(-1)
        slots.append((predicted.masked_fill(predicted == head.empty, EMPTY), batch["cell_glyphs"]))
    return state["progress"], processor.tokenizer, held_out, slots


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
    parser.add_argument(
        "--shifts", type=float, nargs="+", default=[0.0], help="move the pages down by so many points (0)"
    )
    parser.add_argument(
        "--row-phase", type=float, default=1.0, help="the pages' recipe option (1; 0: earlier runs' pages)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)

    slots = [f"slot {s}" for s in range(GLYPH_SLOTS)]
    print(f"held-out {args.stage} pages: {args.pages}; glyph slot accuracy of the first line of each cell")
    print("| run | step | shift (pt) | all | " + " | ".join(slots + list(BODY_FONTS)) + " |")
    print("|---|---|---|---|" + "---|" * (len(slots) + len(BODY_FONTS)))
    confusions = {}
    for run in args.runs:
        progress, tokenizer, pages, per_shift = glyph_predictions(
            run,
            PageRecipe(row_phase=args.row_phase),
            STAGES.index(args.stage),
            args.pages,
            args.shifts,
            autocast,
        )
        for points, (predicted, truth) in zip(args.shifts, per_shift, strict=True):
            filled = truth >= 0
            right = (predicted == truth) & filled
            per_slot = [rate(right[:, :, 0, s], filled[:, :, 0, s]) for s in range(GLYPH_SLOTS)]
            per_font = []
            for font in BODY_FONTS:
                rows = [i for i, page in enumerate(pages) if page.font == font]
                per_font.append(rate(right[rows], filled[rows]) if rows else "-")
            print(
                f"| {run.name} | {progress['step']} | {points:g} | {rate(right, filled)} | "
                + " | ".join(per_slot + per_font)
                + " |"
            )
        predicted, truth = per_shift[0]
        wrong = (truth >= 0) & (predicted != truth)
        confusions[run.name] = Counter(
            (tokenizer.decode([t]), "(none)" if p == EMPTY else tokenizer.decode([p]))
            for t, p in zip(truth[wrong].tolist(), predicted[wrong].tolist(), strict=True)
        )
    for name, counter in confusions.items():
        common = ", ".join(f"{t!r}->{p!r} {n}" for (t, p), n in counter.most_common(12))
        print(
            f"{name}: commonest confusions at a shift of {args.shifts[0]:g} pt (truth->read count): {common}"
        )


if __name__ == "__main__":
    main()
