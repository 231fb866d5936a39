"""One synthetic page from a seed, and a folder of pages in olmOCR-Bench layout.

A page seed fixes everything: style (size, margins, faces, columns, table rules, page furniture),
content, layout and tests. Content and tests use separate generators seeded from the page seed, so
changing how tests are chosen never changes a page's text. The PDF is written with fixed metadata
and no random document id, so the same seed gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pymupdf
from PIL import Image

from jina_ocr.runtime.pdf import render_pdf_page
from jina_ocr.synth import checks, fonts, text
from jina_ocr.synth.blocks import Block, Content, stream
from jina_ocr.synth.compose import Composer, Style, placeholder_order
from jina_ocr.synth.degrade import Degradation, degrade
from jina_ocr.synth.tex import typeset

PROFILES = ("dense", "plain", "mixed")
# Named page sizes in PDF points (width, height).
PAGE_SIZES = {
    "a4": (595.28, 841.89),
    "letter": (612.0, 792.0),
    "a5": (419.53, 595.28),
    "b5": (498.9, 708.66),
    "square": (432.0, 432.0),
}


class PageTooSmallError(ValueError):
    """Not even one block fits: the page is too small for the font size."""


@dataclass
class SynthPage:
    """A generated page: image, PDF, ground-truth Markdown and olmOCR-Bench unit tests.

    ``tests`` carry ``pdf`` (``name + ".pdf"``), ``page`` (1) and ``id`` fields, as in an
    olmOCR-Bench JSONL file.
    """

    name: str
    seed: int
    profile: str
    image: Image.Image
    pdf_bytes: bytes
    markdown: str
    tests: list[dict]


def parse_page_size(value: str | tuple[float, float]) -> tuple[float, float]:
    """A page size from a name in :data:`PAGE_SIZES`, ``"WIDTHxHEIGHT"`` in points, or a (width, height) pair."""
    if isinstance(value, tuple):
        width, height = value
    elif value.lower() in PAGE_SIZES:
        width, height = PAGE_SIZES[value.lower()]
    else:
        try:
            width, height = (float(v) for v in value.lower().split("x"))
        except ValueError:
            raise ValueError(
                f"page size {value!r} is neither one of {', '.join(PAGE_SIZES)} nor WIDTHxHEIGHT in points"
            ) from None
    if not (100 <= width <= 2000 and 100 <= height <= 2000):
        raise ValueError(f"page size {width:g}x{height:g} pt is outside 100..2000 pt")
    return float(width), float(height)


def _draw_style(rng: random.Random, size: tuple[float, float], font_size: float | None) -> Style:
    width, height = size
    if font_size is None:
        font_size = round(rng.uniform(8.5, 11.5) * min(1.0, max(0.8, width / 595.0)), 1)
    elif not 4 <= font_size <= 72:
        raise ValueError(f"font size {font_size:g} pt is outside 4..72 pt")
    side = max(rng.uniform(0.07, 0.14) * width, 1.5 * font_size)
    top = max(rng.uniform(0.06, 0.11) * height, 2.5 * font_size)
    bottom = max(rng.uniform(0.06, 0.11) * height, 2.5 * font_size)
    text_width = width - 2 * side
    if text_width < 8 * font_size or height - top - bottom < 6 * font_size:
        raise PageTooSmallError(
            f"a {width:g}x{height:g} pt page has no room for text at {font_size:g} pt type; "
            "use a larger page or a smaller font size"
        )
    columns = 2 if text_width / font_size >= 48 and rng.random() < 0.4 else 1
    body = fonts.face(rng.choice(fonts.FAMILIES))
    headings = body if rng.random() < 0.6 else fonts.face(rng.choice(fonts.FAMILIES))
    return Style(
        width=width,
        height=height,
        margin_left=side,
        margin_right=side,
        margin_top=top,
        margin_bottom=bottom,
        columns=columns,
        gutter=rng.uniform(1.2, 2.5) * font_size,
        body=body,
        headings=headings,
        font_size=font_size,
        line_height=round(rng.uniform(1.2, 1.45), 2),
        # Justified narrow columns of large type open rivers of white: typesetters avoid them, so do we.
        justify=text_width / columns / font_size > 30 and (body.name in fonts.SERIF or rng.random() < 0.3),
        indent=rng.random() < 0.5,
        table_rules=rng.choice(("grid", "booktabs")),
        running_head=text.running_head(rng) if rng.random() < 0.5 else "",
        page_number=rng.randint(1, 400) if rng.random() < 0.6 else 0,
    )


def _column_rects(style: Style, top: float) -> list[pymupdf.Rect]:
    area = style.text_rect
    if style.columns == 1:
        return [pymupdf.Rect(area.x0, top, area.x1, area.y1)]
    col = (area.width - style.gutter) / 2
    return [
        pymupdf.Rect(area.x0, top, area.x0 + col, area.y1),
        pymupdf.Rect(area.x1 - col, top, area.x1, area.y1),
    ]


def _capacity(style: Style) -> float:
    """A generous estimate of how many Markdown characters fill the page, to size the first batch of blocks."""
    area = style.text_rect
    lines = area.height / (style.font_size * style.line_height)
    return 1.6 * lines * area.width / (style.font_size * 0.45)


def generate_page(
    seed: int,
    profile: str = "dense",
    page_size: str | tuple[float, float] = "a4",
    font_size: float | None = None,
    dpi: int = 150,
    degradation: Degradation | None = None,
    name: str | None = None,
) -> SynthPage:
    """Generate one page. ``font_size`` None draws one per page; ``degradation`` None keeps the image clean."""
    if profile not in PROFILES:
        raise ValueError(f"profile {profile!r} is not one of {', '.join(PROFILES)}")
    if not 36 <= dpi <= 600:
        raise ValueError(f"dpi {dpi} is outside 36..600")
    rng = random.Random(f"jina-ocr-synth/page/{seed}")
    if profile == "mixed":
        profile = "dense" if rng.random() < 0.7 else "plain"
    style = _draw_style(rng, parse_page_size(page_size), font_size)
    max_sentences = max(1, min(7, int(_capacity(style) / 1.6 / 450)))
    content = Content(rng, math=profile == "dense", max_sentences=max_sentences)
    column_width = _column_rects(style, 0)[0].width
    max_cols = max(2, min(7, int(column_width / (style.font_size * 4.2))))
    blocks = stream(content, profile, with_title=rng.random() < 0.35, max_table_cols=max_cols)

    candidates: list[Block] = []
    budget = _capacity(style)
    while True:
        candidates += _take(blocks, budget)
        display = [f.display for f in content.formulas]
        tex_pdf, boxes = typeset([(f.latex, f.display) for f in content.formulas])
        composer = Composer(style, boxes, display)
        placed, regions, full = _fit(composer, style, candidates)
        if full:
            break
        budget = _capacity(style) / 2

    if not placed:
        raise PageTooSmallError(
            f"no block fits on a {style.width:g}x{style.height:g} pt page at {style.font_size:g} pt type; "
            "use a larger page or a smaller font size"
        )
    doc = composer.draw(regions)
    page = doc[0]
    composer.place_formulas(page, placeholder_order(placed), tex_pdf)
    composer.decorate(page)
    name = name or f"synth_{seed}"
    doc.set_metadata({"title": name, "producer": "jina-ocr synth", "creator": "jina-ocr synth"})
    doc.subset_fonts()  # the Story embeds whole font files; subsetting cuts a page to about a quarter
    pdf_bytes = doc.tobytes(garbage=3, deflate=True, no_new_id=True)
    image = render(pdf_bytes, dpi)
    if degradation is not None:
        image = degrade(image, seed, degradation)
    markdown = "\n\n".join(block.markdown for block in placed) + "\n"
    tests = checks.page_tests(
        random.Random(f"jina-ocr-synth/tests/{seed}"), placed, content.formulas, style.running_head
    )
    for k, test in enumerate(tests):
        tests[k] = {"pdf": f"{name}.pdf", "page": 1, "id": f"{name}_{k:02d}_{test['type']}", **test}
    return SynthPage(name, seed, profile, image, pdf_bytes, markdown, tests)


def _take(blocks: Iterator[Block], budget: float) -> list[Block]:
    out, size = [], 0
    while size < budget:
        block = next(blocks)
        out.append(block)
        size += len(block.markdown)
    return out


def _fit(composer: Composer, style: Style, candidates: list[Block]):
    """Choose the blocks on the page and the regions (blocks, rectangles) to draw them in.

    Also says whether the page is full (a candidate was left over); if not, the caller adds blocks.
    """
    area = style.text_rect
    head = [b for b in candidates if b.wide]
    body = [b for b in candidates if not b.wide]
    top = area.y0
    regions = []
    if head:
        regions.append((head, [pymupdf.Rect(area.x0, top, area.x1, area.y1)]))
        top += composer.height_of(head, area.width) + style.font_size * 0.5
    rects = _column_rects(style, top)
    # Blocks wider than a column (big tables, long formulas) cannot be on this page.
    body = [b for b in body if composer.fits_width(b, rects[0].width)]
    count = composer.longest_fit(body, rects)
    # On a small page one tall block (a table, a long list) can leave the page nearly empty: skip it.
    for _ in range(3):
        if count > 2 or count == len(body):
            break
        trial = body[:count] + body[count + 1 :]
        better = composer.longest_fit(trial, rects)
        if better <= count:
            break
        body, count = trial, better
    while count and body[count - 1].kind == "heading":
        count -= 1
    placed = head + body[:count]
    regions.append((body[:count], rects))
    return placed, regions, count < len(body)


def render(pdf_bytes: bytes, dpi: int) -> Image.Image:
    """Rasterise page 1 of a PDF to an RGB image, by the page loader's rules (as convert renders)."""
    with pymupdf.open("pdf", pdf_bytes) as doc:
        return render_pdf_page(doc[0], dpi)


def page_seed(seed: int, index: int) -> int:
    """The seed of page ``index`` (1-based) of a run with ``seed``: a hash, so runs with nearby seeds do not overlap."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "big") >> 1


def _make(args: tuple) -> SynthPage:
    index, seed, kwargs = args
    return generate_page(page_seed(seed, index), name=f"page_{index:05d}", **kwargs)


def write_pages(
    out_dir: str | Path,
    n: int,
    seed: int = 0,
    *,
    start: int = 1,
    jobs: int = 1,
    **kwargs,
) -> list[Path]:
    """Write pages ``start .. start+n-1`` to ``out_dir`` as page_NNNNN.png/.pdf/.md plus one tests.jsonl.

    ``tests.jsonl`` is rewritten with this call's pages; to shard a large run, give each shard its own
    folder and ``start`` (page k of a run is the same page whichever shard makes it).
    ``kwargs`` go to :func:`generate_page` (profile, page_size, font_size, dpi, degradation). The
    result does not depend on ``jobs``: pages are generated independently and written in order.
    """
    if n < 1 or start < 1 or jobs < 1:
        raise ValueError(f"n, start and jobs must be at least 1, got n={n}, start={start}, jobs={jobs}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = [(index, seed, kwargs) for index in range(start, start + n)]
    written = []
    with open(out / "tests.jsonl", "w", encoding="utf-8") as jsonl:
        if jobs > 1:
            with ProcessPoolExecutor(jobs) as pool:
                pages = pool.map(_make, work, chunksize=1)
                written = [_write(out, page, jsonl) for page in pages]
        else:
            written = [_write(out, _make(item), jsonl) for item in work]
    return written


def _write(out: Path, page: SynthPage, jsonl) -> Path:
    stem = out / page.name
    page.image.save(stem.with_suffix(".png"), optimize=False)
    stem.with_suffix(".pdf").write_bytes(page.pdf_bytes)
    stem.with_suffix(".md").write_text(page.markdown, encoding="utf-8")
    for test in page.tests:
        jsonl.write(json.dumps(test, ensure_ascii=False) + "\n")
    return stem.with_suffix(".png")
