"""JinaOCRSynth: determinism, valid ground truth, ground truth equal to the page, and self-consistent unit tests."""

from __future__ import annotations

import html.parser
import json
import re
import unicodedata

import pymupdf
import pytest

from jina_ocr.bench.olmocr import run_test, validate_test
from jina_ocr.cli import main
from jina_ocr.synth import Degradation, generate_page, write_pages
from jina_ocr.synth import tex as tex_module
from jina_ocr.synth.tex import FormulaError, typeset

SEEDS = range(8)


@pytest.fixture(scope="module")
def dense_pages():
    return [generate_page(seed, profile="dense") for seed in SEEDS]


@pytest.fixture(scope="module")
def plain_pages():
    return [generate_page(100 + seed, profile="plain") for seed in range(4)]


def _equations(markdown: str) -> list[tuple[str, bool]]:
    """Display then inline formulas of a Markdown page, as (latex, display)."""
    display = re.findall(r"\$\$(.+?)\$\$", markdown)
    rest = re.sub(r"\$\$(.+?)\$\$", "", markdown)
    inline = re.findall(r"\$(.+?)\$", rest)
    return [(d, True) for d in display] + [(i, False) for i in inline]


class _StrictTables(html.parser.HTMLParser):
    """Checks that tags nest and close, and lays each table's cells on a grid to check it is rectangular."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tables: list[dict] = []

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append({"rows": [], "spans": 0, "th": 0, "thead": False})
        elif tag == "thead":
            self.tables[-1]["thead"] = True
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            span = (int(attrs.get("rowspan", 1)), int(attrs.get("colspan", 1)))
            self.tables[-1]["rows"][-1].append(span)
            self.tables[-1]["spans"] += span != (1, 1)
            self.tables[-1]["th"] += tag == "th"

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def _grid_is_rectangular(rows: list[list[tuple[int, int]]]) -> bool:
    taken: set[tuple[int, int]] = set()
    for r, row in enumerate(rows):
        col = 0
        for rowspan, colspan in row:
            while (r, col) in taken:
                col += 1
            taken |= {(r + dr, col + dc) for dr in range(rowspan) for dc in range(colspan)}
            col += colspan
    width = max(c for _, c in taken) + 1
    return taken == {(r, c) for r in range(len(rows)) for c in range(width)}


def _squash(text: str) -> str:
    """Text extraction spelling to ground-truth spelling: MuPDF reports hyphens as U+00AD or U+2010."""
    text = unicodedata.normalize("NFKC", text).translate({0xAD: "-", 0x2010: "-"})
    return re.sub(r"\s+", " ", text).strip()


def test_same_seed_same_bytes_and_other_seed_other_page():
    first, again = generate_page(42), generate_page(42)
    assert first.pdf_bytes == again.pdf_bytes
    assert first.image.tobytes() == again.image.tobytes()
    assert (first.markdown, first.tests) == (again.markdown, again.tests)
    assert generate_page(43).markdown != first.markdown


def test_folder_is_identical_for_any_number_of_workers(tmp_path):
    write_pages(tmp_path / "a", 2, seed=9, profile="mixed")
    write_pages(tmp_path / "b", 2, seed=9, profile="mixed", jobs=2)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == [
        "page_00001.md",
        "page_00001.pdf",
        "page_00001.png",
        "page_00002.md",
        "page_00002.pdf",
    ] + [
        "page_00002.png",
        "tests.jsonl",
    ]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_dense_pages_carry_tables_and_formulas_plain_pages_do_not(dense_pages, plain_pages):
    assert sum(p.markdown.count("<table>") for p in dense_pages) >= len(dense_pages)
    assert sum(p.markdown.count("$$") // 2 for p in dense_pages) >= 2 * len(dense_pages)
    assert all(re.search(r"[^$]\$[^$]+\$", p.markdown) for p in dense_pages)  # inline math on every page
    for page in plain_pages:
        assert "$" not in page.markdown and "<table" not in page.markdown
        assert re.search(r"^#{1,3} \S", page.markdown, flags=re.MULTILINE)


def test_every_table_is_well_formed_html_with_headers_and_spans_somewhere(dense_pages):
    tables = []
    for page in dense_pages:
        for table_html in re.findall(r"<table>.*?</table>", page.markdown):
            parser = _StrictTables()
            parser.feed(table_html)
            parser.close()
            assert not parser.errors and not parser.stack, (table_html, parser.errors)
            assert _grid_is_rectangular(parser.tables[0]["rows"]), table_html
            tables.append(parser.tables[0])
    assert any(t["thead"] and t["th"] for t in tables)
    assert any(t["spans"] for t in tables)
    assert any(not t["thead"] for t in tables)


def test_every_formula_of_the_ground_truth_typesets(dense_pages):
    equations = [eq for page in dense_pages for eq in _equations(page.markdown)]
    assert len(equations) > 40
    doc, boxes = typeset(equations)
    assert doc.page_count == len(boxes) == len(equations)
    assert all(box.width > 0 and box.height > 0 for box in boxes)


def test_typeset_names_the_formula_latex_rejects():
    with pytest.raises(FormulaError, match=r"\\notacommand"):
        typeset([("x^{2}", False), (r"\notacommand{y}", True)])


def test_ground_truth_is_exactly_the_text_on_the_page(dense_pages, plain_pages):
    """Every sentence of the ground truth is on the PDF page, and every word set in a text face is in the ground truth."""
    for page in dense_pages[:4] + plain_pages:
        with pymupdf.open("pdf", page.pdf_bytes) as doc:
            pdf_page = doc[0]
            on_page = _squash(pdf_page.get_text())
            spans = [
                span
                for block in pdf_page.get_text("dict")["blocks"]
                for line in block.get("lines", [])
                for span in line["spans"]
            ]
        for test in page.tests:
            if test["type"] == "present":
                assert _squash(test["text"]) in on_page, test
            if test["type"] == "absent":  # the running head is printed but not transcribed
                assert _squash(test["text"]) in on_page and test["text"] not in page.markdown
        prose = re.sub(r"\$\$.*?\$\$|\$[^$]*\$|</?[a-z]+[^<>]*>", " ", page.markdown)
        truth = set(re.findall(r"[A-Za-z][A-Za-z'-]*", prose))
        heads = {t["text"] for t in page.tests if t["type"] == "absent"}
        tex_fonts = re.compile(r"\+?(CM|MSBM|MSAM|EU)")
        for span in spans:
            if tex_fonts.search(span["font"]) or any(_squash(span["text"]) in h for h in heads):
                continue
            for word in re.findall(r"[A-Za-z][A-Za-z'-]*", _squash(span["text"])):
                assert word in truth, (word, span["text"], page.name)


def test_unit_tests_pass_on_their_page_and_mostly_fail_on_another(dense_pages, plain_pages):
    for pages in (dense_pages, plain_pages):
        for i, page in enumerate(pages):
            other = pages[(i + 1) % len(pages)]
            own = [run_test(t, page.markdown, renderer=None) for t in page.tests]
            assert all(passed for passed, _ in own), [
                (t, why) for t, (ok, why) in zip(page.tests, own, strict=True) if not ok
            ]
            crossed = [run_test(t, other.markdown, renderer=None)[0] for t in page.tests]
            assert sum(crossed) < len(crossed) / 2, (page.name, sum(crossed), len(crossed))


def test_unit_tests_follow_the_olmocr_schema(dense_pages):
    kinds = set()
    for page in dense_pages:
        ids = [t["id"] for t in page.tests]
        assert len(set(ids)) == len(ids)
        for test in page.tests:
            assert validate_test(test) is None, test
            assert test["pdf"] == f"{page.name}.pdf" and test["page"] == 1
            kinds.add(test["type"])
    assert kinds == {"present", "absent", "order", "table", "math", "baseline"}


def test_small_page_with_large_type():
    page = generate_page(5, profile="plain", page_size=(288, 360), font_size=16, dpi=100)
    assert page.image.size == (400, 500)
    assert page.image.mode == "RGB"
    assert len(page.markdown) > 100
    assert all(run_test(t, page.markdown, renderer=None)[0] for t in page.tests)


def test_degradation_changes_only_the_image():
    clean = generate_page(3, profile="plain", page_size="a5", dpi=72)
    noisy = generate_page(3, profile="plain", page_size="a5", dpi=72, degradation=Degradation())
    again = generate_page(3, profile="plain", page_size="a5", dpi=72, degradation=Degradation())
    assert noisy.image.size == clean.image.size
    assert noisy.image.tobytes() != clean.image.tobytes()
    assert noisy.image.tobytes() == again.image.tobytes()
    assert (noisy.markdown, noisy.tests, noisy.pdf_bytes) == (clean.markdown, clean.tests, clean.pdf_bytes)


def test_cli_writes_an_olmocr_bench_folder(tmp_path, capsys):
    out = tmp_path / "synth"
    assert main(["synth", "--n", "2", "--seed", "1", "--page-size", "a5", "--dpi", "72", str(out)]) == 0
    tests = [json.loads(line) for line in (out / "tests.jsonl").read_text().splitlines()]
    assert {t["pdf"] for t in tests} == {"page_00001.pdf", "page_00002.pdf"}
    for test in tests:
        assert (out / test["pdf"]).is_file()
        markdown = (out / test["pdf"]).with_suffix(".md").read_text()
        assert run_test(test, markdown, renderer=None)[0], test
    assert "wrote 2 pages" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--n", "0"], "--n must be at least 1"),
        (["--page-size", "huge"], "--page-size"),
        (["--page-size", "10x10"], "outside 100..2000"),
        (["--font-size", "200"], "--font-size"),
        (["--dpi", "5"], "--dpi"),
        (["--page-size", "120x120", "--font-size", "60"], "has no room for text at 60 pt"),
    ],
)
def test_cli_rejects_bad_options(tmp_path, capsys, argv, message):
    assert main(["synth", *argv, str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_a_file_as_output_folder(tmp_path, capsys):
    target = tmp_path / "file.txt"
    target.write_text("x")
    assert main(["synth", "--n", "1", str(target)]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_cli_says_how_to_get_tex_when_it_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tex_module.shutil, "which", lambda name: None)
    assert main(["synth", "--n", "1", "--profile", "dense", str(tmp_path / "out")]) == 2
    assert "texlive-latex-base" in capsys.readouterr().err
