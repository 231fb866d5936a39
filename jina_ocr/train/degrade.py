"""What happens to a printed page between the printer and the model, drawn for training and evaluation.

A model trained on clean renders alone reads a clean render well and invents text on the same page
printed on off-white paper or photographed on a desk. Each degradation group here is one thing a
user's copy of a page meets:

- ``dpi``: rendered at another resolution (96 to 300 dpi) than the training pages' own;
- ``rotation``: set slightly askew (within +-5 degrees), as a scanner's feeder leaves it;
- ``photo``: a photographed sheet: the page smaller than the frame, turned and seen in slight
  perspective, on a darker background, with its page edges in view;
- ``paper``: paper tones and texture, and ink that is not quite black;
- ``light``: uneven light and a soft shadow across the page;
- ``noise_blur``: sensor noise and a lens or scanner blur;
- ``bilevel``: a black-and-white scan (thresholded, with speckles);
- ``jpeg``: JPEG compression.

A degraded page keeps its ground truth, and a homography (:attr:`DegradedPage.warp`) says where each
point of the clean page went, so the glyph targets of training (:mod:`jina_ocr.train.glyphs`) follow the
text into the turned or shrunk page. Everything is drawn from the ``random.Random`` a caller passes, so
page ``i`` of a seed is the same degraded page on every run.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

from jina_ocr.synth.page import render

GROUPS = ("dpi", "rotation", "photo", "paper", "light", "noise_blur", "bilevel", "jpeg")
# The groups the evaluation reports one by one; ``dpi96`` etc. fix the resolution of the ``dpi`` group.
EVALUATION_GROUPS = (
    "paper",
    "photo",
    "noise_blur",
    "jpeg",
    "rotation",
    "dpi96",
    "dpi200",
    "dpi300",
    "bilevel",
)
# Chance of each group on a page drawn for training (``photo`` and ``rotation`` exclude each other).
TRAINING_ODDS = {
    "dpi": 0.35,
    "rotation": 0.35,
    "photo": 0.25,
    "paper": 0.5,
    "light": 0.3,
    "noise_blur": 0.4,
    "bilevel": 0.1,
    "jpeg": 0.35,
}
DPI_RANGE = (96, 300)
MAX_ROTATION = 5.0


@dataclass(frozen=True)
class DegradedPage:
    """A page as a user's copy of it looks: its image, the clean page's PDF and Markdown, the groups it
    went through, and ``warp``: the 3 x 3 homography from a point of the clean page (x, y as fractions
    of its width and height) to the same point of ``image`` (fractions of its size)."""

    image: Image.Image
    pdf_bytes: bytes
    markdown: str
    groups: tuple[str, ...]
    warp: np.ndarray


def training_groups(rng: random.Random) -> tuple[str, ...]:
    """The groups a degraded training page goes through: each by its odds, at least one of them."""
    groups = [group for group, odds in TRAINING_ODDS.items() if rng.random() < odds]
    if "photo" in groups and "rotation" in groups:
        groups.remove("rotation")
    return tuple(groups) or (rng.choice(GROUPS),)


def evaluation_groups(name: str) -> tuple[tuple[str, ...], int | None]:
    """The groups and fixed resolution of one of :data:`EVALUATION_GROUPS`."""
    if name.startswith("dpi") and name[3:].isdigit():
        return ("dpi",), int(name[3:])
    if name not in GROUPS:
        raise ValueError(f"unknown degradation {name!r}: choose from {', '.join(EVALUATION_GROUPS)}")
    return (name,), None


def degrade(page, groups: Sequence[str], rng: random.Random, dpi: int | None = None) -> DegradedPage:
    """``page`` (anything with ``image``, ``pdf_bytes`` and ``markdown``) through ``groups`` in the order
    a page meets them: printed (``dpi``, ``dpi`` fixing the resolution), placed (``rotation`` or
    ``photo``), on its paper, lit, captured (``noise_blur``, ``bilevel``) and saved (``jpeg``)."""
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown degradation {sorted(unknown)[0]!r}: choose from {', '.join(GROUPS)}")
    noise = np.random.default_rng(rng.getrandbits(64))
    image, warp = page.image, np.eye(3)
    if "dpi" in groups:
        image = render(page.pdf_bytes, dpi or rng.randint(*DPI_RANGE))
    if "rotation" in groups:
        image, moved = _rotated(image, rng.uniform(-MAX_ROTATION, MAX_ROTATION))
        warp = moved @ warp
    pixels = np.asarray(image.convert("RGB"), dtype=np.float32)
    if "paper" in groups or "photo" in groups:
        pixels = _on_paper(pixels, rng, noise)
    if "photo" in groups:
        pixels, moved = _photographed(pixels, rng, noise)
        warp = moved @ warp
    if "light" in groups or "photo" in groups:
        pixels = _unevenly_lit(pixels, rng)
    if "noise_blur" in groups:
        pixels = _noisy_and_blurred(pixels, rng, noise)
    if "bilevel" in groups:
        pixels = _bilevel(pixels, rng, noise)
    image = Image.fromarray(np.clip(pixels, 0, 255).round().astype(np.uint8), "RGB")
    if "jpeg" in groups:
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=rng.randint(15, 60))
        image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    return DegradedPage(image, page.pdf_bytes, page.markdown, tuple(groups), warp)


def warp_point(warp: np.ndarray, x: float, y: float) -> tuple[float, float]:
    """Where ``warp`` takes the point (x, y) (fractions of the clean page)."""
    u, v, w = warp @ np.array([x, y, 1.0])
    return u / w, v / w


# -- the groups ---------------------------------------------------------------------------------


def _fractions(width: int, height: int) -> np.ndarray:
    """Pixels of a ``width`` x ``height`` image to fractions of its size."""
    return np.diag([1 / width, 1 / height, 1.0])


def _transformed(image: Image.Image, pixel_warp: np.ndarray, fill) -> Image.Image:
    """``image`` moved by ``pixel_warp`` (its pixels to the output's, same size), ``fill`` outside it."""
    inverse = np.linalg.inv(pixel_warp)
    inverse /= inverse[2, 2]
    return image.transform(
        image.size,
        Image.Transform.PERSPECTIVE,
        tuple(inverse.flatten()[:8]),
        Image.Resampling.BICUBIC,
        fillcolor=fill,
    )


def _rotated(image: Image.Image, degrees: float) -> tuple[Image.Image, np.ndarray]:
    """``image`` turned by ``degrees`` about its centre on white, and the warp of that turn."""
    width, height = image.size
    turn = _about_centre(width, height, math.radians(degrees), 1.0, (0.0, 0.0))
    fractions = _fractions(width, height)
    return _transformed(image.convert("RGB"), turn, "white"), fractions @ turn @ np.linalg.inv(fractions)


def _about_centre(
    width: int, height: int, angle: float, scale: float, shift: tuple[float, float]
) -> np.ndarray:
    """Pixel homography: scale and turn about the image's centre, then move by ``shift`` pixels."""
    cx, cy = width / 2, height / 2
    cos, sin = math.cos(angle) * scale, math.sin(angle) * scale
    return np.array(
        [
            [cos, -sin, cx + shift[0] - cos * cx + sin * cy],
            [sin, cos, cy + shift[1] - sin * cx - cos * cy],
            [0.0, 0.0, 1.0],
        ]
    )


def _homography(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The homography taking the four ``source`` points (4 x 2) to the four ``target`` points."""
    rows, values = [], []
    for (x, y), (u, v) in zip(source, target, strict=True):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        values += [u, v]
    solved = np.linalg.solve(np.array(rows, dtype=np.float64), np.array(values, dtype=np.float64))
    return np.append(solved, 1.0).reshape(3, 3)


def _smooth_field(shape: tuple[int, int], rng: np.random.Generator, cells: int) -> np.ndarray:
    """A field of values around 0 (unit spread) that varies over about ``cells`` steps per side."""
    height, width = shape
    coarse = rng.standard_normal((cells, max(2, round(cells * width / height)))).astype(np.float32)
    field = Image.fromarray(coarse, "F").resize((width, height), Image.Resampling.BICUBIC)
    return np.asarray(field, dtype=np.float32)


def _on_paper(pixels: np.ndarray, rng: random.Random, noise: np.random.Generator) -> np.ndarray:
    """The page on toned, slightly textured paper, in ink that is dark grey to blue-black."""
    red = rng.uniform(222, 252)
    green = red - rng.uniform(0, 12)
    paper = np.array([red, green, green - rng.uniform(0, 26)], dtype=np.float32)
    level = rng.uniform(15, 75)
    ink = np.array([level, level, level + rng.uniform(0, 35)], dtype=np.float32)
    coverage = 1.0 - pixels.mean(axis=2, keepdims=True) / 255.0
    texture = _smooth_field(pixels.shape[:2], noise, rng.randint(8, 40))[..., None] * rng.uniform(1, 6)
    return paper * (1 - coverage) + ink * coverage + texture * (1 - coverage)


def _photographed(
    pixels: np.ndarray, rng: random.Random, noise: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The sheet shrunk into the frame, turned, in slight perspective, on a darker background."""
    height, width = pixels.shape[:2]
    scale = rng.uniform(0.75, 0.95)
    room = (1 - scale) / 2
    shift = (rng.uniform(-room, room) * width * 0.5, rng.uniform(-room, room) * height * 0.5)
    placed = _about_centre(
        width, height, math.radians(rng.uniform(-MAX_ROTATION, MAX_ROTATION)), scale, shift
    )
    corners = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float64)
    moved = np.array([warp_point(placed, x, y) for x, y in corners])
    jitter = 0.025 * min(width, height)
    moved += np.array([[rng.uniform(-jitter, jitter) for _ in range(2)] for _ in range(4)])
    pixel_warp = _homography(corners, moved)
    sheet = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    inside = np.asarray(_transformed(Image.new("L", sheet.size, 255), pixel_warp, 0), dtype=np.float32)[
        ..., None
    ]
    sheet = np.asarray(_transformed(sheet, pixel_warp, (0, 0, 0)), dtype=np.float32)
    tone = rng.uniform(30, 150)
    background = np.array([tone + rng.uniform(-20, 20) for _ in range(3)], dtype=np.float32)
    background = background + _smooth_field((height, width), noise, 12)[..., None] * rng.uniform(3, 12)
    alpha = inside / 255.0
    fractions = _fractions(width, height)
    return sheet * alpha + background * (1 - alpha), fractions @ pixel_warp @ np.linalg.inv(fractions)


def _unevenly_lit(pixels: np.ndarray, rng: random.Random) -> np.ndarray:
    """Light that falls off across the page in one direction, and often a soft shadow over one side."""
    height, width = pixels.shape[:2]
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    along = (xs / width - 0.5) * math.cos(angle) + (ys / height - 0.5) * math.sin(angle)
    light = 1.0 - rng.uniform(0.05, 0.3) * (along + 0.5)
    if rng.random() < 0.5:
        edge = rng.uniform(-0.3, 0.3)
        turn = rng.uniform(0, 2 * math.pi)
        side = (xs / width - 0.5) * math.cos(turn) + (ys / height - 0.5) * math.sin(turn) - edge
        light *= 1.0 - rng.uniform(0.1, 0.35) / (1.0 + np.exp(-side / rng.uniform(0.01, 0.06)))
    return pixels * light[..., None]


def _noisy_and_blurred(pixels: np.ndarray, rng: random.Random, noise: np.random.Generator) -> np.ndarray:
    """A Gaussian blur of 0.3-1.4 px, then Gaussian noise of sigma 2-14 per pixel."""
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    blurred = np.asarray(image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.4))), dtype=np.float32)
    return blurred + noise.normal(0, rng.uniform(2, 14), blurred.shape[:2])[..., None].astype(np.float32)


def _bilevel(pixels: np.ndarray, rng: random.Random, noise: np.random.Generator) -> np.ndarray:
    """Black and white at a threshold that thins or thickens the strokes, with sparse speckles."""
    grey = pixels.mean(axis=2)
    ink = grey < rng.uniform(95, 175)
    speckles = noise.random(grey.shape) < rng.uniform(0, 0.002)
    white = np.where(ink ^ speckles, 0.0, 255.0).astype(np.float32)
    return np.repeat(white[..., None], 3, axis=2)
