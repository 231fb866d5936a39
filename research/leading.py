"""Diagnostic: how well model files read the target format as its body lines move apart.

    python research/leading.py [--model FILES] [--pages 8] [--lines 2 5 8] [--threads 2]

The target format sets 18-22 pt body lines 1.15-1.5 times their size apart, closer than the 37.2 pt
rows of visual tokens of the ``base`` mode, so most rows hold parts of two lines. These pages are the
target format's (held-out words, a heading, the same fonts, words and positions for every leading)
with the distance between body lines fixed: 1.15, 1.3 and 1.5 times the type size, and one row of
visual tokens, where each line has a row of its own. A model that reads the last column far better
than the first is held back by rows that hold two lines, not by the number of lines on a page.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from jina_ocr.model_files import load_model_files
from jina_ocr.models import BUNDLED
from jina_ocr.train.evaluate import character_error_rate, transcribe
from jina_ocr.train.recipe import PageRecipe

FACTORS = (1.15, 1.3, 1.5)


def leading_table(files: Path, pages: int, line_counts: list[int]) -> list[tuple[str, list[float]]]:
    """(leading label, CER per line count) rows, the last row at one row of visual tokens per line."""
    model, processor = load_model_files(files)
    recipe = PageRecipe()
    row = recipe.row_height()
    # The same pages (words, font, size, positions) at every leading: only the pitch of their lines changes.
    natural = {
        lines: [recipe.drill("page", f"leading/{i}", held_out=True, lines=lines) for i in range(pages)]
        for lines in line_counts
    }
    rows = []
    for label, factor in [*((f"{f} x size", f) for f in FACTORS), (f"{row:.1f} pt (a row)", None)]:
        cers = []
        for lines, originals in natural.items():
            drills = [
                recipe.drill(
                    "page",
                    f"leading/{i}",
                    held_out=True,
                    lines=lines,
                    leading=row if factor is None else factor * page.size,
                )
                for i, page in enumerate(originals)
            ]
            outputs = transcribe(model, processor, [d.image for d in drills], max_new_tokens=400)
            cers.append(character_error_rate(outputs, [d.markdown for d in drills]))
        rows.append((label, cers))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=BUNDLED, help="model files (the bundled model)")
    parser.add_argument("--pages", type=int, default=8, help="held-out pages per cell of the table")
    parser.add_argument("--lines", type=int, nargs="+", default=[2, 5, 8], help="body line counts")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = leading_table(args.model, args.pages, args.lines)
    print(f"CER of {args.model.name} on {args.pages} held-out target-format pages per cell")
    print(f"{'leading':22s}" + "".join(f"{f'{n} lines':>10s}" for n in args.lines))
    for label, cers in rows:
        print(f"{label:22s}" + "".join(f"{cer:10.3f}" for cer in cers))


if __name__ == "__main__":
    main()
