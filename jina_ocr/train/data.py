"""Training batches of drill and JinaOCRSynth pages, generated on the fly in DataLoader workers.

Page ``index`` of a run seed and curriculum stage is always the same page
(:meth:`~jina_ocr.train.recipe.PageRecipe.training_page` picks a drill or a synth page and its
parameters from the seed, the index and the stage), and the DataLoader hands pages over in index order
whatever the number of workers, so a resumed run sees exactly the pages an uninterrupted one would have.

Every page uses the same prompt and is an A5 page rendered at one dpi, so in a tiled mode too every
page has the same tile grid, and the prompt (chat template plus image placeholders) is one fixed id
sequence; a training row is that prompt followed by the page's ground-truth Markdown and EOS, with the
labels masked (-100) on the prompt and on padding. Each example also carries the page's glyph targets
(:mod:`jina_ocr.train.glyphs`) for the training-only losses.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from PIL import Image
from torch.utils.data import IterableDataset, get_worker_info

from jina_ocr.remote_code.processing_jina_ocr import TILE_SIZE
from jina_ocr.train.degrade import DegradedPage
from jina_ocr.train.glyphs import NO_CELL, ViewGrid, glyph_targets
from jina_ocr.train.recipe import PageRecipe

IGNORE_INDEX = -100


@dataclass
class Example:
    """One page: its global view (3, S, S) and its tiles (T, 3, 640, 640; T = 0 untiled), the grid of
    cells its glyph targets address, its target ids (Markdown + EOS), its Markdown, and per target id the
    visual index of its glyph's cell and per cell its glyphs' ids."""

    index: int
    pixel_values: torch.Tensor
    pixel_values_local: torch.Tensor
    grid: ViewGrid
    target_ids: list[int]
    markdown: str
    token_cells: list[int]
    cell_glyphs: torch.Tensor


def target_ids(tokenizer, markdown: str, max_tokens: int) -> list[int]:
    """Ground-truth ids: the Markdown then EOS, cut to ``max_tokens`` (a cut row has no EOS to learn)."""
    ids = tokenizer.encode(markdown.strip(), add_special_tokens=False) + [tokenizer.eos_token_id]
    return ids[:max_tokens]


def prompt_ids(processor, image_size: tuple[int, int], prompt: str | None = None) -> list[int]:
    """The ids of a one-page request for a page image of ``image_size`` px: template plus placeholders
    (their number depends on the page's tile grid in a tiled mode)."""
    blank = Image.new("RGB", image_size, "white")
    return processor(images=[blank], text=[processor.build_prompt(prompt)])["input_ids"][0].tolist()


class TrainingPageStream(IterableDataset):
    """Pages ``start, start + stride, start + 2 stride, ...`` of ``seed`` as :class:`Example` objects,
    without end (a ``stride`` above one gives each data-parallel training process its own pages).

    Worker ``w`` of ``n`` makes the ``w``-th of every ``n`` pages of the stream, which is the order in
    which the DataLoader interleaves the workers. A page the generator cannot lay out is skipped, the
    same one on every run.
    """

    def __init__(
        self,
        processor,
        seed: int,
        recipe: PageRecipe,
        start: int,
        max_target_tokens: int,
        stage: int = 0,
        stride: int = 1,
    ):
        self.image_processor = processor.image_processor
        self.tokenizer = processor.tokenizer
        self.seed = seed
        self.recipe = recipe
        self.start = start
        self.max_target_tokens = max_target_tokens
        self.stage = stage
        self.stride = stride

    def __iter__(self) -> Iterator[Example]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is not None:
            torch.set_num_threads(1)  # the main process owns the cores for the model
            # A SIGTERM or Ctrl-C sent to the whole process group is the main process's to handle: it
            # finishes its step and checkpoints (jina_ocr.train.sft), then shuts the workers down.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        index = self.start + worker * self.stride
        try:
            while True:
                page = self.page(index)
                if page is not None:
                    yield self.example(index, page)
                index += workers * self.stride
        except Exception:
            if info is not None:
                # The run ends on this error, and its exit ends the worker with a SIGTERM: ignored, the
                # exit would wait for this worker forever.
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            raise

    def page(self, index: int):
        return self.recipe.training_page(self.seed, index, self.stage)

    def example(self, index: int, page) -> Example:
        views = self.image_processor([page.image])
        grid = ViewGrid.of_page(self.image_processor, page.image.size)
        ids = target_ids(self.tokenizer, page.markdown, self.max_target_tokens)
        warp = page.warp if isinstance(page, DegradedPage) else None
        targets = glyph_targets(
            self.tokenizer, page.markdown.strip(), page.pdf_bytes, page.image.size, grid, warp
        )
        return Example(
            index,
            views["pixel_values"][0],
            views["pixel_values_local"],
            grid,
            ids,
            page.markdown,
            targets.token_cells[: len(ids)],
            targets.cell_glyphs,
        )


class Collator:
    """Rows of ``prompt + target``, right-padded; labels are the targets only (causal-LM convention).

    ``prompt`` holds the placeholders of pages of ``grid``; a page of another grid (another size in a
    tiled mode) is refused here rather than by the model's placeholder count.
    """

    def __init__(self, prompt: list[int], pad_token_id: int, grid: ViewGrid):
        self.prompt = prompt
        self.pad_token_id = pad_token_id
        self.grid = grid

    def __call__(self, examples: list[Example]) -> dict[str, torch.Tensor]:
        for example in examples:
            if example.grid != self.grid:
                raise ValueError(
                    f"page {example.index} has the cells of {example.grid}, the run's prompt those of "
                    f"{self.grid}: every training page of a run must have the same size"
                )
        length = len(self.prompt) + max(len(e.target_ids) for e in examples)
        input_ids = torch.full((len(examples), length), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(examples), length), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(examples), length), dtype=torch.long)
        token_cells = torch.full((len(examples), length - len(self.prompt)), NO_CELL, dtype=torch.long)
        for row, example in enumerate(examples):
            ids = self.prompt + example.target_ids
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, len(self.prompt) : len(ids)] = torch.tensor(example.target_ids)
            attention_mask[row, : len(ids)] = 1
            token_cells[row, : len(example.token_cells)] = torch.tensor(example.token_cells)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "pixel_values": torch.stack([e.pixel_values for e in examples]),
            "pixel_values_local": torch.cat([e.pixel_values_local for e in examples]),
            "image_grids": torch.tensor([self.grid.tiles or (0, 0)] * len(examples), dtype=torch.long),
            "indices": torch.tensor([e.index for e in examples]),
            "token_cells": token_cells,
            "cell_glyphs": torch.stack([e.cell_glyphs for e in examples]),
        }


def batch_grid(batch: dict[str, torch.Tensor]) -> ViewGrid:
    """The cells the glyph targets of a collated batch address (one grid for every page of a batch)."""
    cols, rows = batch["image_grids"][0].tolist()
    if cols * rows:
        return ViewGrid(TILE_SIZE, (cols, rows))
    return ViewGrid(batch["pixel_values"].shape[-1])
