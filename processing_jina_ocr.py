"""Processor of jina-ocr-v1: page images and a prompt in, model inputs out; generated ids in, Markdown out.

:class:`JinaOCRImageProcessor` cuts a page as DeepSeek-OCR's DeepEncoder was trained, to the pixel (a
letter-boxed global view and, in "Gundam" mode, 640 px tiles following the aspect ratio: SPEC section 4).
:class:`JinaOCRProcessor` writes the prompt, expands each ``<image>`` marker into one placeholder per
visual vector, left-pads batches and turns generated ids into Markdown.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import BatchFeature, PreTrainedTokenizerFast, ProcessorMixin
from transformers.image_processing_backends import PilBackend
from transformers.processing_utils import ImagesKwargs

from .configuration_jina_ocr import DEFAULTS, pixels_per_visual_token
from .pages_jina_ocr import DEFAULT_MAX_PIXELS, load_page

TILE_SIZE = 640
MIN_TILES, MAX_TILES = 2, 9
# jina-ocr-v1's value; the image processor's ``pixels_per_token`` follows the model's config (exported).
PIXELS_PER_TOKEN = pixels_per_visual_token(DEFAULTS["sam_patch_size"], DEFAULTS["sam_downsample_channels"])
LETTERBOX_GREY = (127, 127, 127)  # int(0.5 * 255): the mean colour, which normalises to about 0

# name -> (global view size, whether pages larger than one tile are also cut into 640 px tiles)
MODES: dict[str, tuple[int, bool]] = dict(
    tiny=(512, False), small=(640, False), base=(1024, False), large=(1280, False), gundam=(1024, True)
)
_OWN_LIMIT = object()  # "use the image processor's max_image_pixels"
# Global views up to this size are stretched to a square; larger ones are letter-boxed.
_MAX_STRETCHED_VIEW = 640

_SIDES = range(1, MAX_TILES + 1)
TILE_GRIDS = sorted(
    ((i, j) for i in _SIDES for j in _SIDES if MIN_TILES <= i * j <= MAX_TILES), key=math.prod
)


def select_tile_grid(width: int, height: int) -> tuple[int, int] | None:
    """The (columns, rows) of 640 px tiles DeepSeek-OCR cuts a ``width`` x ``height`` page into, or None
    for a page within one tile: the first grid closest in aspect ratio, on an exact tie a larger grid
    only when the page has more than half of its pixels."""
    if width <= TILE_SIZE and height <= TILE_SIZE:
        return None
    aspect = width / height
    best, best_diff = None, math.inf
    for i, j in TILE_GRIDS:
        diff = abs(aspect - i / j)
        if diff < best_diff:
            best, best_diff = (i, j), diff
        elif diff == best_diff and width * height > 0.5 * TILE_SIZE * TILE_SIZE * i * j:
            best = (i, j)
    return best


def count_image_tokens(
    view_size: int, grid: tuple[int, int] | None, pixels_per_token: int = PIXELS_PER_TOKEN
) -> int:
    """Placeholders one image takes: the global view's n x n features with a newline after each row and
    one view separator, plus, with tiles, the (10 j) x (10 i) tile features with a newline per row
    (n = view_size / pixels_per_token, 10 = 640 px / pixels_per_token)."""
    n = view_size // pixels_per_token
    count = n * (n + 1) + 1
    if grid is not None:
        i, j = grid
        t = TILE_SIZE // pixels_per_token
        count += t * j * (t * i + 1)
    return count


def _mode_settings(mode: str) -> tuple[int, bool]:
    try:
        return MODES[mode.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}") from None


class JinaOCRImagesKwargs(ImagesKwargs, total=False):
    """``mode`` (a key of :data:`MODES`), ``max_image_pixels`` (refuse larger images before decoding
    them; None: no limit) and ``pixels_per_token`` (the config's ``pixels_per_visual_token``)."""

    mode: str | None
    max_image_pixels: int | None
    pixels_per_token: int | None


class JinaOCRImageProcessor(PilBackend):
    """DeepSeek-OCR's dynamic-resolution preprocessing: ``pixel_values`` (n_images, 3, S, S) global views,
    ``pixel_values_local`` (n_tiles, 3, 640, 640; row-major per image) and ``image_grids`` (n_images, 2;
    (columns, rows) or (0, 0)). Each view is resized once with PIL bicubic and normalised in place with
    exactly torchvision's ``ToTensor`` + ``Normalize`` arithmetic."""

    valid_kwargs = JinaOCRImagesKwargs
    model_input_names = ["pixel_values", "pixel_values_local", "image_grids"]

    mode = "gundam"
    max_image_pixels = DEFAULT_MAX_PIXELS
    pixels_per_token = PIXELS_PER_TOKEN
    image_mean = (0.5, 0.5, 0.5)
    image_std = (0.5, 0.5, 0.5)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _mode_settings(self.mode)
        sizes = sorted({TILE_SIZE, *(size for size, _ in MODES.values())})
        if any(size % self.pixels_per_token for size in sizes):
            raise ValueError(
                f"pixels_per_token={self.pixels_per_token} does not divide the view sizes {sizes} of the "
                "tiling rule; the model's config gives it (sam_patch_size x 4)"
            )

    def grid_for(self, width: int, height: int, mode: str | None = None) -> tuple[int, int] | None:
        """The tile grid of a ``width`` x ``height`` image in ``mode`` (None: no tiles)."""
        _, tiled = _mode_settings(mode or self.mode)
        return select_tile_grid(width, height) if tiled else None

    def num_image_tokens(self, width: int, height: int, mode: str | None = None) -> int:
        """How many ``<image>`` placeholders a ``width`` x ``height`` image takes in ``mode``."""
        view_size, _ = _mode_settings(mode or self.mode)
        return count_image_tokens(view_size, self.grid_for(width, height, mode), self.pixels_per_token)

    def load_image(self, image: Any, max_image_pixels: int | None | object = _OWN_LIMIT) -> Image.Image:
        """``image`` (PIL image, path, bytes, array or tensor) as an upright RGB page, by the loader of
        every way into the model (``pages_jina_ocr.load_page``); ``ValueError`` for an empty, unreadable
        or URL image, or one above ``max_image_pixels`` (default: the processor's)."""
        limit = self.max_image_pixels if max_image_pixels is _OWN_LIMIT else max_image_pixels
        return load_page(image, limit)

    def _preprocess_image_like_inputs(
        self,
        images: Any,
        *args,
        mode: str | None = None,
        max_image_pixels: int | None = None,
        image_mean: Sequence[float] | None = None,
        image_std: Sequence[float] | None = None,
        **kwargs,
    ) -> BatchFeature:
        """Replaces the generic per-image pipeline: each view is resized straight into its slice of the
        outputs, on a few threads (PIL releases the GIL while resampling), then normalised in place."""
        view_size, _ = _mode_settings(mode or self.mode)
        pages = [self.load_image(image, max_image_pixels) for image in _flatten_images(images)]
        if not pages:
            raise ValueError("no images were given")
        grids = [self.grid_for(*page.size, mode) for page in pages]
        n_tiles = sum(i * j for i, j in (grid for grid in grids if grid is not None))
        pixel_values = torch.empty(len(pages), 3, view_size, view_size, dtype=torch.float32)
        pixel_values_local = torch.empty(n_tiles, 3, TILE_SIZE, TILE_SIZE, dtype=torch.float32)
        image_grids = torch.zeros(len(pages), 2, dtype=torch.long)
        jobs, first_tile = [], 0
        for k, (page, grid) in enumerate(zip(pages, grids, strict=True)):
            jobs.append(partial(write_global_view, page, pixel_values[k].numpy()))
            if grid is not None:
                tiles = pixel_values_local[first_tile : first_tile + grid[0] * grid[1]]
                jobs.append(partial(write_tiles, page, grid, tiles.numpy()))
                first_tile += grid[0] * grid[1]
                image_grids[k] = torch.tensor(grid)
        with ThreadPoolExecutor(min(len(jobs), os.cpu_count() or 1)) as pool:
            list(pool.map(lambda job: job(), jobs))
        for views in (pixel_values, pixel_values_local):
            normalise_in_place(views.numpy(), image_mean or self.image_mean, image_std or self.image_std)
        return BatchFeature(
            dict(pixel_values=pixel_values, pixel_values_local=pixel_values_local, image_grids=image_grids)
        )


def global_view_placement(width: int, height: int, view_size: int) -> tuple[int, int, int, int]:
    """Where a page lands in its global view, ``(x, y, w, h)``: stretched up to 640 px, else with its aspect
    ratio kept and centred as PIL's ``ImageOps.pad`` does (training maps glyph boxes with it)."""
    if view_size <= _MAX_STRETCHED_VIEW or width == height:
        return 0, 0, view_size, view_size
    short = max(1, round(min(width, height) / max(width, height) * view_size))
    offset = round((view_size - short) * 0.5)
    return (0, offset, view_size, short) if width > height else (offset, 0, short, view_size)


def write_global_view(page: Image.Image, out: np.ndarray) -> None:
    """Write the global view of an RGB page (placed by :func:`global_view_placement`, bicubic, on grey)
    into ``out`` (3, S, S) as ``v / 255`` in float32."""
    view_size = out.shape[-1]
    x, y, w, h = global_view_placement(*page.size, view_size)
    resized = np.asarray(page.resize((w, h), Image.Resampling.BICUBIC))
    if (w, h) != (view_size, view_size):
        out[:] = np.asarray(LETTERBOX_GREY, dtype=np.float32)[:, None, None] / np.float32(255)
    _scale_into(resized.transpose(2, 0, 1), out[:, y : y + h, x : x + w])


def write_tiles(page: Image.Image, grid: tuple[int, int], out: np.ndarray) -> None:
    """Stretch the page to (640 i, 640 j) and write its i * j tiles, row-major, into ``out`` as ``v / 255``."""
    i, j = grid
    resized = np.asarray(page.resize((TILE_SIZE * i, TILE_SIZE * j), Image.Resampling.BICUBIC))
    tiles = resized.reshape(j, TILE_SIZE, i, TILE_SIZE, 3).transpose(0, 2, 4, 1, 3)
    _scale_into(tiles, out.reshape(j, i, 3, TILE_SIZE, TILE_SIZE))


def _scale_into(pixels: np.ndarray, out: np.ndarray) -> None:
    """``out = pixels / 255`` in float32 in one strided pass, cast then divided as ``ToTensor`` does."""
    np.divide(pixels, np.float32(255), out=out, dtype=np.float32, casting="unsafe")


def normalise_in_place(views: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> None:
    """``(x - mean) / std`` in place on float32 (..., 3, H, W) views, bit for bit as ``Normalize``."""
    np.subtract(views, np.asarray(mean, dtype=np.float32).reshape(3, 1, 1), out=views)
    np.divide(views, np.asarray(std, dtype=np.float32).reshape(3, 1, 1), out=views)


def _flatten_images(images: Any) -> list[Any]:
    if isinstance(images, (list, tuple)):
        return [image for item in images for image in _flatten_images(item)]
    return [images]


_SPAN = re.compile(r"<\|ref\|>(.*?)<\|/ref\|>\s*<\|det\|>(.*?)<\|/det\|>", re.DOTALL)
_BOX = re.compile(r"\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]")
# What is left of a span cut short by max_new_tokens or written without its box.
_STRAY = re.compile(
    r"<\|ref\|>.*?<\|/ref\|>|<\|det\|>.*?(?:<\|/det\|>|$)|<\|/?(?:ref|det|grounding)\|>", re.DOTALL
)
_CONTENT_TOKENS = ("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<td>", "</td>", "<tr>", "</tr>")
_LATEX_REWRITES = ((r"\coloneqq", ":="), (r"\eqqcolon", "=:"))


@dataclass(frozen=True)
class GroundedRegion:
    """One grounding span of the output: its label, its boxes on the model's 0-999 grid, and, for an
    ``image`` region, the Markdown link that replaced it in the text."""

    label: str
    boxes: tuple[tuple[int, int, int, int], ...]
    image_link: str | None = None

    def pixel_boxes(self, width: int, height: int) -> list[tuple[int, int, int, int]]:
        """The boxes in pixels of a ``width`` x ``height`` page (DeepSeek-OCR's ``int(v / 999 * size)``)."""
        return [
            (int(x1 / 999 * width), int(y1 / 999 * height), int(x2 / 999 * width), int(y2 / 999 * height))
            for x1, y1, x2, y2 in self.boxes
        ]


def grounding_to_markdown(text: str, image_link: str = "images/{index}.jpg", page: int = 0):
    """Turn DeepSeek-OCR grounding output into ``(markdown, regions)``: an ``image`` span becomes a link
    (``image_link`` formatted with ``page`` and ``index``), other spans are removed (their content follows),
    and ``\\coloneqq`` / ``\\eqqcolon`` become ``:=`` / ``=:`` as in DeepSeek-OCR's post-processing."""
    regions: list[GroundedRegion] = []

    def replace(match: re.Match) -> str:
        label = match.group(1).strip()
        boxes = tuple(tuple(int(v) for v in box) for box in _BOX.findall(match.group(2)))
        link = None
        if label == "image":
            link = image_link.format(page=page, index=sum(r.image_link is not None for r in regions))
        regions.append(GroundedRegion(label, boxes, link))
        return f"![]({link})\n" if link is not None else ""

    text = _STRAY.sub("", _SPAN.sub(replace, text))
    for latex, plain in _LATEX_REWRITES:
        text = text.replace(latex, plain)
    return text, regions


IMAGE_TOKEN = "<image>"
JINA_DEFAULT_PROMPT = "Transcribe the provided document image into a clean Markdown format, preserving the natural reading order."
DEEPSEEK_DEFAULT_PROMPT = "<|grounding|>Convert the document to markdown."
PROMPT_STYLES = ("jina", "deepseek")


def request_content(prompt: str) -> str:
    """``<image>`` then the instruction, or the instruction as written when it holds its one marker."""
    markers = prompt.count(IMAGE_TOKEN)
    if markers > 1:
        raise ValueError(
            f"the prompt holds {markers} {IMAGE_TOKEN} markers; a one-page prompt holds at most one"
        )
    return prompt if markers else f"{IMAGE_TOKEN}\n{prompt}"


def jina_request(prompt: str | None = None) -> str:
    """The full jina-ocr-v1 text of a one-page request (no BOS); vLLM builds its prompts here too."""
    content = request_content(JINA_DEFAULT_PROMPT if prompt is None else prompt)
    return f"<|User|>:\n{content}\n<|Assistant|>:\n"


# "<|User|>:\n<image>\n{prompt}\n<|Assistant|>:\n", no BOS; an image with no text gets the default prompt.
JINA_CHAT_TEMPLATE = (
    "{%- for message in messages -%}{%- if message['role'] == 'user' -%}{{- '<|User|>:\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] + '\\n' -}}{%- else -%}"
    "{%- set ns = namespace(has_text=false) -%}{%- for block in message['content'] -%}"
    "{%- if block['type'] == 'image' -%}{{- '<image>\\n' -}}"
    "{%- elif block['type'] == 'text' -%}{%- set ns.has_text = true -%}{{- block['text'] + '\\n' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if not ns.has_text -%}{{- '" + JINA_DEFAULT_PROMPT + "\\n' -}}{%- endif -%}{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}{{- '<|Assistant|>:\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for block in message['content'] if block['type'] == 'text' -%}{{- block['text'] -}}"
    "{%- endfor -%}{%- endif -%}{{- eos_token -}}{%- else -%}"
    "{{- raise_exception('jina-ocr-v1 conversations have user and assistant turns, not ' + message['role']) -}}"
    "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|Assistant|>:\\n' -}}{%- endif -%}"
)


class JinaOCRProcessor(ProcessorMixin):
    """Image processor + tokenizer of jina-ocr-v1; ``prompt_style`` is ``"jina"`` (the chat format) or
    ``"deepseek"`` (BOS + ``<image>\\n`` + instruction). Token ids are always read from the tokenizer."""

    def __init__(
        self, image_processor=None, tokenizer=None, chat_template=None, prompt_style="jina", **kwargs
    ):
        chat_template = JINA_CHAT_TEMPLATE if chat_template is None else chat_template
        super().__init__(image_processor, tokenizer, chat_template=chat_template, **kwargs)
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(
                f"unknown prompt_style {prompt_style!r}: choose one of {', '.join(PROMPT_STYLES)}"
            )
        self.prompt_style = prompt_style
        if not _round_trips(tokenizer):
            raise ValueError(
                f"the tokenizer ({type(tokenizer).__name__}) does not give text back as it was encoded "
                f"({_ROUND_TRIP_PROBE!r}); jina-ocr-v1's tokenizer is byte-level BPE: load its tokenizer.json "
                "with PreTrainedTokenizerFast.from_pretrained(folder)"
            )
        self.image_token = IMAGE_TOKEN
        self.image_token_id = _special_token_id(tokenizer, IMAGE_TOKEN)
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; jina-ocr-v1 needs <｜end▁of▁sentence｜>")
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        # Specials that survive decoding: grounding markers (parsed afterwards) and table tags (the real
        # tokenizer marks <td> and friends special, so skipping specials would strip every table).
        content_ids = {tokenizer.convert_tokens_to_ids(token) for token in _CONTENT_TOKENS}
        added_specials = {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
        self._dropped_ids = (added_specials | set(tokenizer.all_special_ids)) - content_ids

    @classmethod
    def _load_tokenizer_from_pretrained(
        cls, sub_processor_type, pretrained_model_name_or_path, subfolder="", **kwargs
    ):
        """The checkpoint's tokenizer.json as it is: DeepSeek-OCR's config names ``LlamaTokenizerFast``, which
        some releases (5.17) rebuild with a SentencePiece pre-tokenizer that drops the spaces and newlines of
        a byte-level vocabulary; if text does not round-trip, the files are loaded with the generic class."""
        tokenizer = super()._load_tokenizer_from_pretrained(
            sub_processor_type, pretrained_model_name_or_path, subfolder=subfolder, **kwargs
        )
        if _round_trips(tokenizer):
            return tokenizer
        return PreTrainedTokenizerFast.from_pretrained(
            pretrained_model_name_or_path, subfolder=subfolder, **kwargs
        )

    @property
    def model_input_names(self) -> list[str]:
        return ["input_ids", "attention_mask", *self.image_processor.model_input_names]

    def build_prompt(self, prompt: str | None = None) -> str:
        """The full text of a one-page request for the instruction ``prompt`` (None: the style's default)."""
        if self.prompt_style == "jina":
            return jina_request(prompt)
        content = request_content(DEEPSEEK_DEFAULT_PROMPT if prompt is None else prompt)
        return f"{self.tokenizer.bos_token}{content}"

    def __call__(
        self,
        images=None,
        text: str | list[str] | None = None,
        videos=None,
        audio=None,
        *,
        padding_side: str = "left",
        return_tensors: str | None = "pt",
        **kwargs,
    ) -> BatchFeature:
        """Model inputs for ``images`` and ``text`` (one string per sequence), each ``<image>`` marker taking
        the placeholders of the next image (``images`` flat or one list per text); without ``text`` each image
        gets :meth:`build_prompt`'s default. No BOS is added (the DeepSeek style writes its own)."""
        if videos is not None or audio is not None:
            raise ValueError("jina-ocr-v1 reads images only; videos and audio are not supported")
        if return_tensors not in (None, "pt"):
            raise ValueError(
                f"return_tensors={return_tensors!r}: this processor returns torch tensors ('pt')"
            )
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
        image_kwargs = _image_kwargs(kwargs)
        if text is None:
            if images is None:
                raise ValueError("give images, text, or both")
            images = _flatten_images(images)
            text = [self.build_prompt() for _ in images]
        texts = [text] if isinstance(text, str) else list(text)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError("`text` must be a string or a non-empty list of strings")
        per_text = self._images_per_text(images, texts)

        flat_images = [image for group in per_text for image in group]
        features: dict[str, torch.Tensor] = {}
        counts: list[int] = []
        if flat_images:
            features = dict(self.image_processor(flat_images, **image_kwargs))
            view_size = features["pixel_values"].shape[-1]
            counts = [
                count_image_tokens(view_size, (i, j) if i else None, self.image_processor.pixels_per_token)
                for i, j in features["image_grids"].tolist()
            ]

        sequences, next_image = [], 0
        for sample in texts:
            ids: list[int] = []
            for k, segment in enumerate(sample.split(IMAGE_TOKEN)):
                if k:
                    ids += [self.image_token_id] * counts[next_image]
                    next_image += 1
                ids += self.tokenizer.encode(segment, add_special_tokens=False) if segment else []
            sequences.append(ids)
        features.update(self._pad(sequences, padding_side))
        return BatchFeature(features)

    def _images_per_text(self, images, texts: list[str]) -> list[list[Any]]:
        """Assign images to texts by their ``<image>`` markers, and say clearly when they do not match."""
        markers = [t.count(IMAGE_TOKEN) for t in texts]
        if images is None:
            if any(markers):
                raise ValueError(
                    f"the text holds {sum(markers)} {IMAGE_TOKEN} markers but no image was given"
                )
            return [[] for _ in texts]
        nested = (
            isinstance(images, (list, tuple))
            and len(images) == len(texts)
            and all(isinstance(group, (list, tuple)) for group in images)
        )
        if nested:
            groups = [_flatten_images(group) for group in images]
        else:
            flat = _flatten_images(images)
            if len(flat) != sum(markers):
                raise ValueError(
                    f"{len(flat)} image(s) given but the text holds {sum(markers)} {IMAGE_TOKEN} marker(s) "
                    f"(per text: {markers}); write one {IMAGE_TOKEN} where each image goes"
                )
            starts = np.cumsum([0, *markers]).tolist()
            groups = [flat[starts[k] : starts[k + 1]] for k in range(len(texts))]
        for k, (group, count) in enumerate(zip(groups, markers, strict=True)):
            if len(group) != count:
                raise ValueError(
                    f"text {k} holds {count} {IMAGE_TOKEN} marker(s) but {len(group)} image(s) were given for it; "
                    f"write one {IMAGE_TOKEN} where each image goes"
                )
        return groups

    def _pad(self, sequences: list[list[int]], side: str) -> dict[str, torch.Tensor]:
        length = max(len(ids) for ids in sequences)
        input_ids = torch.full((len(sequences), length), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
        for row, ids in enumerate(sequences):
            cols = slice(length - len(ids), length) if side == "left" else slice(0, len(ids))
            input_ids[row, cols] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, cols] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def prepare_ocr_inputs(
        self, image_or_images, prompt: str | None = None, device=None, dtype=None, mode: str | None = None
    ) -> BatchFeature:
        """Inputs for ``model.generate``: one image gives a batch of one, a list one left-padded batch;
        ``dtype`` casts the pixel tensors (use the model's)."""
        images = list(image_or_images) if isinstance(image_or_images, (list, tuple)) else [image_or_images]
        if not images:
            raise ValueError("no images were given")
        text = self.build_prompt(prompt)
        inputs = self(images=images, text=[text] * len(images), **({} if mode is None else {"mode": mode}))
        if device is not None or dtype is not None:
            inputs = inputs.to(device=device, dtype=dtype)
        return inputs

    def decode_ocr(
        self,
        generated_ids,
        input_ids=None,
        *,
        return_regions: bool = False,
        image_link: str = "images/{index}.jpg",
    ):
        """Markdown of each page (``str`` for a batch of one, else a list) from ``model.generate``'s output,
        less the ``input_ids`` prefix (None: only new tokens given), cut at EOS, with table tags kept and
        grounding spans as Markdown; with ``return_regions``, ``(markdown, list[GroundedRegion])`` pairs."""
        rows = _as_rows(generated_ids)
        if input_ids is not None:
            prompts = _as_rows(input_ids)
            if len(prompts) != len(rows) or any(
                row[: len(p)] != p for row, p in zip(rows, prompts, strict=True)
            ):
                raise ValueError(
                    "generated_ids do not start with input_ids: pass generate's full output, or input_ids=None "
                    "when generated_ids hold only the new tokens"
                )
            rows = [row[len(p) :] for row, p in zip(rows, prompts, strict=True)]
        pages = []
        for page, row in enumerate(rows):
            text, regions = grounding_to_markdown(self._decode_row(row), image_link=image_link, page=page)
            text = re.sub(r"\n{3,}", "\n\n", text).strip()
            pages.append((text, regions) if return_regions else text)
        return pages[0] if len(pages) == 1 else pages

    def _decode_row(self, ids: list[int]) -> str:
        if self.tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(self.tokenizer.eos_token_id)]
        kept = [i for i in ids if i not in self._dropped_ids]
        return self.tokenizer.decode(kept, skip_special_tokens=False)

    def post_process_image_text_to_text(
        self, generated_outputs, skip_special_tokens=True, **kwargs
    ) -> list[str]:
        """What the ``image-text-to-text`` pipeline shows: the text of each row with table tags kept and
        grounding spans turned into Markdown (the pipeline itself removes the prompt)."""
        rows = _as_rows(generated_outputs)
        if skip_special_tokens:
            texts = [self._decode_row(row) for row in rows]
        else:
            texts = [self.tokenizer.decode(row, skip_special_tokens=False) for row in rows]
        return [grounding_to_markdown(text)[0] for text in texts]


_ROUND_TRIP_PROBE = "Page 1:\n  a  b\tc"


def _round_trips(tokenizer) -> bool:
    return (
        tokenizer.decode(tokenizer.encode(_ROUND_TRIP_PROBE, add_special_tokens=False)) == _ROUND_TRIP_PROBE
    )


def _special_token_id(tokenizer, token: str) -> int:
    if tokenizer is None:
        raise ValueError("JinaOCRProcessor needs a tokenizer")
    ids = {str(t): i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    if token not in ids:
        raise ValueError(
            f"the tokenizer has no special token {token}; jina-ocr-v1 needs it as an added special token"
        )
    return ids[token]


_IMAGE_KWARGS = {"mode", "max_image_pixels"}
# What the pipeline and apply_chat_template may pass, without effect: batches pad to the longest, no specials.
_NEUTRAL_KWARGS = {"padding", "add_special_tokens"}


def _image_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The image-processor options among ``kwargs``; anything not understood is an error, not ignored."""
    unknown = sorted(set(kwargs) - _IMAGE_KWARGS - _NEUTRAL_KWARGS)
    if unknown:
        raise TypeError(f"JinaOCRProcessor got unexpected keyword argument(s): {', '.join(unknown)}")
    return {key: value for key, value in kwargs.items() if key in _IMAGE_KWARGS}


def _as_rows(ids) -> list[list[int]]:
    if isinstance(ids, (torch.Tensor, np.ndarray)):
        ids = ids.tolist()
    return [list(ids)] if ids and isinstance(ids[0], int) else [list(row) for row in ids]
