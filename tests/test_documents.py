"""jina_ocr.runtime.documents: real PDFs and scans in, RGB pages out, and every user-facing failure named."""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from hostile_pdfs import pdf_of
from PIL import Image

from jina_ocr.errors import UserError
from jina_ocr.runtime import render_worker
from jina_ocr.runtime.documents import (
    BLANK_TOLERANCE,
    CorruptDocumentError,
    DocumentError,
    EmptyDocumentError,
    PageRangeError,
    PageSelection,
    PageSelectionError,
    PasswordError,
    PixelLimitError,
    UnknownFormatError,
    ZeroSizePageError,
    find_documents,
    is_blank,
    open_document,
    select_pages,
)
from jina_ocr.runtime.pdf import DEFAULT_DPI


def pdf_with_pages(count: int, size=(612, 792)) -> bytes:
    document = pymupdf.open()
    for number in range(1, count + 1):
        page = document.new_page(width=size[0], height=size[1])
        page.insert_text((72, 72), f"Page {number}", fontsize=24)
    return document.tobytes()


def pdf_with_a_blank_second_page() -> bytes:
    """Three pages, the middle one left empty, as the back of a printed sheet often is."""
    document = pymupdf.open()
    for number in (1, 2, 3):
        page = document.new_page(width=300, height=200)
        if number != 2:
            page.insert_text((30, 60), f"Page {number}", fontsize=24)
    return document.tobytes()


def handwritten_pdf(pages_dict: bytes, page_dicts: list[bytes]) -> bytes:
    """A PDF written byte by byte, for page trees that PyMuPDF's writer would refuse to produce."""
    kids = " ".join(f"{3 + i} 0 R" for i in range(len(page_dicts))).encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d " % len(page_dicts) + pages_dict + b" >>",
        *(b"<< /Type /Page /Parent 2 0 R " + d + b" >>" for d in page_dicts),
    ]
    return pdf_of(objects, version=b"1.4")


def damaged_pdf(kind: str) -> bytes:
    """Three pages whose page 2 MuPDF draws only partly, with a warning: garbage under /FlateDecode in
    its content stream ("content"), or in the data of an image it shows ("image")."""
    document = pymupdf.open()
    for number in (1, 2, 3):
        document.new_page(width=300, height=200).insert_text((20, 60), f"Page {number}", fontsize=18)
    page = document[1]
    if kind == "content":
        xref = page.get_contents()[0]
    else:
        picture = io.BytesIO()
        Image.new("RGB", (40, 30), (200, 10, 10)).save(picture, format="PNG")
        xref = page.insert_image(pymupdf.Rect(20, 80, 100, 140), stream=picture.getvalue())
        document.xref_set_key(xref, "DecodeParms", "null")
    document.update_stream(xref, b"\x13 this is not deflate data " * 20, compress=False)
    document.xref_set_key(xref, "Filter", "/FlateDecode")
    return document.tobytes()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares its size but holds no pixel data: decoding it would fail."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def image_bytes(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


# -- page selections ---------------------------------------------------------------------------------


def test_page_selection_parses_ranges_open_ends_and_single_pages():
    selection = PageSelection.parse("1-3,7,10-")
    assert selection.resolve(12, "a.pdf") == [1, 2, 3, 7, 10, 11, 12]
    assert PageSelection.parse("-2, 4").resolve(5, "a.pdf") == [1, 2, 4]
    assert PageSelection.parse("3,1,2-3").resolve(3, "a.pdf") == [1, 2, 3]  # document order, once each


@pytest.mark.parametrize("text", ["", "a", "1-x", "3-1", "0", "1,,2", "1-2-3", "-"])
def test_malformed_page_selection_is_a_user_error(text):
    with pytest.raises(PageSelectionError) as caught:
        PageSelection.parse(text)
    assert isinstance(caught.value, UserError)
    assert repr(text) in str(caught.value)


def test_page_past_the_end_names_the_file_page_and_length():
    with pytest.raises(PageRangeError, match=r"^a\.pdf, page 10: out of range: the document has 8 pages$"):
        PageSelection.parse("1-3,10-").resolve(8, "a.pdf")
    with pytest.raises(PageRangeError, match="page 9"):
        select_pages([2, 9], 8, "a.pdf")
    with pytest.raises(PageSelectionError):
        select_pages([0], 8, "a.pdf")


# -- PDFs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, size",
    [
        ("olmo2-pg4.pdf", (1224, 1584)),  # US Letter at 144 dpi
        ("mathfuncs.pdf", (1584, 1224)),  # landscape
        ("blank_book_pg1.pdf", (548, 972)),
    ],
)
def test_real_pdfs_render_at_144_dpi_by_default(fixtures_dir, name, size):
    with open_document(fixtures_dir / "olmocr" / name) as document:
        assert document.page_count == 1
        assert document.page_pixel_size(1) == size
        image = document.render(1)
    assert image.mode == "RGB" and image.size == size


def test_dpi_is_configurable_and_pixel_size_matches_the_render(fixtures_dir):
    path = fixtures_dir / "olmocr" / "earnings.pdf"
    for dpi in (72, 100, 150):
        with open_document(path, dpi=dpi) as document:
            assert document.render(1).size == document.page_pixel_size(1)
    with open_document(path, dpi=72) as document:
        assert document.render(1).size == (612, 792)


def test_real_pdf_page_has_ink(fixtures_dir):
    with open_document(fixtures_dir / "olmocr" / "earnings.pdf") as document:
        pixels = np.asarray(document.render(1).convert("L"))
    assert pixels.min() < 64 and np.median(pixels) > 200  # dark text on white paper


def test_a_page_is_blank_only_when_every_channel_keeps_within_the_tolerance():
    white = Image.new("RGB", (300, 200), "white")
    assert is_blank(white) and is_blank(Image.new("RGB", (1, 1), "black"))
    assert is_blank(Image.new("L", (20, 20), 128))
    faint, mark = white.copy(), white.copy()
    faint.putpixel((150, 100), (255 - BLANK_TOLERANCE,) * 3)
    mark.putpixel((150, 100), (255, 255, 254 - BLANK_TOLERANCE))  # one pixel, in the last channel only
    assert is_blank(faint) and not is_blank(mark)
    with open_document(pdf_with_a_blank_second_page()) as document:
        assert [is_blank(document.render(number)) for number in (1, 2, 3)] == [False, True, False]


def test_pdf_from_bytes_renders_the_requested_page():
    with open_document(pdf_with_pages(3), name="three.pdf") as document:
        assert document.page_count == 3 and document.source == "three.pdf"
        assert document.select("2-") == [2, 3]
        first, third = np.asarray(document.render(1)), np.asarray(document.render(3))
    assert not np.array_equal(first, third)


def test_truncated_pdf_is_reported_as_truncated(fixtures_dir, tmp_path):
    data = (fixtures_dir / "olmocr" / "olmo2-pg4.pdf").read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptDocumentError, match=r"cut\.pdf: is truncated"):
        open_document(cut)


def test_garbage_after_pdf_header_is_corrupt():
    with pytest.raises(CorruptDocumentError, match="^junk.pdf: is not a readable PDF"):
        open_document(b"%PDF-1.7\n" + bytes(range(256)) * 4, name="junk.pdf")


def test_encrypted_pdf_needs_the_right_password():
    document = pymupdf.open(stream=pdf_with_pages(2), filetype="pdf")
    data = document.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="s3cret", owner_pw="owner")
    with pytest.raises(PasswordError, match="^locked.pdf: is encrypted: a password is needed"):
        open_document(data, name="locked.pdf")
    with pytest.raises(PasswordError, match="^locked.pdf: is encrypted and the password is wrong"):
        open_document(data, name="locked.pdf", password="guess")
    with open_document(data, name="locked.pdf", password="s3cret") as unlocked:
        assert unlocked.page_count == 2
        assert unlocked.render(2).size == (1224, 1584)


def test_empty_file_and_pdf_without_pages():
    with pytest.raises(EmptyDocumentError, match=r"^e\.pdf: is empty \(0 bytes\)$"):
        open_document(b"", name="e.pdf")
    with pytest.raises(EmptyDocumentError, match="^nopages.pdf: has no pages$"):
        open_document(handwritten_pdf(b"/MediaBox [0 0 612 792]", []), name="nopages.pdf")


def test_zero_size_page_is_named_and_other_pages_still_render():
    data = handwritten_pdf(
        b"/MediaBox [0 0 612 792]", [b"", b"/MediaBox [0 0 0 0]", b"/MediaBox [0 0 300 0]"]
    )
    with open_document(data, name="z.pdf") as document:
        assert document.page_count == 3
        assert document.render(1).size == (1224, 1584)  # inherits the MediaBox of its parent
        for number in (2, 3):
            with pytest.raises(ZeroSizePageError, match=rf"^z\.pdf, page {number}: page has zero size"):
                document.render(number)


def test_page_out_of_range_on_render():
    with open_document(pdf_with_pages(2), name="two.pdf") as document:
        with pytest.raises(
            PageRangeError, match=r"^two\.pdf, page 3: out of range: the document has 2 pages"
        ):
            document.render(3)
        with pytest.raises(PageRangeError, match="page 3"):
            document.select("2-3")


@pytest.mark.parametrize("kind", ["content", "image"])
def test_a_page_mupdf_reports_damage_on_is_corrupt_and_the_others_render(kind):
    with open_document(damaged_pdf(kind), name="damaged.pdf") as document:
        with pytest.raises(
            CorruptDocumentError, match=r"^damaged\.pdf, page 2: page is damaged: MuPDF reports .*zlib error"
        ):
            document.render(2)
        assert document.render(3).size == document.render(1).size == (600, 400)


def test_pdf_page_over_pixel_limit_is_refused_before_rendering(monkeypatch):
    renders = []
    real = render_worker.POOL.draw
    monkeypatch.setattr(render_worker.POOL, "draw", lambda *a, **k: renders.append(1) or real(*a, **k))
    # 14400 pt is the largest page PDF allows: 28800 x 28800 px at 144 dpi, 10x the default limit.
    with open_document(pdf_with_pages(1, size=(14400, 14400)), name="poster.pdf") as document:
        with pytest.raises(
            PixelLimitError, match=r"^poster\.pdf, page 1: page would be 28800x28800"
        ) as caught:
            document.render(1)
        assert f"at {DEFAULT_DPI} dpi" in str(caught.value)
        assert renders == []
    with open_document(pdf_with_pages(1, size=(14400, 14400)), dpi=36) as smaller:
        assert smaller.render(1).size == (7200, 7200)
        assert renders == [1]


# -- images ----------------------------------------------------------------------------------------


def test_real_scans_open_as_rgb(fixtures_dir):
    with open_document(fixtures_dir / "tesseract" / "phototest.tif") as tiff:
        assert tiff.page_count == 1
        image = tiff.render(1)
    assert image.mode == "RGB" and image.size == (640, 480)
    with open_document(fixtures_dir / "tesseract" / "phototest-rotated-L.png") as png:
        assert png.render(1).size == (480, 640)


def test_image_formats_from_bytes(fixtures_dir):
    page = Image.open(fixtures_dir / "tesseract" / "phototest.tif").convert("RGB")
    for fmt in ("PNG", "JPEG", "WEBP", "BMP", "TIFF"):
        with open_document(image_bytes(page, fmt), name=f"page.{fmt.lower()}") as document:
            rendered = document.render(1)
        assert rendered.size == (640, 480) and rendered.mode == "RGB", fmt


def test_multi_page_tiff_has_one_page_per_frame(tmp_path):
    frames = [Image.new("L", (300 + 10 * i, 200), 40 * i) for i in range(3)]
    path = tmp_path / "scan.tiff"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    with open_document(path) as document:
        assert document.page_count == 3
        assert [document.render(n).size for n in document.select("3,1")] == [(300, 200), (320, 200)]
        assert document.render(2).getpixel((0, 0)) == (40, 40, 40)
        with pytest.raises(PageRangeError, match="scan.tiff, page 4"):
            document.render(4)


def test_exif_orientation_is_applied():
    image = Image.new("RGB", (400, 100), "white")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when displayed
    data = image_bytes(image, "JPEG", exif=exif.tobytes())
    with open_document(data, name="photo.jpg") as document:
        assert document.page_pixel_size(1) == (100, 400)
        assert document.render(1).size == (100, 400)


def test_transparency_becomes_white_paper_and_16_bit_keeps_contrast():
    clear = Image.new("RGBA", (20, 20), (0, 0, 0, 0))
    with open_document(image_bytes(clear, "PNG"), name="clear.png") as document:
        assert document.render(1).getpixel((5, 5)) == (255, 255, 255)
    ramp = np.tile(np.linspace(0, 65535, 64, dtype=np.uint16), (8, 1))
    with open_document(image_bytes(Image.fromarray(ramp), "PNG"), name="deep.png") as document:
        grey = np.asarray(document.render(1))[0, :, 0]
    assert grey[0] == 0 and grey[-1] == 255 and np.all(np.diff(grey.astype(int)) >= 0)


def test_image_over_pixel_limit_is_refused_from_its_header():
    # 9000 x 9000 = 81 M pixels: over our 80 M default, and this PNG has no pixel data at all, so
    # the error proves that the size was checked before any decoding.
    with open_document(png_header_only(9000, 9000), name="huge.png") as document:
        with pytest.raises(PixelLimitError, match=r"^huge\.png, page 1: image would be 9000x9000"):
            document.render(1)
    # 400 M pixels, past Pillow's own decompression-bomb error (2 x 89.5 M): our message, no warning first.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with open_document(png_header_only(20000, 20000), name="bomb.png") as document:
            with pytest.raises(
                PixelLimitError, match=r"^bomb\.png, page 1: image would be 20000x20000 = 400,"
            ):
                document.render(1)


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])  # TIFF checks Pillow's limit again when it decodes
def test_the_pixel_limit_may_be_raised_past_pillows_own(monkeypatch, fmt):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow would refuse 60 x 60 = 3,600 pixels
    data = image_bytes(Image.new("RGB", (60, 60), (10, 200, 30)), fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with open_document(data, name=f"scan.{fmt.lower()}") as document:
            assert document.render(1).getpixel((5, 5)) == (10, 200, 30)
        with open_document(data, name=f"scan.{fmt.lower()}", max_pixels=3000) as document:
            with pytest.raises(PixelLimitError, match="60x60 = 3,600 pixels, over the limit of 3,000"):
                document.render(1)
    assert Image.MAX_IMAGE_PIXELS == 1000  # Pillow's setting is back as it was


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")  # Pillow warns as it reads the cut TIFF
def test_truncated_images_are_corrupt(fixtures_dir):
    png = (fixtures_dir / "tesseract" / "phototest-rotated-L.png").read_bytes()
    with open_document(png[: len(png) * 2 // 3], name="cut.png") as document:  # header intact, data cut
        with pytest.raises(
            CorruptDocumentError,
            match=r"^cut\.png, page 1: image cannot be decoded as PNG: image file is truncated",
        ):
            document.render(1)
    tiff = (fixtures_dir / "tesseract" / "eurotext.tif").read_bytes()  # its directory is at the end
    with pytest.raises(
        CorruptDocumentError, match=r"^cut\.tif: is not a readable image: .* \(damaged or truncated\)$"
    ):
        open_document(tiff[: len(tiff) // 3], name="cut.tif")


# -- not documents -----------------------------------------------------------------------------------


def test_unknown_format_missing_file_and_folder(fixtures_dir, tmp_path):
    notes = tmp_path / "notes.pdf"  # the suffix lies; the bytes decide
    notes.write_text("just some text\n")
    with pytest.raises(UnknownFormatError, match=r"notes\.pdf: is neither a PDF nor a PNG, JPEG"):
        open_document(notes)
    with pytest.raises(UnknownFormatError):
        open_document((fixtures_dir / "olmocr" / "tests.jsonl").read_bytes(), name="tests.jsonl")
    with pytest.raises(DocumentError, match=r"missing\.pdf: no such file"):
        open_document(tmp_path / "missing.pdf")
    with pytest.raises(DocumentError, match="is a directory"):
        open_document(tmp_path)


def test_options_are_validated():
    with pytest.raises(UserError, match="dpi"):
        open_document(pdf_with_pages(1), dpi=0)
    with pytest.raises(UserError, match="max_pixels"):
        open_document(pdf_with_pages(1), max_pixels=0)


def test_find_documents_lists_documents_by_name(tmp_path):
    for name in ("b.PDF", "a.png", "c.txt", "d.tiff"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "sub.pdf").mkdir()
    assert [p.name for p in find_documents(tmp_path)] == ["a.png", "b.PDF", "d.tiff"]


def test_the_shipped_samples_are_what_their_script_builds(make_sample):
    samples = Path(make_sample.__file__).parent
    shipped = (samples / "sample.pdf").read_bytes()
    assert len(shipped) < 200_000
    texts = []
    for data in (shipped, make_sample.build()):
        with pymupdf.open(stream=data, filetype="pdf") as document:
            texts.append([page.get_text() for page in document])
    assert texts[0] == texts[1] and len(texts[0]) == 2
    assert "Visits by month" in texts[0][0] and "September" in texts[0][0] and "Forecast" in texts[0][1]
    # The main job's page prints exactly the text of its Markdown.
    with pymupdf.open(stream=(samples / "page.pdf").read_bytes(), filetype="pdf") as shipped_page:
        with pymupdf.open(stream=make_sample.build_page(), filetype="pdf") as built_page:
            assert shipped_page[0].get_text() == built_page[0].get_text()
            assert shipped_page[0].rect.width < 420  # A5, the format the bundled model reads
            printed = shipped_page[0].get_text().split()
    assert printed == make_sample.SHORT_MARKDOWN.replace("# ", "", 1).split()
