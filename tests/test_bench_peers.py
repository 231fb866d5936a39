"""The reference engines: reading order of text boxes, both engines on a real scan, the output layout."""

from __future__ import annotations

import json

import pymupdf
import pytest
from PIL import Image

from jina_ocr.bench import peers
from jina_ocr.bench.olmocr import normalize_text
from jina_ocr.bench.omnidoc import text_edit_distance
from jina_ocr.bench.scoring import score_outputs
from jina_ocr.errors import UserError


def box(x0, y0, x1, y1, text):
    return (x0, y0, x1, y1, text)


def test_reading_order_reads_columns_before_crossing_the_gutter():
    title = box(0, 0, 500, 20, "Title")
    left = [box(0, 40 + 20 * i, 230, 55 + 20 * i, f"L{i}") for i in range(3)]
    right = [box(270, 40 + 20 * i, 500, 55 + 20 * i, f"R{i}") for i in range(3)]
    footer = box(0, 200, 500, 215, "Footer")
    shuffled = [right[1], footer, left[2], title, right[0], left[0], right[2], left[1]]
    assert [b[4] for b in peers.reading_order(shuffled)] == [
        "Title",
        "L0",
        "L1",
        "L2",
        "R0",
        "R1",
        "R2",
        "Footer",
    ]


def test_reading_order_of_one_line_is_left_to_right():
    assert [b[4] for b in peers.reading_order([box(50, 0, 90, 10, "b"), box(0, 1, 40, 11, "a")])] == [
        "a",
        "b",
    ]


def test_unknown_peer_is_an_error():
    with pytest.raises(ValueError, match="unknown peer"):
        peers.unavailable("abbyy")


@pytest.mark.parametrize("name", peers.PEERS)
def test_peer_reads_a_real_scan(name, fixtures_dir):
    reason = peers.unavailable(name)
    if reason:
        pytest.skip(reason)
    scans = fixtures_dir / "tesseract"
    image = Image.open(scans / "phototest.tif").convert("RGB")
    text = peers.tesseract_text(image) if name == "tesseract" else peers.rapidocr_text(image)
    truth = (scans / "phototest.txt").read_text()
    assert text_edit_distance(normalize_text(text), normalize_text(truth)) < 0.05, text


def test_run_peer_writes_the_benchmark_layout(tmp_path):
    reason = peers.unavailable("tesseract")
    if reason:
        pytest.skip(reason)
    pdfs = tmp_path / "pdfs"
    (pdfs / "reports").mkdir(parents=True)
    with pymupdf.open() as doc:
        page = doc.new_page(width=360, height=160)
        page.insert_text((20, 50), "Quarterly Report", fontsize=22)
        page.insert_text((20, 100), "Revenue grew by nine percent.", fontsize=14)
        doc.save(pdfs / "reports" / "q3.pdf")
    tests = [
        {"pdf": "reports/q3.pdf", "page": 1, "id": "title", "type": "present", "text": "Quarterly Report"},
        {
            "pdf": "reports/q3.pdf",
            "page": 1,
            "id": "order",
            "type": "order",
            "before": "Quarterly",
            "after": "Revenue grew",
        },
    ]
    folder = peers.run_peer("tesseract", tests, pdfs, tmp_path / "out")
    assert folder == tmp_path / "out" / "tesseract"
    assert (folder / "reports" / "q3_pg1_repeat1.md").is_file()
    score = score_outputs(tests, folder, renderer=None)
    assert all(r.passed for r in score.results), [r.explanation for r in score.results]
    with pytest.raises(UserError, match="missing"):
        peers.run_peer("tesseract", [{**tests[0], "pdf": "absent.pdf"}], pdfs, tmp_path / "out")


@pytest.mark.parametrize(
    ("size_pt", "dpi"),
    [
        ((612, 792), 2000 / 11),  # US Letter: 11 inches tall, 2,000 px
        ((200, 300), 300),  # a small page would need 480 dpi: clamped to 300
        ((2000, 3000), 72),  # a poster would need 48 dpi: clamped to 72
    ],
)
def test_pages_render_near_2000_px_within_72_to_300_dpi(size_pt, dpi):
    assert peers.page_dpi(*size_pt) == pytest.approx(dpi)


def test_pymupdf4llm_reads_the_text_layer_and_nothing_else(tmp_path):
    reason = peers.unavailable("pymupdf4llm")
    if reason:
        pytest.skip(reason)
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    with pymupdf.open() as doc:
        doc.new_page(width=360, height=160).insert_text((20, 50), "Quarterly Report", fontsize=22)
        scan = doc.new_page(width=360, height=160)  # the same words as an image: no text layer
        pix = doc[0].get_pixmap(dpi=150)
        scan.insert_image(scan.rect, pixmap=pix)
        doc.save(pdfs / "q.pdf")
    tests = [
        {"pdf": "q.pdf", "page": page, "id": f"p{page}", "type": "present", "text": "Quarterly Report"}
        for page in (1, 2)
    ]
    folder = peers.run_peer("pymupdf4llm", tests, pdfs, tmp_path / "out")
    score = score_outputs(tests, folder, renderer=None, baselines="none")
    assert [r.passed for r in score.results] == [True, False]


def test_cli_peers_print_seconds_per_page(tmp_path, capsys):
    reason = peers.unavailable("pymupdf4llm")
    if reason:
        pytest.skip(reason)
    from jina_ocr.cli import main

    with pymupdf.open() as doc:
        for text in ("First page text.", "Second page text."):
            doc.new_page(width=300, height=200).insert_text((20, 60), text, fontsize=14)
        doc.save(tmp_path / "two.pdf")
    rows = [
        {"pdf": "two.pdf", "page": page, "id": f"p{page}", "type": "present", "text": text}
        for page, text in ((1, "First page text."), (2, "Second page text."))
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["bench", "--tests", str(tmp_path / "t.jsonl"), "--peers", "pymupdf4llm", "--no-render"]) == 0
    out = capsys.readouterr().out
    assert "pymupdf4llm" in out.splitlines()[0]
    (timing,) = [line for line in out.splitlines() if line.startswith("seconds per page:")]
    assert float(timing.split("pymupdf4llm")[1]) >= 0
    # Both pages read from the text layer, plus the one baseline the benchmark adds for the PDF.
    assert "type present       100.0 (2/2)" in out and "category baseline  100.0 (1/1)" in out
