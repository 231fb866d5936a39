"""The page loader of jina-ocr-v1: whatever holds a page in, one upright RGB PIL image out.

Every way into the model reads pages here (the processor's ``load_image``, the OCR pipeline and, through
``jina_ocr.runtime.documents``, ``jina-ocr convert`` and ``serve``), so a file gives the same pixels
whichever door it comes through. The rules, each applied in one place:

- Orientation: the EXIF orientation tag (JPEG, TIFF, WebP, PNG) is applied.
- Transparency (``RGBA``, ``LA``, ``PA``, ``RGBa``, a palette or colour key with ``transparency``) is
  composited on white paper with Pillow's ``alpha_composite``.
- 16-bit samples (``I;16`` and its byte orders, ``uint16`` arrays; mode ``I``, as some readers store
  16-bit grey, clipped to 0..65535) become 8-bit rounded to the nearest level, ``v8 = round(v16 / 257)``
  (65535 = 255 x 257): Pillow's own conversion would clip every value above 255 to white.
- Floating-point samples (mode ``F``, float arrays) must lie in [0, 1]; ``v8 = round(v * 255)``.
- Bilevel (``1``, as CCITT group 3/4 TIFF scans are read) and palette images become black/white and
  their palette colours.
- CMYK becomes RGB with Pillow's conversion. Pillow reads every CMYK JPEG with Adobe's inverted
  polarity, right only for files with Adobe's APP14 marker (Photoshop's): the others are inverted back.
- Size: the pixel count is checked from the image header (or the PDF page box) before anything is
  decoded, with our own message; Pillow's decompression-bomb check is off for that one open and decode,
  so the limit can be raised past Pillow's default.
- Formats: PNG, JPEG, TIFF, WebP and BMP. PDFs are documents: the installed tools render their pages
  (``jina_ocr.runtime.pdf``) and hand them here as images. URLs are refused: this loader never fetches.

This file ships to the Hub as remote code: it imports only PIL, NumPy and torch.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageChops, ImageOps, UnidentifiedImageError

DEFAULT_MAX_PIXELS = 80_000_000
"""Largest page bitmap the loader creates (240 MB as RGB). A 600 dpi A3 scan (70 M pixels) fits."""

IMAGE_FORMATS = ("PNG", "JPEG", "TIFF", "WEBP", "BMP")
"""Pillow formats the loader opens; only TIFF is read as multi-page, other formats use their first frame."""

EXIF_ORIENTATION = 0x0112

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")
_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")

_PILLOW_LIMIT_LOCK = threading.Lock()


class PageError(ValueError):
    """A page that cannot be read. ``subject`` names the input and ``reason`` says what is wrong; the
    message is both, so that one of forty files is named when it fails."""

    def __init__(self, subject: str, reason: str):
        super().__init__(f"{subject} {reason}")
        self.subject = subject
        self.reason = reason


class EmptyPageError(PageError):
    """A page with no pixels: a zero-size image or array, or a PDF page whose box has no area."""


class PageTooLargeError(PageError):
    """A page whose bitmap would have more pixels than the limit (checked before decoding)."""


class DamagedPageError(PageError):
    """A page whose data is broken: it could not be decoded, or MuPDF reported damage rendering it."""


def load_page(source: Any, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """``source`` (a PIL image, a path, an image file's bytes, a NumPy array or a torch tensor: see
    :func:`array_to_image`) as an upright RGB page, by the rules of this module; ``max_pixels`` None
    disables the limit. Raises :class:`PageError` naming the problem, ``TypeError`` for anything else."""
    if isinstance(source, Image.Image):
        return decode_image(source, max_pixels, "the image")
    if isinstance(source, str) and _URL.match(source):
        raise PageError(
            source,
            "is a URL; the page loader reads files, bytes, images and arrays and never fetches: "
            "download it first, or use the jina-ocr package (jina-ocr convert URL, jina_ocr.convert(url)), "
            "which fetches with size, time and address limits",
        )
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        subject = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the image bytes"
        image = open_image(source, subject)
        try:
            page = decode_image(image, max_pixels, subject)
        except BaseException:
            image.close()
            raise
        if page is not image:  # the file (a multi-page TIFF's stays open after decoding) is done with
            image.close()
        return page
    if isinstance(source, torch.Tensor):
        array = _tensor_to_numpy(source)
        return decode_image(array_to_image(array, channels_first=True), max_pixels, _array_subject(array))
    if isinstance(source, np.ndarray):
        return decode_image(array_to_image(source), max_pixels, _array_subject(source))
    raise TypeError(
        f"cannot read a {type(source).__name__} as an image: pass a PIL image, a path, bytes, "
        "a NumPy array or a torch tensor"
    )


def check_page_size(size: tuple[int, int], max_pixels: int | None, subject: str, hint: str = "") -> None:
    """Refuse a ``(width, height)`` page with no area or with more than ``max_pixels`` pixels (None: no
    limit). ``hint`` ends the over-the-limit message, e.g. how to lower the page's size."""
    width, height = size
    if width < 1 or height < 1:
        raise EmptyPageError(subject, f"has zero size ({width}x{height} px)")
    if max_pixels is not None and width * height > max_pixels:
        raise PageTooLargeError(
            subject,
            f"would be {width}x{height} = {width * height:,} pixels, over the limit of {max_pixels:,}{hint}",
        )


@contextmanager
def _pillow_bomb_check_off() -> Iterator[None]:
    """Pillow's decompression-bomb check off while the caller opens or decodes an image whose size it
    checks itself. The check is a module global of Pillow, so it is switched under a lock and only for
    the length of one open (which reads the header) or one decode of an oversized page."""
    with _PILLOW_LIMIT_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def open_image(source: str | os.PathLike | bytes | bytearray | memoryview, subject: str) -> Image.Image:
    """Open an image file or its bytes lazily (the header is read, no pixel is decoded); raises
    :class:`PageError` for a missing file, a folder, a PDF or anything not in :data:`IMAGE_FORMATS`."""
    is_path = isinstance(source, (str, os.PathLike))
    handle = os.fspath(source) if is_path else io.BytesIO(bytes(source))
    try:
        with _pillow_bomb_check_off():
            return Image.open(handle, formats=IMAGE_FORMATS)
    except FileNotFoundError:
        raise PageError(subject, "does not exist (no such file)") from None
    except IsADirectoryError:
        raise PageError(subject, "is a directory, not an image") from None
    except PermissionError:
        raise PageError(subject, "cannot be read (permission denied)") from None
    except UnidentifiedImageError:
        raise PageError(subject, _not_an_image(source, is_path)) from None
    except (OSError, SyntaxError, ValueError) as error:
        raise DamagedPageError(subject, f"is not a readable image (damaged or truncated): {error}") from None


SNIFF_BYTES = 1024
"""PDF readers accept junk before ``%PDF-`` within the first KiB, and so does :func:`starts_like_a_pdf`."""


def starts_like_a_pdf(head: bytes) -> bool:
    """Whether a file's first bytes hold ``%PDF-`` within :data:`SNIFF_BYTES`: the one PDF test of every
    reader (documents and URL fetches in jina_ocr, the pipeline, this loader's messages)."""
    return b"%PDF-" in head[:SNIFF_BYTES]


def starts_like_an_image(head: bytes) -> bool:
    """Whether a file's first bytes are the signature of one of :data:`IMAGE_FORMATS`."""
    return (
        head.startswith(b"\x89PNG\r\n\x1a\n")
        or head.startswith(b"\xff\xd8\xff")
        or head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
        or (head.startswith(b"RIFF") and head[8:12] == b"WEBP")
        or head.startswith(b"BM")
    )


def _not_an_image(source, is_path: bool) -> str:
    if is_path:
        with open(source, "rb") as file:
            head = file.read(SNIFF_BYTES)
    else:
        head = bytes(source[:SNIFF_BYTES])
    if starts_like_a_pdf(head):
        return (
            "is a PDF, not an image: render its pages first (jina-ocr convert and jina_ocr.convert take PDFs)"
        )
    if starts_like_an_image(head):
        return "is not a readable image: it starts like one but cannot be parsed (damaged or truncated)"
    return "is not an image: not a PNG, JPEG, TIFF, WebP or BMP file"


def upright_size(image: Image.Image) -> tuple[int, int]:
    """The (width, height) :func:`decode_image` will return, read from the header: EXIF orientations
    5-8 turn the page by 90 degrees. A PNG whose eXIf chunk follows the pixel data is taken as unrotated,
    as Pillow would decode the whole image to find it (the pixel count is the same either way)."""
    width, height = image.size
    if image.format == "PNG" and "exif" not in image.info:
        return width, height
    return (height, width) if image.getexif().get(EXIF_ORIENTATION, 1) in (5, 6, 7, 8) else (width, height)


def check_image_size(image: Image.Image, max_pixels: int | None, subject: str) -> tuple[int, int]:
    """The upright size of an open image's current frame, refused by :func:`check_page_size` when it
    is empty or over ``max_pixels``; read from the header, nothing is decoded."""
    size = upright_size(image)
    check_page_size(size, max_pixels, subject, hint="; raise the pixel limit to accept it")
    return size


def decode_image(image: Image.Image, max_pixels: int | None, subject: str) -> Image.Image:
    """The current frame of an open image as an upright RGB page: the size is checked from the header,
    then the pixels are decoded (Pillow's bomb check off only when within our limit and above Pillow's)."""
    check_image_size(image, max_pixels, subject)
    pillow_limit = Image.MAX_IMAGE_PIXELS
    try:
        if pillow_limit is not None and image.width * image.height > pillow_limit:
            with _pillow_bomb_check_off():
                image.load()
        else:
            image.load()
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise DamagedPageError(
            subject, f"cannot be decoded as {image.format or 'an image'}: {error}"
        ) from None
    return to_rgb(_upright(image), subject)


def _upright(image: Image.Image) -> Image.Image:
    if image.getexif().get(EXIF_ORIENTATION, 1) in (1, None):
        return image
    return ImageOps.exif_transpose(image)


def to_rgb(image: Image.Image, subject: str = "the image") -> Image.Image:
    """The RGB page of a decoded image, by the colour rules in this module's docstring."""
    if image.mode in _SIXTEEN_BIT_MODES or image.mode == "I":
        image = _grey_with_key(np.asarray(image), sixteen_to_eight(np.asarray(image)), image.info)
    elif image.mode == "F":
        image = Image.fromarray(unit_to_eight(np.asarray(image), subject))
    elif image.mode == "CMYK" and image.format == "JPEG" and "adobe" not in image.info:
        image = ImageChops.invert(image)  # Pillow assumed Adobe's inverted polarity; this file has none
    if image.mode in _ALPHA_MODES or "transparency" in image.info:
        rgba = image.convert("RGBA")
        paper = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(paper, rgba).convert("RGB")
    if image.mode == "RGB":
        return image
    try:
        return image.convert("RGB")
    except ValueError as error:
        raise PageError(subject, f"has mode {image.mode!r}, which has no RGB conversion ({error})") from None


def _grey_with_key(samples: np.ndarray, grey: np.ndarray, info: dict) -> Image.Image:
    """8-bit grey from wide samples; a colour key (a PNG's tRNS) is matched on the wide samples, where
    it names one level exactly, and becomes an alpha channel."""
    key = info.get("transparency")
    if not isinstance(key, int):
        return Image.fromarray(grey)
    alpha = np.where(samples == key, 0, 255).astype(np.uint8)
    return Image.fromarray(np.stack([grey, alpha], axis=-1))  # LA


def sixteen_to_eight(values: np.ndarray) -> np.ndarray:
    """16-bit samples to 8-bit, rounding to the nearest level: ``(v + 128) // 257``, i.e. round(v / 257)
    (257 is odd, so there are no ties); values outside 0..65535 are clipped first."""
    wide = np.clip(values.astype(np.int64), 0, 65535)
    return ((wide + 128) // 257).astype(np.uint8)


def unit_to_eight(values: np.ndarray, subject: str) -> np.ndarray:
    """Samples in [0, 1] to 8-bit: ``floor(v * 255 + 0.5)``; anything else is an error, because an
    image in 0..255 passed as floats would otherwise turn silently white."""
    values = values.astype(np.float64)
    if not np.isfinite(values).all():
        raise PageError(subject, "holds NaN or infinite samples; image samples must lie in [0, 1]")
    if values.size and (values.min() < 0.0 or values.max() > 1.0):
        raise PageError(
            subject,
            f"holds floating-point samples from {values.min()} to {values.max()}; they must lie in [0, 1] "
            "(divide 0-255 values by 255, or pass uint8)",
        )
    return np.floor(values * 255.0 + 0.5).astype(np.uint8)


def _tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()  # NumPy has no bfloat16; both are floats in [0, 1] here
    return tensor.numpy()


def _array_subject(array: np.ndarray) -> str:
    return f"the {tuple(array.shape)} image array"


def array_to_image(array: np.ndarray, channels_first: bool = False) -> Image.Image:
    """A PIL image holding the page of a NumPy array, for :func:`decode_image` to check and convert.

    Layouts: ``H x W`` (grey), ``H x W x C`` or ``C x H x W`` with C = 1 (grey), 3 (RGB) or 4 (RGBA).
    A 3-axis array is read channels last for NumPy (as ``numpy.asarray(image)`` gives) and channels first
    for torch (``channels_first``, as torchvision gives), the other way only when that axis cannot hold
    channels. Dtypes: ``uint8``, ``uint16`` (rounded as 16-bit files are), ``bool`` and floats in [0, 1];
    other integer dtypes are refused rather than guessed at."""
    subject = _array_subject(array)
    if array.ndim == 3:
        first, last = array.shape[0] in (1, 3, 4), array.shape[-1] in (1, 3, 4)
        if first and (channels_first or not last):
            array = array.transpose(1, 2, 0)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
        raise PageError(
            subject,
            "has the wrong shape: an image array is H x W, H x W x C or C x H x W with 1, 3 or 4 channels "
            "(one page per array)",
        )
    height, width = array.shape[:2]
    if height < 1 or width < 1:
        raise EmptyPageError(subject, f"has zero size ({width}x{height} px)")
    if array.dtype == np.uint8:
        pixels = array
    elif array.dtype == np.uint16:
        if array.ndim == 2:  # the same path as a 16-bit greyscale file
            return Image.fromarray(np.ascontiguousarray(array))  # mode I;16
        pixels = sixteen_to_eight(array)
    elif array.dtype == np.bool_:
        pixels = array.astype(np.uint8) * 255
    elif np.issubdtype(array.dtype, np.floating):
        pixels = unit_to_eight(array, subject)
    else:
        raise PageError(
            subject,
            f"has dtype {array.dtype}; image arrays are uint8 (0-255), uint16 (0-65535), bool or "
            "floating point in [0, 1]: cast it, e.g. array.astype(numpy.uint8)",
        )
    return Image.fromarray(np.ascontiguousarray(pixels))  # L, RGB or RGBA from the shape
