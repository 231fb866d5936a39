"""Diagnostic: where the vision towers misread glyphs, for one or more training runs side by side.

    python research/glyph_slots.py RUN [RUN ...] [--stage rows] [--pages 48] [--shifts 0 3 6 37.2]

Each ``RUN`` is a ``jina-ocr train sft`` folder: its checkpoint holds the weights and the training-only
glyph head that reads, from each visual token, the glyphs of its cell (``GLYPH_LINES`` lines of
``GLYPH_SLOTS`` slots, in reading order). On the same held-out pages of a curriculum stage it prints
the head's accuracy per slot of the first line of a cell, per body font, and the commonest confusions.
Slot accuracy that falls with the slot's index says the towers find the first glyphs of a cell but
lose track of later ones; confusions between similar shapes (i/l, n/r) say they see glyphs too coarsely.

Beside the head, the same figures for the decoder, teacher-forced: whether it predicts each printed
character of the target from the true text before it, by the slot of that character's glyph in its cell.
A decoder well below the head reads less from the visual tokens than they hold.

A second table splits both readers by whether a cell holds one text line or parts of two: in the target
format (``--stage page``, natural leading) most rows of visual tokens hold two lines, and a token must
then keep both lines' glyphs apart.

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

from jina_ocr.model_files import load_model_files
from jina_ocr.synth.page import render
from jina_ocr.train.drills import BODY_FONTS, STAGES
from jina_ocr.train.glyphs import GLYPH_SLOTS
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


def decoder_hits(model, batch: dict, autocast) -> tuple[torch.Tensor, torch.Tensor]:
    """(hit, slot) per target token: whether the decoder, fed the true text before it, predicts it,
    and the slot of its glyph in its cell (how many earlier target tokens share that cell, which is the
    glyph's slot on pages with one line per row of cells); the slot is -1 for tokens without a cell."""
    inputs = {k: v for k, v in batch.items() if k not in ("token_cells", "cell_glyphs", "labels")}
    with torch.no_grad(), autocast:
        logits = model(**inputs).logits
    cells = batch["token_cells"]
    start = batch["input_ids"].shape[1] - cells.shape[1]  # the first target position
    hits = logits[:, start - 1 : -1].argmax(-1) == batch["input_ids"][:, start:]
    slots = torch.full_like(cells, EMPTY)
    for row, row_cells in enumerate(cells.tolist()):
        seen = Counter()
        for position, cell in enumerate(row_cells):
            if cell >= 0:
                slots[row, position] = seen[cell]
                seen[cell] += 1
    return hits, slots


def glyph_predictions(run: Path, recipe: PageRecipe, stage: int, pages: int, shifts: list[float], autocast):
    """(progress, tokenizer, held-out pages, and per shift the predicted and the true slots, the
    decoder's hits and slots (:func:`decoder_hits`) and each target token's cell) of ``run``'s
    checkpoint; an empty slot is -1."""
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
        predicted = predicted.masked_fill(predicted == head.empty, EMPTY)
        hits, decoded_slots = decoder_hits(model, batch, autocast)
        slots.append((predicted, batch["cell_glyphs"], hits, decoded_slots, batch["token_cells"]))
    return state["progress"], processor.tokenizer, held_out, slots


def rate(right: torch.Tensor, filled: torch.Tensor) -> str:
    count = int(filled.sum())
    return f"{int(right.sum()) / count:.3f}" if count else "-"


def cells_by_lines(predicted, truth, hits, token_cells) -> dict[str, str]:
    """The glyph head's accuracy in cells of one text line and, in cells of two, on each of the two
    lines; the decoder's teacher-forced accuracy on characters whose glyph lies in a cell of one line
    or of two."""
    filled = truth >= 0
    right = (predicted == truth) & filled
    two = filled[:, :, 1, :].any(-1)  # (pages, cells): the cell holds glyphs of a second line
    upper, lower = filled.clone(), filled.clone()
    upper[:, :, 1], lower[:, :, 0] = False, False
    sets = {
        "one-line cells": filled & ~two[:, :, None, None],
        "two-line cells, upper line": upper & two[:, :, None, None],
        "two-line cells, lower line": lower & two[:, :, None, None],
    }
    in_cell = token_cells >= 0
    in_two = two.gather(1, token_cells.clamp(min=0)) & in_cell
    return {
        **{f"head, {name}": rate(right & mask, mask) for name, mask in sets.items()},
        "decoder, one-line cells": rate(hits & in_cell & ~in_two, in_cell & ~in_two),
        "decoder, two-line cells": rate(hits & in_two, in_two),
    }


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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)

    slots = [f"slot {s}" for s in range(GLYPH_SLOTS)]
    print(f"held-out {args.stage} pages: {args.pages}; glyph slot accuracy of the first line of each cell")
    print("| run | step | shift (pt) | reader | all | " + " | ".join(slots + list(BODY_FONTS)) + " |")
    print("|---|---|---|---|---|" + "---|" * (len(slots) + len(BODY_FONTS)))
    confusions, sharing = {}, {}
    for run in args.runs:
        progress, tokenizer, pages, per_shift = glyph_predictions(
            run,
            PageRecipe(),
            STAGES.index(args.stage),
            args.pages,
            args.shifts,
            autocast,
        )
        fonts = [[i for i, page in enumerate(pages) if page.font == font] for font in BODY_FONTS]
        for points, (predicted, truth, hits, decoded_slots, _) in zip(args.shifts, per_shift, strict=True):
            filled = truth >= 0
            right = (predicted == truth) & filled
            readers = {
                "glyph head": (
                    right,
                    filled,
                    [rate(right[:, :, 0, s], filled[:, :, 0, s]) for s in range(GLYPH_SLOTS)],
                ),
                "decoder": (
                    hits & (decoded_slots >= 0),
                    decoded_slots >= 0,
                    [rate(hits & (decoded_slots == s), decoded_slots == s) for s in range(GLYPH_SLOTS)],
                ),
            }
            for reader, (hit, counted, per_slot) in readers.items():
                per_font = [rate(hit[rows], counted[rows]) if rows else "-" for rows in fonts]
                print(
                    f"| {run.name} | {progress['step']} | {points:g} | {reader} | {rate(hit, counted)} | "
                    + " | ".join(per_slot + per_font)
                    + " |"
                )
        predicted, truth, hits, _, token_cells = per_shift[0]
        sharing[run.name] = (progress["step"], cells_by_lines(predicted, truth, hits, token_cells))
        wrong = (truth >= 0) & (predicted != truth)
        confusions[run.name] = Counter(
            (tokenizer.decode([t]), "(none)" if p == EMPTY else tokenizer.decode([p]))
            for t, p in zip(truth[wrong].tolist(), predicted[wrong].tolist(), strict=True)
        )
    print(f"\naccuracy by how many text lines a cell holds (shift {args.shifts[0]:g} pt)")
    columns = list(next(iter(sharing.values()))[1])
    print("| run | step | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for name, (step, figures) in sharing.items():
        print(f"| {name} | {step} | " + " | ".join(figures.values()) + " |")
    for name, counter in confusions.items():
        common = ", ".join(f"{t!r}->{p!r} {n}" for (t, p), n in counter.most_common(12))
        print(
            f"{name}: commonest confusions at a shift of {args.shifts[0]:g} pt (truth->read count): {common}"
        )


if __name__ == "__main__":
    main()
