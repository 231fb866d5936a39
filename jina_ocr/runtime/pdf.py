"""PDF pages to page images through PyMuPDF: the rendering rules every PDF reader of the tools shares.

A page is rendered once, directly at the chosen dpi, RGB without alpha, as DeepSeek-OCR renders pages.
Its pixel size is checked from the page box before MuPDF allocates the bitmap (with the page loader's
limit and message, :func:`pages_jina_ocr.check_page_size`), a page whose MediaBox has no area is an
error rather than the US Letter page MuPDF would substitute, and a page MuPDF reports damage on while
rendering is an error, not a blank page. The model package reads images only; documents
(:mod:`jina_ocr.runtime.documents`) turn PDFs into pages here.
"""

from __future__ import annotations

import threading

import pymupdf
from PIL import Image

from jina_ocr.remote_code.pages_jina_ocr import (
    DEFAULT_MAX_PIXELS,
    DamagedPageError,
    EmptyPageError,
    check_page_size,
)
from jina_ocr.runtime.render_worker import DrawingError, draw

DEFAULT_DPI = 144
"""DeepSeek-OCR renders PDF pages at 144 dpi (zoom 2); the model was trained on such renders."""

MUPDF_LOCK = threading.RLock()
"""MuPDF's context and its warning buffer are process-wide: every use of a document holds this lock."""


def media_box_is_empty(page) -> bool:
    """True when the page's own (or inherited) MediaBox has no area.

    MuPDF silently replaces such a box with US Letter (or a 1 pt square), which would hand the model
    a blank page instead of telling the user that the page is broken.
    """
    document, xref = page.parent, page.xref
    for _ in range(64):  # the page tree is shallow; the bound guards against a cyclic /Parent
        kind, value = document.xref_get_key(xref, "MediaBox")
        if kind == "array":
            try:
                x0, y0, x1, y1 = (float(v) for v in value.strip("[] ").split())
            except ValueError:
                return True
            return abs(x1 - x0) < 1 or abs(y1 - y0) < 1
        kind, parent = document.xref_get_key(xref, "Parent")
        if kind != "xref":
            return True
        xref = int(parent.split()[0])
    return True


def pdf_page_size(page, dpi: int, subject: str = "the PDF page") -> tuple[int, int]:
    """The (width, height) in pixels that :func:`render_pdf_page` makes of ``page`` at ``dpi``,
    computed from its box; an empty MediaBox is an :class:`EmptyPageError`."""
    with MUPDF_LOCK:
        if media_box_is_empty(page):
            raise EmptyPageError(subject, "has zero size (its MediaBox has no area)")
        box = (page.rect * pymupdf.Matrix(dpi / 72, dpi / 72)).irect
    return box.width, box.height


def check_pdf_page_size(page, dpi: int, max_pixels: int | None, subject: str) -> tuple[int, int]:
    """The page's pixel size at ``dpi``, refused by :func:`check_page_size` when it is empty or over
    ``max_pixels``; computed from the page box, nothing is rendered."""
    size = pdf_page_size(page, dpi, subject)
    check_page_size(size, max_pixels, subject, hint=f" at {dpi} dpi; choose a lower dpi")
    return size


def render_pdf_page(
    page, dpi: int = DEFAULT_DPI, max_pixels: int | None = DEFAULT_MAX_PIXELS, subject: str = "the PDF page"
) -> Image.Image:
    """A PyMuPDF page rendered once at ``dpi`` in this process, RGB without alpha, as DeepSeek-OCR
    renders pages: for trusted pages (training's, the benchmarks'); a user's document draws its pages
    in killable workers (:mod:`jina_ocr.runtime.render_worker`).

    The pixel size is checked from the page box before MuPDF allocates the bitmap, and a page MuPDF
    warns about while drawing is a :class:`DamagedPageError` (:func:`~jina_ocr.runtime.render_worker.draw`).
    """
    with MUPDF_LOCK:
        check_pdf_page_size(page, dpi, max_pixels, subject)
        try:
            size, pixels = draw(page, dpi)
        except DrawingError as error:
            raise DamagedPageError(subject, error.reason) from error
        return Image.frombytes("RGB", size, pixels)
