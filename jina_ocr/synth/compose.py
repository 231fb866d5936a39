"""Lay blocks out on one PDF page with PyMuPDF's Story engine and put the TeX formulas in place.

The composer decides which blocks are on the page: the longest prefix of the block stream that fits
(one column, or two columns under an optional full-width title), found by binary search because a
Story layout is cheap and fitting is monotone in the number of blocks. A block either fits whole or
is left out, so the ground truth is exactly the blocks on the page.

Formulas are laid out as transparent placeholder images of the typeset formula's size (inline ones
as tall as the formula's height above the baseline, because the Story puts an image's bottom on the
text baseline); after drawing, each placeholder is removed and the TeX page is copied in as vector
graphics with its baseline on the text baseline.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pymupdf
from PIL import Image

from jina_ocr.synth.blocks import Block
from jina_ocr.synth.fonts import Face
from jina_ocr.synth.tex import TEX_FONT_SIZE, Box

_MARK = re.compile("\x00(\\d+)\x00")
_BLANK = "blank.png"


def _blank_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGBA", (1, 1), (255, 255, 255, 0)).save(buffer, "PNG")
    return buffer.getvalue()


_BLANK_BYTES = _blank_png()


@dataclass(frozen=True)
class Style:
    """Everything about a page's look that is drawn once per page from the seed."""

    width: float
    height: float
    margin_left: float
    margin_right: float
    margin_top: float
    margin_bottom: float
    columns: int
    gutter: float
    body: Face
    headings: Face
    font_size: float
    line_height: float
    justify: bool
    indent: bool
    table_rules: str  # "grid" or "booktabs"
    running_head: str  # empty for none
    page_number: int  # 0 for none

    @property
    def text_rect(self) -> pymupdf.Rect:
        return pymupdf.Rect(
            self.margin_left,
            self.margin_top,
            self.width - self.margin_right,
            self.height - self.margin_bottom,
        )

    def css(self) -> str:
        """The page's stylesheet; sizes in em so one font size scales the whole page."""
        cells = (
            "td, th {border: 0.5pt solid #000;}"
            if self.table_rules == "grid"
            else (
                ".first {border-top: 1pt solid #000;} .headend {border-bottom: 0.6pt solid #000;}"
                " .last {border-bottom: 1pt solid #000;}"
            )
        )
        return f"""{self.body.css()}
{self.headings.css() if self.headings is not self.body else ""}
body {{font-family: '{self.body.name}'; font-size: {self.font_size:.2f}pt; line-height: {self.line_height:.2f};
  text-align: {"justify" if self.justify else "left"}; margin: 0;}}
p {{margin: 0 0 {0.1 if self.indent else 0.6}em 0; text-indent: {1.5 if self.indent else 0}em;}}
h1, h2, h3 {{font-family: '{self.headings.name}'; font-weight: bold; text-align: left; line-height: 1.2;}}
h1 {{font-size: 1.55em; text-align: center; margin: 0 0 0.5em 0;}}
h2 {{font-size: 1.22em; margin: 0.8em 0 0.4em 0;}}
h3 {{font-size: 1.07em; margin: 0.7em 0 0.3em 0;}}
p.authors {{text-align: center; text-indent: 0; font-style: italic; margin: 0 0 1.2em 0;}}
p.eq {{text-align: center; text-indent: 0; margin: 0.5em 0 0.7em 0;}}
p.caption {{text-indent: 0; font-size: 0.9em; margin: 0.7em 0 0.3em 0; text-align: left;}}
table {{border-collapse: collapse; font-size: 0.88em; margin: 0 0 0.9em 0; line-height: 1.25;}}
td, th {{padding: 0.12em 0.5em; text-align: left;}}
th {{font-weight: bold;}}
{cells}
ul, ol {{margin: 0 0 0.6em 0; padding-left: 1.6em;}}
li {{margin: 0 0 0.15em 0;}}
"""


def _archive(style: Style) -> pymupdf.Archive:
    archive = pymupdf.Archive()
    for face in {style.body.name: style.body, style.headings.name: style.headings}.values():
        for name, data in face.files.values():
            archive.add(data, name)
    archive.add(_BLANK_BYTES, _BLANK)
    return archive


def _with_placeholders(html: str, boxes: Sequence[Box], display: Sequence[bool], scale: float) -> str:
    def replace(match: re.Match) -> str:
        box = boxes[int(match.group(1))]
        height = box.height + box.depth if display[int(match.group(1))] else box.height
        return f'<img src="{_BLANK}" style="width:{box.width * scale:.3f}pt;height:{height * scale:.3f}pt">'

    return _MARK.sub(replace, html)


class Composer:
    """Fits and draws blocks for one page style; formulas must be typeset before blocks are fitted."""

    def __init__(self, style: Style, boxes: Sequence[Box], display: Sequence[bool]) -> None:
        self.style = style
        self.boxes = boxes
        self.display = display
        self.scale = style.font_size / TEX_FONT_SIZE
        self.css = style.css()
        self.archive = _archive(style)

    def _story(self, blocks: Sequence[Block]) -> pymupdf.Story:
        html = "".join(_with_placeholders(b.html, self.boxes, self.display, self.scale) for b in blocks)
        return pymupdf.Story(html, user_css=self.css, archive=self.archive)

    def height_of(self, blocks: Sequence[Block], width: float) -> float:
        """The height the blocks take in one column of this width (they must fit in 10 000 pt)."""
        more, filled = self._story(blocks).place(pymupdf.Rect(0, 0, width, 10_000))
        return filled[3] if not more else float("inf")

    def fits_width(self, block: Block, width: float) -> bool:
        """Whether a block sits in a column this wide without squeezing.

        Formulas cannot break, so their box must fit. A table must need no more height than at
        unlimited width, i.e. no cell wraps (the Story reports the full rectangle width as used, so
        height is the only honest measure).
        """
        if any(self.boxes[i].width * self.scale > width for i in block.formulas):
            return False
        if block.table is None:
            return True
        return self.height_of([block], width) <= self.height_of([block], 5_000) + 0.5

    def fits(self, blocks: Sequence[Block], rects: Sequence[pymupdf.Rect]) -> bool:
        story = self._story(blocks)
        for rect in rects:
            more, _ = story.place(rect)
            if not more:
                return True
            story.draw(None)  # consumes what was placed, so the next place() continues after it
        return False

    def longest_fit(self, blocks: Sequence[Block], rects: Sequence[pymupdf.Rect]) -> int:
        """How many leading blocks fit into the rectangles (filled in order), by binary search."""
        low, high = 0, len(blocks)
        while low < high:
            mid = (low + high + 1) // 2
            if self.fits(blocks[:mid], rects):
                low = mid
            else:
                high = mid - 1
        return low

    def draw(self, regions: Sequence[tuple[Sequence[Block], Sequence[pymupdf.Rect]]]) -> pymupdf.Document:
        """Draw each region's blocks into its rectangles and return the one-page PDF (formulas not yet in)."""
        buffer = io.BytesIO()
        writer = pymupdf.DocumentWriter(buffer)
        device = writer.begin_page(pymupdf.Rect(0, 0, self.style.width, self.style.height))
        for blocks, rects in regions:
            if not blocks:
                continue
            story = self._story(blocks)
            for rect in rects:
                more, _ = story.place(rect)
                story.draw(device)
                if not more:
                    break
        writer.end_page()
        writer.close()
        return pymupdf.open("pdf", buffer.getvalue())

    def place_formulas(self, page: pymupdf.Page, order: Sequence[int], tex_pdf: pymupdf.Document) -> None:
        """Replace the placeholders, in drawing order, by the typeset formulas (vector, baseline-aligned)."""
        spots = [pymupdf.Rect(info["bbox"]) for info in page.get_image_info()]
        if len(spots) != len(order):
            raise RuntimeError(f"found {len(spots)} formula placeholders on the page, expected {len(order)}")
        for rect in spots:
            page.add_redact_annot(rect, fill=False)
        page.apply_redactions(
            images=pymupdf.PDF_REDACT_IMAGE_REMOVE,
            graphics=pymupdf.PDF_REDACT_LINE_ART_NONE,
            text=pymupdf.PDF_REDACT_TEXT_NONE,
        )
        for index, rect in zip(order, spots, strict=True):
            box = self.boxes[index]
            if not self.display[index]:
                baseline = rect.y1
                rect = pymupdf.Rect(
                    rect.x0, baseline - box.height * self.scale, rect.x1, baseline + box.depth * self.scale
                )
            page.show_pdf_page(rect, tex_pdf, index, keep_proportion=False)

    def decorate(self, page: pymupdf.Page) -> None:
        """Running head and page number: on the image, never in the ground truth (the model omits them)."""
        style = self.style
        size = style.font_size * 0.8
        page.insert_font(fontname="F0", fontbuffer=style.body.files["italic"][1])
        page.insert_font(fontname="F1", fontbuffer=style.body.files["regular"][1])
        if style.running_head:
            y = style.margin_top * 0.55
            width = style.width - style.margin_left - style.margin_right
            natural = pymupdf.Font(fontbuffer=style.body.files["italic"][1]).text_length(
                style.running_head, size
            )
            page.insert_text(
                (style.margin_left, y),
                style.running_head,
                fontsize=min(size, size * width / natural),
                fontname="F0",
            )
            page.draw_line(
                (style.margin_left, y + size * 0.45),
                (style.width - style.margin_right, y + size * 0.45),
                width=0.4,
            )
        if style.page_number:
            label = str(style.page_number)
            width = pymupdf.Font(fontbuffer=style.body.files["regular"][1]).text_length(label, fontsize=size)
            y = style.height - style.margin_bottom * 0.45
            page.insert_text(((style.width - width) / 2, y), label, fontsize=size, fontname="F1")


def placeholder_order(blocks: Sequence[Block]) -> list[int]:
    """Formula indices in the order their placeholders are drawn (block order, then text order)."""
    return [int(m) for block in blocks for m in _MARK.findall(block.html)]
