"""Rasterising a PDF page in the tests, independently of the package's own document code."""

from __future__ import annotations

import pymupdf
from PIL import Image


def render(pdf_path, zoom: float = 2.0, rotate: int = 0) -> Image.Image:
    """Page 1 of ``pdf_path`` as RGB, scaled by ``zoom`` and turned by ``rotate`` degrees."""
    with pymupdf.open(pdf_path) as doc:
        page = doc[0]
        page.set_rotation(rotate)
        pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
        return Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
