"""Preprocessing speed: our image processor against a straightforward per-tile PIL baseline, in one run.

    python benchmarks/preprocess.py [--rounds 5] [--mode gundam]

The pages are the olmOCR fixture PDFs rendered by the page loader at its default dpi (as convert does),
rendered once before timing. Both methods turn each page into the same tensors (checked exactly before
timing): the global view and, in Gundam mode, the 640 px tiles, normalised to float32.

The baseline is what a direct transcription of the rule looks like without torchvision: PIL's
``ImageOps.pad`` for the global view, one stretched copy of the page cropped tile by tile, and every
view converted to float and normalised on its own. Ours resizes once per view, copies the uint8 pixels
straight into their place in the output tensor (all tiles with one strided copy, no crops) and
normalises the whole batch in place; the global view and the tiles are resized on two threads (PIL
releases the GIL while resampling). Times are the best of ``--rounds`` passes over all pages, one page
per call for both methods, the methods alternating within each round. A third row times only the
PIL resizes every exact implementation must do, the floor of both.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pymupdf
import torch
from PIL import Image, ImageOps

from jina_ocr.remote_code.processing_jina_ocr import MODES, TILE_SIZE, JinaOCRImageProcessor, select_tile_grid
from jina_ocr.runtime.pdf import DEFAULT_DPI, render_pdf_page

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "olmocr"


def render_pages(folder: Path) -> list[tuple[str, Image.Image]]:
    pages = []
    for pdf in sorted(folder.glob("*.pdf")):
        with pymupdf.open(pdf) as doc:
            for number, page in enumerate(doc):
                pages.append((f"{pdf.stem}:{number + 1}", render_pdf_page(page, DEFAULT_DPI)))
    return pages


def normalise(view: Image.Image) -> torch.Tensor:
    """One view to a normalised (3, H, W) float32 tensor, the ToTensor + Normalize arithmetic."""
    pixels = torch.from_numpy(np.asarray(view, dtype=np.uint8).copy()).permute(2, 0, 1).float().div(255)
    return (pixels - 0.5) / 0.5


def baseline(page: Image.Image, mode: str) -> dict[str, torch.Tensor]:
    size, tiled = MODES[mode]
    if size <= 640:
        global_view = page.resize((size, size), Image.Resampling.BICUBIC)
    else:
        global_view = ImageOps.pad(page, (size, size), method=Image.Resampling.BICUBIC, color=(127, 127, 127))
    grid = select_tile_grid(*page.size) if tiled else None
    tiles = []
    if grid is not None:
        i, j = grid
        stretched = page.resize((TILE_SIZE * i, TILE_SIZE * j), Image.Resampling.BICUBIC)
        for row in range(j):
            for col in range(i):
                box = (col * TILE_SIZE, row * TILE_SIZE, (col + 1) * TILE_SIZE, (row + 1) * TILE_SIZE)
                tiles.append(normalise(stretched.crop(box)))
    return {
        "pixel_values": normalise(global_view)[None],
        "pixel_values_local": torch.stack(tiles) if tiles else torch.empty(0, 3, TILE_SIZE, TILE_SIZE),
        "image_grids": torch.tensor([grid or (0, 0)]),
    }


def resizes_only(page: Image.Image, mode: str) -> None:
    """Only the PIL resizes a page needs (global view, stretched page for the tiles): the floor both
    methods share, since the output must be PIL's bicubic to the bit."""
    size, tiled = MODES[mode]
    width, height = page.size
    if size <= 640 or width == height:
        page.resize((size, size), Image.Resampling.BICUBIC)
    else:
        ImageOps.contain(page, (size, size), method=Image.Resampling.BICUBIC)
    grid = select_tile_grid(width, height) if tiled else None
    if grid is not None:
        page.resize((TILE_SIZE * grid[0], TILE_SIZE * grid[1]), Image.Resampling.BICUBIC)


def best_times(methods: dict, pages, rounds: int) -> dict[str, float]:
    """Best wall time of one pass over all pages, per method; the methods alternate within each round so
    that both see the same machine load."""
    best = dict.fromkeys(methods, float("inf"))
    for _ in range(rounds):
        for name, function in methods.items():
            start = time.perf_counter()
            for _, page in pages:
                function(page)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", default="gundam", choices=sorted(MODES))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    pages = render_pages(FIXTURES)
    processor = JinaOCRImageProcessor(mode=args.mode)
    for name, page in pages:
        ours, reference = processor(page), baseline(page, args.mode)
        for key in reference:
            if not torch.equal(ours[key], reference[key]):
                raise SystemExit(f"{name}: {key} differs between the two methods")

    methods = {
        "per-tile PIL baseline": lambda page: baseline(page, args.mode),
        "JinaOCRImageProcessor": processor,
        "PIL resizes alone (floor)": lambda page: resizes_only(page, args.mode),
    }
    timings = best_times(methods, pages, args.rounds)
    views = sum(1 + int(processor(page)["image_grids"][0].prod()) for _, page in pages)
    sizes = sorted({page.size for _, page in pages})
    print(
        f"{len(pages)} pages at {DEFAULT_DPI} dpi ({', '.join(f'{w}x{h}' for w, h in sizes)}), mode {args.mode}, "
        f"{views} views, best of {args.rounds}, torch threads {torch.get_num_threads()}; outputs identical"
    )
    print("| method | pages/s | ms/page | speed-up |")
    print("|---|---:|---:|---:|")
    slowest = timings["per-tile PIL baseline"]
    for method, seconds in timings.items():
        per_page = seconds / len(pages)
        print(f"| {method} | {1 / per_page:.1f} | {1000 * per_page:.1f} | {slowest / seconds:.2f}x |")


if __name__ == "__main__":
    main()
