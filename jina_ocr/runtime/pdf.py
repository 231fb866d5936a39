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


def _pdf_matrix(dpi: int):
    return pymupdf.Matrix(dpi / 72, dpi / 72)


def pdf_page_size(page, dpi: int, subject: str = "the PDF page") -> tuple[int, int]:
    """The (width, height) in pixels that :func:`render_pdf_page` makes of ``page`` at ``dpi``,
    computed from its box; an empty MediaBox is an :class:`EmptyPageError`."""
    with MUPDF_LOCK:
        if media_box_is_empty(page):
            raise EmptyPageError(subject, "has zero size (its MediaBox has no area)")
        box = (page.rect * _pdf_matrix(dpi)).irect
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
    """A PyMuPDF page rendered once at ``dpi``, RGB without alpha, as DeepSeek-OCR renders pages.

    The pixel size is checked from the page box before MuPDF allocates the bitmap. MuPDF draws what
    it can of a damaged page (garbage in a content stream, a broken embedded image) and only warns,
    which would hand the model a blank or partial page; a warning during this render is therefore a
    :class:`DamagedPageError` carrying MuPDF's words. The warning buffer is emptied first, so an
    earlier page's warnings never fail this one.
    """
    with MUPDF_LOCK:
        check_pdf_page_size(page, dpi, max_pixels, subject)
        pymupdf.TOOLS.reset_mupdf_warnings()
        try:
            pixmap = page.get_pixmap(matrix=_pdf_matrix(dpi), alpha=False, colorspace=pymupdf.csRGB)
        except Exception as error:  # PyMuPDF raises its own error types for broken pages
            raise DamagedPageError(subject, f"cannot be rendered: {error}") from error
        finally:
            warnings = pymupdf.TOOLS.mupdf_warnings(reset=True)
        if warnings:
            lines = list(dict.fromkeys(line.strip() for line in warnings.splitlines() if line.strip()))
            raise DamagedPageError(subject, f"is damaged: MuPDF reports {'; '.join(lines[:3])}")
        return Image.frombytes("RGB", (pixmap.width, pixmap.height), pixmap.samples)
