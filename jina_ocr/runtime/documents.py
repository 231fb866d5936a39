"""Documents in, page images out: PDFs through PyMuPDF, images through Pillow.

A :class:`Document` is opened once and renders one page at a time on request, so a 300-page PDF
costs the memory of one page, not of 300. Every failure a user can cause is a
:class:`DocumentError` whose message names the file and, where it applies, the page, because
"cannot identify image file <_io.BytesIO object>" tells nobody which of their 40 files is broken.

Pages are read by the model's own page loader (``pages_jina_ocr`` in the remote code), so they have
the same pixels here as through the processor and the pipeline: its rules for transparency, 16-bit,
CMYK and orientation, and its limits, checked before work is done (a PDF page's pixel size at the
chosen dpi from its page box before MuPDF allocates the bitmap, an image's size from its header
before Pillow decodes it). This module adds what a document needs around them: lazy pages, page
selections, passwords, and errors that name the file and the page.
"""

from __future__ import annotations

import abc
import errno
import os
import re
import stat
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pymupdf
from PIL import Image

from jina_ocr.errors import UserError
from jina_ocr.remote_code.pages_jina_ocr import (
    DEFAULT_MAX_PIXELS,
    SNIFF_BYTES,
    DamagedPageError,
    EmptyPageError,
    PageError,
    PageTooLargeError,
    check_image_size,
    decode_image,
    open_image,
    starts_like_a_pdf,
    starts_like_an_image,
    upright_size,
)
from jina_ocr.runtime import render_worker
from jina_ocr.runtime.checks import positive_int
from jina_ocr.runtime.pdf import DEFAULT_DPI, MUPDF_LOCK, check_pdf_page_size, pdf_page_size
from jina_ocr.runtime.render_worker import DrawingError, RenderJob

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".bmp"})
DOCUMENT_SUFFIXES = IMAGE_SUFFIXES | {".pdf"}
"""File name endings a folder listing treats as documents (the format itself is read from the bytes)."""

NOT_A_DOCUMENT = "is neither a PDF nor a PNG, JPEG, TIFF, WebP or BMP image"

SERVER_MAX_PIXELS = 40_000_000
"""The default limit of ``jina-ocr serve``, stricter than :data:`DEFAULT_MAX_PIXELS`: a server decodes
the pages of many clients at once (each request keeps a batch of pages in flight) from bytes anyone
can send, while ``convert`` reads one user's own files one page at a time."""


class DocumentError(UserError):
    """A document (and possibly one of its pages) that cannot be used, with the reason.

    ``source`` is the name the user knows the document by (its path or upload name) and ``page`` the
    1-based page number, or None when the whole document is affected.
    """

    def __init__(self, source: str, reason: str, page: int | None = None):
        self.source = source
        self.page = page
        self.reason = reason
        where = source if page is None else f"{source}, page {page}"
        super().__init__(f"{where}: {reason}")


class CorruptDocumentError(DocumentError):
    """The bytes claim a format but cannot be parsed (damaged or truncated file)."""


class PasswordError(DocumentError):
    """An encrypted PDF without a password, or with the wrong one."""


class EmptyDocumentError(DocumentError):
    """A file with no bytes or a PDF with no pages."""


class PageRangeError(DocumentError):
    """A requested page number the document does not have."""


class UnknownFormatError(DocumentError):
    """Bytes that are neither a PDF nor an accepted image format."""


class ZeroSizePageError(DocumentError):
    """A page whose box has no area, or that renders to less than one pixel at the chosen dpi."""


class PixelLimitError(DocumentError):
    """A page or image whose bitmap would exceed the pixel limit."""


class PageSelectionError(UserError):
    """A page selection string that does not parse, such as ``3-1`` or ``a-b``."""


_RANGE = re.compile(r"^\s*(\d*)\s*(-?)\s*(\d*)\s*$")


@dataclass(frozen=True)
class PageSelection:
    """Parsed page selection such as ``1-3,7,10-``: 1-based inclusive ranges, ``end`` None for open.

    It is parsed before any document is opened (so a typo fails fast) and resolved against each
    document's page count separately (so ``10-`` works for documents of different lengths).
    """

    ranges: tuple[tuple[int, int | None], ...]

    @classmethod
    def parse(cls, text: str) -> PageSelection:
        ranges = []
        for part in text.split(","):
            match = _RANGE.match(part)
            if not match or not (match.group(1) or match.group(3)):
                raise PageSelectionError(
                    f"invalid page selection {text!r}: {part.strip()!r} is not N, A-B, A- or -B "
                    "(pages count from 1, e.g. 1-3,7,10-)"
                )
            first, dash, last = match.groups()
            start = int(first) if first else 1
            end = (int(last) if last else None) if dash else start
            if start < 1:
                raise PageSelectionError(
                    f"invalid page selection {text!r}: there is no page 0 (pages count from 1)"
                )
            if end is not None and end < start:
                raise PageSelectionError(f"invalid page selection {text!r}: {part.strip()!r} runs backwards")
            ranges.append((start, end))
        return cls(tuple(ranges))

    def resolve(self, page_count: int, source: str) -> list[int]:
        """The selected page numbers in document order, each once; a page past the end is an error."""
        numbers = set()
        for start, end in self.ranges:
            last = page_count if end is None else end
            if start > page_count or last > page_count:
                bad = start if start > page_count else last
                raise PageRangeError(
                    source, f"out of range: the document has {_plural(page_count, 'page')}", page=bad
                )
            numbers.update(range(start, last + 1))
        return sorted(numbers)


PagesArgument = str | Iterable[int] | PageSelection | None
"""What APIs accept as a page selection: None (all), ``"1-3,7"``, page numbers, or a parsed selection."""


def select_pages(pages: PagesArgument, page_count: int, source: str) -> list[int]:
    """Resolve any accepted form of page selection against a document of ``page_count`` pages."""
    if pages is None:
        return list(range(1, page_count + 1))
    if isinstance(pages, str):
        pages = PageSelection.parse(pages)
    if isinstance(pages, PageSelection):
        return pages.resolve(page_count, source)
    numbers = sorted(set(pages))
    for number in numbers:
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise PageSelectionError(f"invalid page number {number!r}: pages count from 1")
        if number > page_count:
            raise PageRangeError(
                source, f"out of range: the document has {_plural(page_count, 'page')}", page=number
            )
    return numbers


class Document(abc.ABC):
    """An open PDF or image file whose pages render one at a time, as RGB PIL images.

    Use :func:`open_document`. Close it (or use it as a context manager) to release the file.
    """

    source: str
    page_count: int
    dpi: int
    max_pixels: int
    _unit: str
    """What a page is called in messages: "page" for PDFs, "image" for image files."""

    @abc.abstractmethod
    def render(self, number: int) -> Image.Image:
        """Page ``number`` (1-based) as an RGB image; raises :class:`DocumentError` naming the page."""

    @abc.abstractmethod
    def page_pixel_size(self, number: int) -> tuple[int, int]:
        """(width, height) in pixels that :meth:`render` would produce, without rendering."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the file (or buffer) behind the document; closing it again does nothing, so that
        whoever holds it may close it on the way out whether or not a conversion already did."""

    def select(self, pages: PagesArgument = None) -> list[int]:
        """The page numbers a selection means for this document (see :func:`select_pages`)."""
        return select_pages(pages, self.page_count, self.source)

    def _check_number(self, number: int) -> None:
        if not 1 <= number <= self.page_count:
            raise PageRangeError(
                self.source, f"out of range: the document has {_plural(self.page_count, 'page')}", page=number
            )

    @abc.abstractmethod
    def check_page(self, number: int) -> tuple[int, int]:
        """The page's pixel size, after checking that it exists, has an area and is within the pixel
        limit; raises :class:`DocumentError` otherwise. Nothing is rendered or decoded."""

    def _page_error(self, error: PageError, number: int) -> DocumentError:
        """The loader's error about page ``number`` as this document's error, named by file and page."""
        if isinstance(error, EmptyPageError):
            kind = ZeroSizePageError
        elif isinstance(error, PageTooLargeError):
            kind = PixelLimitError
        else:
            kind = CorruptDocumentError
        return kind(self.source, f"{self._unit} {error.reason}", page=number)

    def __enter__(self) -> Document:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.source!r}, {_plural(self.page_count, 'page')}>"


class PdfDocument(Document):
    """A PDF opened with PyMuPDF; pages render at ``dpi`` without alpha, as DeepSeek-OCR does.

    This process reads the document's structure (page count, page boxes); the pages are drawn by
    :mod:`jina_ocr.runtime.render_worker`, in worker processes that a time and a memory limit stop,
    from ``origin`` (the file's absolute path, or the bytes) and ``password``.
    """

    _unit = "page"

    def __init__(
        self,
        doc: pymupdf.Document,
        source: str,
        dpi: int,
        max_pixels: int,
        origin: str | bytes,
        password: str | None = None,
    ):
        self._doc = doc
        self.source = source
        self.dpi = dpi
        self.max_pixels = max_pixels
        self.page_count = doc.page_count
        self._origin = origin
        self._password = password
        self._token = uuid.uuid4().hex
        render_worker.POOL.warm()

    def page_pixel_size(self, number: int) -> tuple[int, int]:
        with MUPDF_LOCK:
            page = self._load(number)
            try:
                return pdf_page_size(page, self.dpi)
            except PageError as error:
                raise self._page_error(error, number) from None

    def check_page(self, number: int) -> tuple[int, int]:
        with MUPDF_LOCK:
            page = self._load(number)
            try:
                return check_pdf_page_size(page, self.dpi, self.max_pixels, self.source)
            except PageError as error:
                raise self._page_error(error, number) from None

    def _load(self, number: int) -> pymupdf.Page:
        self._check_number(number)
        try:
            return self._doc.load_page(number - 1)
        except Exception as error:
            raise CorruptDocumentError(self.source, f"cannot read the page: {error}", page=number) from error

    def render(self, number: int) -> Image.Image:
        width, height = self.check_page(number)
        job = RenderJob(self._token, self._origin, self._password, number, self.dpi)
        memory = render_worker.RENDER_MEMORY + 3 * width * height
        try:
            size, pixels = render_worker.POOL.draw(job, render_worker.RENDER_SECONDS, memory)
        except DrawingError as error:
            raise self._page_error(DamagedPageError(self.source, error.reason), number) from None
        return Image.frombytes("RGB", size, pixels)

    def close(self) -> None:
        with MUPDF_LOCK:
            if not self._doc.is_closed:
                self._doc.close()


class ImageDocument(Document):
    """An image file opened lazily with Pillow; a multi-page TIFF has one page per frame.

    ``dpi`` does not apply (images keep their pixels); it is kept for a uniform interface.
    """

    _unit = "image"

    def __init__(self, image: Image.Image, source: str, dpi: int, max_pixels: int):
        self._image = image
        self.source = source
        self.dpi = dpi
        self.max_pixels = max_pixels
        self.page_count = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1

    def page_pixel_size(self, number: int) -> tuple[int, int]:
        self._seek(number)
        return upright_size(self._image)

    def check_page(self, number: int) -> tuple[int, int]:
        self._seek(number)
        try:
            return check_image_size(self._image, self.max_pixels, self.source)
        except PageError as error:
            raise self._page_error(error, number) from None

    def _seek(self, number: int) -> None:
        self._check_number(number)
        try:
            self._image.seek(number - 1)
        except (EOFError, OSError, ValueError) as error:
            raise CorruptDocumentError(self.source, f"cannot read the frame: {error}", page=number) from error

    def render(self, number: int) -> Image.Image:
        """The frame as an image of its own: an RGB frame decodes to the open image itself, which the
        next :meth:`_seek` turns into another frame, and a batch renders several frames before the
        model reads any of them."""
        self._seek(number)
        try:
            page = decode_image(self._image, self.max_pixels, self.source)
        except PageError as error:
            raise self._page_error(error, number) from None
        return page.copy() if page is self._image else page

    def close(self) -> None:
        self._image.close()


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def sniff(head: bytes) -> str | None:
    """'pdf', 'image' or None from a file's first bytes (:data:`SNIFF_BYTES` of them); the name's
    suffix, like a server's Content-Type, is never trusted."""
    if starts_like_a_pdf(head):
        return "pdf"
    if starts_like_an_image(head):
        return "image"
    return None


def open_document(
    source: str | os.PathLike | bytes,
    *,
    name: str | None = None,
    password: str | None = None,
    dpi: int = DEFAULT_DPI,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> Document:
    """Open a PDF or image from a path or from bytes.

    ``name`` is how errors refer to the document (default: the path, or ``"<bytes>"``). ``password``
    unlocks an encrypted PDF. ``dpi`` sets the PDF render resolution and ``max_pixels`` the largest
    page bitmap that will be created. Nothing is rendered here: pages render on
    :meth:`Document.render`.
    """
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not 18 <= dpi <= 1200:
        raise UserError(f"dpi must be a whole number from 18 to 1200, not {dpi!r}")
    positive_int("max_pixels", max_pixels)
    if isinstance(source, bytes | bytearray | memoryview):
        data: bytes | None = bytes(source)
        label = name or "<bytes>"
        head = data[:SNIFF_BYTES]
        size = len(data)
    else:
        path = Path(source)
        data = None
        label = name or str(path)
        try:
            info = path.stat()
            if stat.S_ISDIR(info.st_mode):
                raise DocumentError(label, "is a directory, not a document")
            if not stat.S_ISREG(info.st_mode):  # opening a FIFO waits for a writer, a device may act
                raise DocumentError(label, f"is {_special_file_kind(info.st_mode)}, not a regular file")
            size = info.st_size
            with path.open("rb") as handle:
                head = handle.read(SNIFF_BYTES)
        except FileNotFoundError:
            raise DocumentError(label, "no such file") from None
        except NotADirectoryError:
            raise DocumentError(
                label, f"no such file ({_file_above(path)} is a file, not a folder)"
            ) from None
        except PermissionError:
            raise DocumentError(label, "permission denied") from None
        except IsADirectoryError:
            raise DocumentError(label, "is a directory, not a document") from None
        except OSError as error:  # too many open files, an I/O error of the disk, ...
            raise DocumentError(label, _os_error_reason(error)) from None
    if size == 0:
        raise EmptyDocumentError(label, "is empty (0 bytes)")
    kind = sniff(head)
    if kind == "pdf":
        return _open_pdf(source if data is None else data, label, password, dpi, max_pixels)
    if kind == "image":
        return _open_image(source if data is None else data, label, dpi, max_pixels)
    raise UnknownFormatError(label, NOT_A_DOCUMENT)


_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _special_file_kind(mode: int) -> str:
    """What a file that is neither a regular file nor a folder is, for a message."""
    return next((kind for test, kind in _SPECIAL_FILES if test(mode)), "a special file")


def _file_above(path: Path) -> Path:
    """The folder in ``path`` that is a file: why the path is "not a directory"."""
    return next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), path.parent)


def _os_error_reason(error: OSError) -> str:
    """Why a path cannot be read, in the user's words where the error has a common cause."""
    if error.errno == errno.ELOOP:
        return "is a loop of symbolic links"
    if error.errno == errno.ENAMETOOLONG:
        return "the path or a name in it is too long for the file system"
    return f"cannot be read ({error.strerror or error})"


def open_selection(
    source: str | os.PathLike | bytes | Document, pages: PagesArgument = None, **options
) -> tuple[Document, list[int]]:
    """``source`` open and ``pages`` resolved against it; raises :class:`DocumentError` for either,
    leaving nothing open. ``source`` is what :func:`open_document` takes (``options`` as it takes them)
    or a :class:`Document` opened already, which is used as it is: a caller that opened a document to
    check it early (``jina-ocr convert`` opens every input before the model loads) hands it down
    instead of having it opened a second time."""
    document = source if isinstance(source, Document) else open_document(source, **options)
    try:
        return document, document.select(pages)
    except BaseException:
        document.close()
        raise


def _open_pdf(source, label: str, password: str | None, dpi: int, max_pixels: int) -> PdfDocument:
    with MUPDF_LOCK:
        try:
            if isinstance(source, bytes):
                doc = pymupdf.open(stream=source, filetype="pdf")
            else:
                doc = pymupdf.open(os.fspath(source), filetype="pdf")
        except Exception as error:
            raise CorruptDocumentError(
                label, f"is not a readable PDF (damaged or truncated): {error}"
            ) from None
        try:
            if doc.needs_pass:
                if password is None:
                    raise PasswordError(label, "is encrypted: a password is needed to open it")
                if not doc.authenticate(password):
                    raise PasswordError(label, "is encrypted and the password is wrong")
            if doc.is_repaired and not _ends_with_eof_marker(source):
                raise CorruptDocumentError(
                    label, "is truncated: the PDF ends before its end-of-file marker (incomplete download?)"
                )
            if doc.page_count == 0:
                raise EmptyDocumentError(label, "has no pages")
        except DocumentError:
            doc.close()
            raise
    origin = source if isinstance(source, bytes) else os.path.abspath(source)
    return PdfDocument(doc, label, dpi, max_pixels, origin, password)


def _ends_with_eof_marker(source) -> bool:
    """Whether ``%%EOF`` occurs in the last KiB, where every complete PDF (even with trailing junk) has it.

    MuPDF repairs truncated files without complaint, returning whatever pages survived; a repaired
    file that also lacks this marker was cut short, and converting it would silently drop content.
    """
    if isinstance(source, bytes):
        tail = source[-1024:]
    else:
        with open(source, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 1024))
            tail = handle.read()
    return b"%%EOF" in tail


def _open_image(source, label: str, dpi: int, max_pixels: int) -> ImageDocument:
    try:
        image = open_image(source, label)
    except PageError as error:
        raise CorruptDocumentError(label, error.reason) from None
    return ImageDocument(image, label, dpi, max_pixels)


BLANK_TOLERANCE = 4
"""The widest spread of pixel values (0-255, per channel) a page may have and still count as one
without ink: room for rounding in a compressed image, far below any mark a reader could see."""


def is_blank(image: Image.Image) -> bool:
    """Whether a page image holds no ink: every channel keeps within :data:`BLANK_TOLERANCE` of one value.

    Such a page has nothing to read, and a model asked to read it writes whatever its training made
    likely (jina-ocr-tiny, which never saw an empty page, writes ``a``). The document paths (``convert``,
    ``serve``'s documents, ``--endpoint``) give it empty Markdown without running the model. A scan of
    a blank sheet has noise and paper texture wider than the tolerance, so it is read as any page.
    """
    extrema = image.getextrema()
    bands = extrema if isinstance(extrema[0], tuple) else (extrema,)
    return all(high - low <= BLANK_TOLERANCE for low, high in bands)


def find_documents(folder: str | os.PathLike) -> list[Path]:
    """The documents directly inside ``folder`` (by file name ending), sorted by name.

    Every entry but a folder is listed, also one that cannot be opened as a file (a symbolic link
    that loops or leads nowhere, a FIFO): opening it reports why, where leaving it out would drop a
    document the user expects without a word."""
    entries = Path(folder).iterdir()
    return sorted(p for p in entries if not os.path.isdir(p) and p.suffix.lower() in DOCUMENT_SUFFIXES)
