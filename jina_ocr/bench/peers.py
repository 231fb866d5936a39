"""Reference systems run on the benchmark's own pages: Tesseract, RapidOCR and pymupdf4llm.

Scores mean little without points of comparison, so the scorer can read the same PDF pages with
three engines that install offline: Tesseract (Debian's ``tesseract-ocr``) and RapidOCR (the
``rapidocr`` wheel, which ships its ONNX models) OCR a rendering of the page; pymupdf4llm reads
the PDF's text layer and does no OCR at all, the reference line of what the embedded text alone
is worth (nothing on a scan). The OCR engines produce plain text, so they show what reading the
words alone is worth on each test type. Outputs are written in the olmOCR-Bench layout and scored
like any other system.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

from jina_ocr.errors import UserError

PEERS = ("tesseract", "rapidocr", "pymupdf4llm")
# Pages are rendered so that their longest side is about this many pixels: a fixed dpi would make a
# small page a few hundred pixels wide and a poster tens of thousands. The dpi stays within 72-300.
TARGET_LONGEST_SIDE = 2000
MIN_DPI, MAX_DPI = 72, 300


def unavailable(name: str) -> str | None:
    """Why this peer cannot run here (a missing program or package), or None when it can."""
    if name == "tesseract":
        if shutil.which("tesseract") is None:
            return "the tesseract program is not installed (Debian: apt-get install tesseract-ocr)"
        return None
    if name == "rapidocr":
        try:
            import rapidocr  # noqa: F401
        except ImportError:
            return "the rapidocr package is not installed (pip install rapidocr onnxruntime)"
        return None
    if name == "pymupdf4llm":
        try:
            import pymupdf4llm  # noqa: F401
        except ImportError:
            return "the pymupdf4llm package is not installed (pip install pymupdf4llm)"
        return None
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")


def page_dpi(width_pt: float, height_pt: float) -> float:
    """The rendering resolution that gives the page's longest side about 2,000 px, within 72-300 dpi."""
    longest_inches = max(width_pt, height_pt) / 72.0
    return min(MAX_DPI, max(MIN_DPI, TARGET_LONGEST_SIDE / longest_inches))


def render_page(pdf: Path, page: int):
    """One PDF page (1-based) as an RGB PIL image, at :func:`page_dpi`."""
    import pymupdf

    from jina_ocr.runtime.pdf import render_pdf_page

    with pymupdf.open(pdf) as doc:
        if not 1 <= page <= doc.page_count:
            raise ValueError(f"{pdf}: page {page} does not exist (the PDF has {doc.page_count})")
        rect = doc[page - 1].rect
        return render_pdf_page(doc[page - 1], round(page_dpi(rect.width, rect.height)), max_pixels=None)


def check_pages(tests: list[dict], pdf_root: Path) -> None:
    """Refuse, before any engine runs, a test whose PDF is missing or unreadable or lacks its page."""
    import pymupdf

    counts: dict[str, int] = {}
    for test in tests:
        pdf, page = test["pdf"], test.get("page", 1)
        source = Path(pdf_root) / pdf
        if pdf not in counts:
            if not source.is_file():
                raise UserError(
                    f"{source}: PDF named by the tests is missing "
                    "(set --pdfs to the folder the tests' PDF paths are relative to)"
                )
            try:
                with pymupdf.open(source) as doc:
                    counts[pdf] = doc.page_count
            except (pymupdf.FileDataError, RuntimeError) as error:
                raise UserError(f"{source}: not a readable PDF ({error})") from None
        if page > counts[pdf]:
            raise UserError(
                f"test {test['id']!r}: page {page} of {pdf} does not exist (the PDF has {counts[pdf]})"
            )


def pymupdf4llm_text(pdf: Path, page: int) -> str:
    """pymupdf4llm's Markdown of one page's text layer (no OCR: a scanned page gives nothing)."""
    import pymupdf4llm

    return pymupdf4llm.to_markdown(str(pdf), pages=[page - 1], use_ocr=False, show_progress=False)


def tesseract_text(image, language: str = "eng") -> str:
    """Tesseract's text for an image (automatic page segmentation, which handles columns)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    done = subprocess.run(
        ["tesseract", "stdin", "stdout", "-l", language],
        input=buffer.getvalue(),
        capture_output=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tesseract failed: {done.stderr.decode(errors='replace')[-300:]}")
    return done.stdout.decode("utf-8", errors="replace")


_RAPIDOCR = None


def _rapidocr_engine():
    global _RAPIDOCR
    if _RAPIDOCR is None:
        import logging

        from rapidocr import RapidOCR

        _RAPIDOCR = RapidOCR()
        # The engine logs every model file it opens at INFO; keep the scorer's output readable.
        logging.getLogger("RapidOCR").setLevel(logging.WARNING)
    return _RAPIDOCR


def rapidocr_text(image) -> str:
    """RapidOCR's text lines for an image, in reading order (see :func:`reading_order`)."""
    import numpy as np

    result = _rapidocr_engine()(np.asarray(image))
    if result.boxes is None or not result.txts:
        return ""
    items = []
    for box, text in zip(result.boxes, result.txts, strict=True):
        xs = [float(point[0]) for point in box]
        ys = [float(point[1]) for point in box]
        items.append((min(xs), min(ys), max(xs), max(ys), text))
    return "\n".join(item[4] for item in reading_order(items)) + "\n"


def reading_order(items: list[tuple[float, float, float, float, str]]) -> list[tuple]:
    """Order text boxes ``(x0, y0, x1, y1, text)`` by recursive XY-cut.

    The boxes are split at the widest empty horizontal or vertical band between them, and each
    side is ordered the same way (top before bottom, left before right). A column gutter is wider
    than the space between lines, so a two-column page is read column by column, not line by line
    across both columns, as a plain top-to-bottom sort would.
    """
    if len(items) <= 1:
        return list(items)
    best = None  # (gap, axis, split position)
    for axis in (1, 0):  # horizontal cut first on ties
        lo, hi = axis, axis + 2
        ordered = sorted(items, key=lambda item: item[lo])
        reach = ordered[0][hi]
        for item in ordered[1:]:
            gap = item[lo] - reach
            if gap > 0 and (best is None or gap > best[0]):
                best = (gap, axis, item[lo])
            reach = max(reach, item[hi])
    if best is None:
        return sorted(items, key=lambda item: ((item[1] + item[3]) / 2, item[0]))
    _, axis, cut = best
    first = [item for item in items if item[axis] < cut]
    second = [item for item in items if item[axis] >= cut]
    return reading_order(first) + reading_order(second)


def run_peer(name: str, tests: list[dict], pdf_root: Path, out_dir: Path) -> Path:
    """Read every page the tests refer to with one peer, writing ``{stem}_pg{page}_repeat1.md`` files.

    Returns the folder of outputs (``out_dir / name``), ready for :func:`scoring.score_outputs`.
    """
    reason = unavailable(name)
    if reason:
        raise RuntimeError(f"{name}: {reason}")
    check_pages(tests, pdf_root)
    target = Path(out_dir) / name
    for pdf, page in dict.fromkeys((t["pdf"], t.get("page", 1)) for t in tests):
        source = Path(pdf_root) / pdf
        if name == "pymupdf4llm":
            text = pymupdf4llm_text(source, page)
        else:
            image = render_page(source, page)
            text = tesseract_text(image) if name == "tesseract" else rapidocr_text(image)
        rel = Path(pdf)
        destination = target / rel.parent / f"{rel.stem}_pg{page}_repeat1.md"
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text, encoding="utf-8")
    return target
