"""Processor of jina-ocr-v1: page images and a prompt in, model inputs out; generated ids in, Markdown out.

Two classes, as Transformers expects of a vision-language model:

- :class:`JinaOCRImageProcessor` cuts a page into what DeepSeek-OCR's DeepEncoder was trained on: one
  global view letter-boxed into a square, and, in the tiled ("Gundam") mode, a grid of 640 px tiles
  whose shape follows the page's aspect ratio (SPEC section 4). The rule is reproduced to the pixel
  because the model never saw anything else.
- :class:`JinaOCRProcessor` writes the prompt (jina-ocr-v1 chat template or DeepSeek-OCR style),
  expands each ``<image>`` marker into exactly as many placeholder tokens as the model will place
  visual vectors, batches pages of different tile counts with left padding, and turns the generated
  ids back into clean Markdown (grounding spans become image links, boxes are kept aside).

This file ships to the Hub as remote code: it imports only Transformers, PIL, NumPy, torch and its
sibling remote-code modules (the config, the page loader and the batch driver of ``processor.ocr``).
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

# ----------------------------------------------------------------------------------------------------
# The tiling rule (SPEC section 4)
# ----------------------------------------------------------------------------------------------------

TILE_SIZE = 640
MIN_TILES, MAX_TILES = 2, 9
# jina-ocr-v1's value, from its config's defaults (SAM's patch size, then the compressor's two stride-2
# convolutions). The image processor's ``pixels_per_token`` follows the model's own config (the export
# writes it).
PIXELS_PER_TOKEN = pixels_per_visual_token(DEFAULTS["sam_patch_size"], DEFAULTS["sam_downsample_channels"])
LETTERBOX_GREY = (127, 127, 127)  # int(0.5 * 255): the mean colour, which normalises to about 0

# name -> (global view size, whether pages larger than one tile are also cut into 640 px tiles)
MODES: dict[str, tuple[int, bool]] = {
    "tiny": (512, False),
    "small": (640, False),
    "base": (1024, False),
    "large": (1280, False),
    "gundam": (1024, True),
}
_OWN_LIMIT = object()  # "use the image processor's max_image_pixels"
# Global views up to this size are stretched to a square; larger ones are letter-boxed.
_MAX_STRETCHED_VIEW = 640

_GRIDS = sorted(
    (
        (i, j)
        for i in range(1, MAX_TILES + 1)
        for j in range(1, MAX_TILES + 1)
        if MIN_TILES <= i * j <= MAX_TILES
    ),
    key=lambda grid: grid[0] * grid[1],
)


def select_tile_grid(width: int, height: int) -> tuple[int, int] | None:
    """The (columns, rows) of 640 px tiles DeepSeek-OCR cuts a ``width`` x ``height`` page into, or None.

    Pages that fit in one tile get none. Otherwise, among the grids of 2 to 9 tiles taken by tile count,
    the first one whose aspect ratio is closest to the page's wins; on an exact tie a larger grid takes
    over only when the page has more than half of that grid's pixels (so a big page gets more tiles).
    """
    if width <= TILE_SIZE and height <= TILE_SIZE:
        return None
    aspect = width / height
    best, best_diff = None, math.inf
    for i, j in _GRIDS:
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


def max_image_tokens(mode: str, pixels_per_token: int = PIXELS_PER_TOKEN) -> int:
    """The most placeholders one page can take in ``mode`` (with its largest tile grid, if it tiles)."""
    view_size, tiled = _mode_settings(mode)
    grids = [None, *(_GRIDS if tiled else [])]
    return max(count_image_tokens(view_size, grid, pixels_per_token) for grid in grids)


def _mode_settings(mode: str) -> tuple[int, bool]:
    try:
        return MODES[mode.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}") from None


# ----------------------------------------------------------------------------------------------------
# Image processor
# ----------------------------------------------------------------------------------------------------


class JinaOCRImagesKwargs(ImagesKwargs, total=False):
    """The options of :class:`JinaOCRImageProcessor` on top of the standard image kwargs.

    mode: one of ``tiny``, ``small``, ``base``, ``large``, ``gundam`` (see :data:`MODES`).
    max_image_pixels: refuse images with more pixels than this (None: no limit), before decoding them.
    pixels_per_token: the side of the square of view pixels one visual token stands for, the model
    config's ``pixels_per_visual_token`` (64 for jina-ocr-v1).
    """

    mode: str | None
    max_image_pixels: int | None
    pixels_per_token: int | None


class JinaOCRImageProcessor(PilBackend):
    """DeepSeek-OCR's dynamic-resolution preprocessing: a global view plus, in Gundam mode, 640 px tiles.

    Outputs (as a :class:`~transformers.BatchFeature` of torch tensors):

    - ``pixel_values`` (n_images, 3, S, S) float32: one global view per image (S = the mode's view size);
    - ``pixel_values_local`` (n_tiles, 3, 640, 640) float32: the tiles of all images, image after image,
      each image's tiles in row-major order; (0, 3, 640, 640) when no image has tiles;
    - ``image_grids`` (n_images, 2) int64: (columns, rows) of each image's tiles, (0, 0) for none.

    Every view is resized once with PIL bicubic from the (EXIF-rotated, RGB) page and stays uint8 until it
    is written into the float32 output, where it is normalised in place with exactly the arithmetic of
    torchvision's ``ToTensor`` + ``Normalize``.
    """

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

    # -- public helpers ----------------------------------------------------------------------------

    def grid_for(self, width: int, height: int, mode: str | None = None) -> tuple[int, int] | None:
        """The tile grid of a ``width`` x ``height`` image in ``mode`` (None: no tiles)."""
        _, tiled = _mode_settings(mode or self.mode)
        return select_tile_grid(width, height) if tiled else None

    def num_image_tokens(self, width: int, height: int, mode: str | None = None) -> int:
        """How many ``<image>`` placeholders a ``width`` x ``height`` image takes in ``mode``."""
        view_size, _ = _mode_settings(mode or self.mode)
        return count_image_tokens(view_size, self.grid_for(width, height, mode), self.pixels_per_token)

    def load_image(self, image: Any, max_image_pixels: int | None | object = _OWN_LIMIT) -> Image.Image:
        """Open ``image`` (PIL image, path, bytes, NumPy array or torch tensor) as an upright RGB page.

        This is the page loader shared by every way into the model (``pages_jina_ocr.load_page``: its
        rules for transparency, 16-bit, CMYK, orientation and sizes). Raises ``ValueError`` naming the
        problem for an empty image, an unreadable file, a URL (never fetched here) or an image above
        ``max_image_pixels`` (the processor's own limit by default; None disables the check).
        """
        limit = self.max_image_pixels if max_image_pixels is _OWN_LIMIT else max_image_pixels
        return load_page(image, limit)

    # -- the Transformers image-processor interface ------------------------------------------------

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
        """Replaces the generic per-image pipeline: one page gives a global view and its tiles.

        Each view is resized straight into its slice of the output tensors; the resizes run on a few
        threads (PIL releases the GIL while resampling), then the whole batch is normalised in place.
        """
        view_size, tiled = _mode_settings(mode or self.mode)
        pages = [self.load_image(image, max_image_pixels) for image in _flatten_images(images)]
        if not pages:
            raise ValueError("no images were given")

        grids = [select_tile_grid(*page.size) if tiled else None for page in pages]
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
        workers = min(len(jobs), os.cpu_count() or 1)
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(lambda job: job(), jobs))
        else:
            for job in jobs:
                job()
        mean = image_mean or self.image_mean
        std = image_std or self.image_std
        for views in (pixel_values, pixel_values_local):
            normalise_in_place(views.numpy(), mean, std)
        return BatchFeature(
            {
                "pixel_values": pixel_values,
                "pixel_values_local": pixel_values_local,
                "image_grids": image_grids,
            }
        )


def global_view_placement(width: int, height: int, view_size: int) -> tuple[int, int, int, int]:
    """Where a ``width`` x ``height`` page lands in its global view: ``(x, y, w, h)`` in view pixels.

    Up to 640 px the page is stretched over the whole square; larger views keep the aspect ratio, the long
    side filling the view and the short side centred. (Training maps glyph boxes to visual tokens with it.)
    """
    if view_size <= _MAX_STRETCHED_VIEW or width == height:
        return 0, 0, view_size, view_size
    if width > height:
        short = max(1, round(height / width * view_size))
        return 0, round((view_size - short) * 0.5), view_size, short
    short = max(1, round(width / height * view_size))
    return round((view_size - short) * 0.5), 0, short, view_size


def write_global_view(page: Image.Image, out: np.ndarray) -> None:
    """Write the global view of an RGB page into ``out`` (3, S, S) as ``v / 255`` in float32.

    Up to 640 px it is the page stretched to a square. Larger views keep the aspect ratio: the long side
    becomes S, the short side ``round(short / long * S)`` (at least 1 px), pasted on grey at
    ``round((S - short) * 0.5)``; this is PIL's ``ImageOps.pad`` with bicubic resampling.
    """
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
    """``out = pixels / 255`` in float32 in one strided pass: the uint8 values are cast exactly, then
    divided, as torchvision's ``ToTensor`` does."""
    np.divide(pixels, np.float32(255), out=out, dtype=np.float32, casting="unsafe")


def normalise_in_place(views: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> None:
    """``(x - mean) / std`` on float32 (..., 3, H, W) views holding ``v / 255``: the float32 operations of
    torchvision's ``Normalize``, so the values are bit for bit the same."""
    np.subtract(views, np.asarray(mean, dtype=np.float32).reshape(3, 1, 1), out=views)
    np.divide(views, np.asarray(std, dtype=np.float32).reshape(3, 1, 1), out=views)


def _flatten_images(images: Any) -> list[Any]:
    if isinstance(images, (list, tuple)):
        return [image for item in images for image in _flatten_images(item)]
    return [images]


# ----------------------------------------------------------------------------------------------------
# Output clean-up: grounding spans, special tokens, LaTeX
# ----------------------------------------------------------------------------------------------------

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
    """Turn DeepSeek-OCR grounding output into Markdown and the list of regions it described.

    ``<|ref|>image<|/ref|><|det|>[[x1,y1,x2,y2]]<|/det|>`` becomes an image link (``image_link`` is
    formatted with the page number and the running index of images on the page); every other span is
    removed, its text following it being the content. ``\\coloneqq`` and ``\\eqqcolon`` become ``:=`` and
    ``=:`` as in DeepSeek-OCR's own post-processing. Returns ``(markdown, regions)``.
    """
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


# ----------------------------------------------------------------------------------------------------
# Processor
# ----------------------------------------------------------------------------------------------------

IMAGE_TOKEN = "<image>"
JINA_DEFAULT_PROMPT = "Transcribe the provided document image into a clean Markdown format, preserving the natural reading order."
DEEPSEEK_DEFAULT_PROMPT = "<|grounding|>Convert the document to markdown."
PROMPT_STYLES = ("jina", "deepseek")


def request_content(prompt: str) -> str:
    """A one-page request's content: ``<image>`` then the instruction, or the instruction as written when
    it already holds the marker (prompts copied from DeepSeek-OCR); it may hold only one."""
    markers = prompt.count(IMAGE_TOKEN)
    if markers > 1:
        raise ValueError(
            f"the prompt holds {markers} {IMAGE_TOKEN} markers; a one-page prompt holds at most one"
        )
    return prompt if markers else f"{IMAGE_TOKEN}\n{prompt}"


def jina_request(prompt: str | None = None) -> str:
    """The full jina-ocr-v1 text of a one-page request (no BOS); ``prompt`` None is the default instruction.

    Engines that take text rather than this processor (vLLM) build their prompts here too.
    """
    content = request_content(JINA_DEFAULT_PROMPT if prompt is None else prompt)
    return f"<|User|>:\n{content}\n<|Assistant|>:\n"


# The jina-ocr-v1 conversation format: "<|User|>:\n<image>\n{prompt}\n<|Assistant|>:\n", no BOS. A user
# turn with an image and no text gets the default prompt, so that a bare page is a valid request.
JINA_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- '<|User|>:\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] + '\\n' -}}"
    "{%- else -%}"
    "{%- set ns = namespace(has_text=false) -%}"
    "{%- for block in message['content'] -%}"
    "{%- if block['type'] == 'image' -%}{{- '<image>\\n' -}}"
    "{%- elif block['type'] == 'text' -%}{%- set ns.has_text = true -%}{{- block['text'] + '\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if not ns.has_text -%}{{- '" + JINA_DEFAULT_PROMPT + "\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|Assistant|>:\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for block in message['content'] if block['type'] == 'text' -%}{{- block['text'] -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- eos_token -}}"
    "{%- else -%}"
    "{{- raise_exception('jina-ocr-v1 conversations have user and assistant turns, not ' + message['role']) -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|Assistant|>:\\n' -}}{%- endif -%}"
)


class JinaOCRProcessor(ProcessorMixin):
    """Image processor + tokenizer of jina-ocr-v1.

    ``prompt_style`` chooses how :meth:`build_prompt` writes a request: ``"jina"`` (the jina-ocr-v1
    chat format, the default) or ``"deepseek"`` (DeepSeek-OCR's BOS + ``<image>\\n`` + instruction).
    Token ids are always read from the tokenizer, so the real 129,280-entry tokenizer (``<image>`` at
    128815) and the small test tokenizer work alike.
    """

    def __init__(
        self, image_processor=None, tokenizer=None, chat_template=None, prompt_style="jina", **kwargs
    ):
        if chat_template is None:
            chat_template = JINA_CHAT_TEMPLATE
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
        # Specials that carry content and survive decoding: grounding markers (parsed afterwards) and
        # HTML table cells (the real tokenizer marks <td> and friends special, so skipping specials would
        # strip every table).
        content_ids = {tokenizer.convert_tokens_to_ids(token) for token in _CONTENT_TOKENS}
        added_specials = {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
        self._dropped_ids = (added_specials | set(tokenizer.all_special_ids)) - content_ids

    @classmethod
    def _load_tokenizer_from_pretrained(
        cls, sub_processor_type, pretrained_model_name_or_path, subfolder="", **kwargs
    ):
        """The checkpoint's tokenizer.json as it is. DeepSeek-OCR's tokenizer_config.json names the class
        ``LlamaTokenizerFast``; some Transformers 5 releases (5.17, for one) rebuild that class with a
        SentencePiece pre-tokenizer, which drops the spaces and newlines of a byte-level vocabulary. When
        the loaded tokenizer does not give text back, the same files are loaded with the generic class."""
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

    # -- prompts -------------------------------------------------------------------------------------

    def build_prompt(self, prompt: str | None = None) -> str:
        """The full text of a one-page request, with its single ``<image>`` marker.

        ``prompt`` is the instruction (the style's default when None). An instruction that already holds
        ``<image>`` is placed as written, for prompts copied from DeepSeek-OCR; it may hold only one.
        """
        if self.prompt_style == "jina":
            return jina_request(prompt)
        content = request_content(DEEPSEEK_DEFAULT_PROMPT if prompt is None else prompt)
        return f"{self.tokenizer.bos_token}{content}"

    # -- encoding -------------------------------------------------------------------------------------

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
        """Model inputs for ``images`` and the prompt ``text`` (one string per sequence of the batch).

        Each ``<image>`` marker in ``text`` is replaced by the placeholders of the next image, in order;
        ``images`` may be flat or one list per text. Without ``text``, each image becomes its own
        sequence with :meth:`build_prompt`'s default. The text is taken as complete: no BOS is added
        (the jina-ocr-v1 format has none; the DeepSeek style writes it itself). Sequences are padded on
        ``padding_side`` ("left" for generation) and returned as torch tensors with ``attention_mask``.
        ``mode`` and ``max_image_pixels`` are passed on to the image processor.
        """
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
        """Inputs for ``model.generate``: one image gives a batch of one, a list one left-padded batch.

        ``prompt`` is the instruction (see :meth:`build_prompt`); ``device`` moves every tensor, ``dtype``
        casts the pixel tensors (use the model's dtype); ``mode`` overrides the image processor's mode.
        """
        images = list(image_or_images) if isinstance(image_or_images, (list, tuple)) else [image_or_images]
        if not images:
            raise ValueError("no images were given")
        text = self.build_prompt(prompt)
        inputs = self(images=images, text=[text] * len(images), **({} if mode is None else {"mode": mode}))
        if device is not None or dtype is not None:
            inputs = inputs.to(device=device, dtype=dtype)
        return inputs

    # -- decoding -------------------------------------------------------------------------------------

    def decode_ocr(
        self,
        generated_ids,
        input_ids=None,
        *,
        return_regions: bool = False,
        image_link: str = "images/{index}.jpg",
    ):
        """Markdown of each page from ``model.generate``'s output.

        ``generated_ids`` (batch, length) start with ``input_ids`` (as ``generate`` returns them), which
        are removed; pass ``input_ids=None`` when ``generated_ids`` hold only the new tokens. Each row is
        cut at its first EOS, special tokens are removed (HTML table tags kept), grounding spans become
        Markdown (see :func:`grounding_to_markdown`) and runs of blank lines are collapsed.

        Returns a ``str`` for a batch of one and a list of ``str`` otherwise; with ``return_regions``
        each page is a ``(markdown, regions)`` pair instead, ``regions`` a list of :class:`GroundedRegion`.
        """
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
        eos = self.tokenizer.eos_token_id
        if eos in ids:
            ids = ids[: ids.index(eos)]
        return self.tokenizer.decode(
            [i for i in ids if i not in self._dropped_ids], skip_special_tokens=False
        )

    def post_process_image_text_to_text(
        self, generated_outputs, skip_special_tokens=True, **kwargs
    ) -> list[str]:
        """What the ``image-text-to-text`` pipeline shows: the text of each row with table tags kept and
        grounding spans turned into Markdown (the pipeline itself removes the prompt)."""
        texts = []
        for row in _as_rows(generated_outputs):
            if skip_special_tokens:
                text = self._decode_row(row)
            else:
                text = self.tokenizer.decode(row, skip_special_tokens=False)
            texts.append(grounding_to_markdown(text)[0])
        return texts


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
# Keyword arguments the standard callers (the image-text-to-text pipeline, apply_chat_template) may pass
# that have no effect here: every batch is padded to its longest sequence, and no special token is added.
_NEUTRAL_KWARGS = {"padding", "add_special_tokens"}


def _image_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The image-processor options among ``kwargs``; anything not understood is an error, not ignored."""
    unknown = sorted(set(kwargs) - _IMAGE_KWARGS - _NEUTRAL_KWARGS)
    if unknown:
        raise TypeError(f"JinaOCRProcessor got unexpected keyword argument(s): {', '.join(unknown)}")
    return {key: value for key, value in kwargs.items() if key in _IMAGE_KWARGS}


def _as_rows(ids) -> list[list[int]]:
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    elif isinstance(ids, np.ndarray):
        ids = ids.tolist()
    if ids and isinstance(ids[0], int):
        return [list(ids)]
    return [list(row) for row in ids]
