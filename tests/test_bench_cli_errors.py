"""`jina-ocr bench` on bad input: one line naming the problem, exit 2, no traceback, no partial report."""

from __future__ import annotations

import json
import shutil

import pymupdf
import pytest

from jina_ocr.bench import katex
from jina_ocr.cli import main


def present(test_id: str, text: str, pdf: str = "doc.pdf", page: int = 1) -> dict:
    return {"pdf": pdf, "page": page, "id": test_id, "type": "present", "text": text}


def write_tests(path, *tests):
    path.write_text("".join(json.dumps(t) + "\n" for t in tests), encoding="utf-8")
    return path


def run_bench(capsys, *argv) -> tuple[int, str, str]:
    code = main(["bench", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(autouse=True)
def fresh_renderer():
    katex.default_renderer.cache_clear()
    yield
    katex.default_renderer.cache_clear()


def test_non_utf8_test_file(tmp_path, capsys):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(present("a", "caf")).encode()[:-2] + b'\xe9"}\n')
    (tmp_path / "out").mkdir()
    code, _, err = run_bench(capsys, "--tests", path, "--outputs", tmp_path / "out", "--no-render")
    assert_one_line_error(code, err, "latin1.jsonl", "not UTF-8", "0xe9")


def test_folder_named_like_an_output_page(tmp_path, capsys):
    tests = write_tests(tmp_path / "t.jsonl", present("a", "hello"))
    (tmp_path / "out" / "doc_pg1_repeat1.md").mkdir(parents=True)
    report = tmp_path / "report.json"
    code, _, err = run_bench(
        capsys, "--tests", tests, "--outputs", tmp_path / "out", "--no-render", "--report", report
    )
    assert_one_line_error(code, err, "doc_pg1_repeat1.md", "not a file")
    assert not report.exists()


def test_peers_with_a_test_page_beyond_the_pdf(tmp_path, capsys):
    with pymupdf.open() as doc:
        doc.new_page().insert_text((72, 72), "only page")
        doc.save(tmp_path / "doc.pdf")
    tests = write_tests(tmp_path / "t.jsonl", present("a", "only page"), present("b", "gone", page=3))
    keep = tmp_path / "peers"
    code, out, err = run_bench(
        capsys, "--tests", tests, "--peers", "tesseract", "--peers-out", keep, "--no-render"
    )
    assert_one_line_error(code, err, "test 'b'", "page 3 of doc.pdf", "has 1")
    assert out == "" and not keep.exists()


def test_report_under_a_file_is_refused_before_scoring(tmp_path, capsys):
    tests = write_tests(tmp_path / "t.jsonl", present("a", "hello"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "doc_pg1_repeat1.md").write_text("hello")
    blocker = tmp_path / "taken"
    blocker.write_text("a file")
    code, out, err = run_bench(
        capsys, "--tests", tests, "--outputs", tmp_path / "out", "--no-render", "--report", blocker / "r.json"
    )
    assert_one_line_error(code, err, "--report", "is a file")
    assert out == ""  # refused before the table, not after it
    assert blocker.read_text() == "a file"


def test_chromium_override_that_does_not_exist(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JINA_OCR_CHROMIUM", str(tmp_path / "no-chromium"))
    tests = write_tests(tmp_path / "t.jsonl", present("a", "hello"))
    (tmp_path / "out").mkdir()
    code, out, err = run_bench(capsys, "--tests", tests, "--outputs", tmp_path / "out")
    assert_one_line_error(code, err, "JINA_OCR_CHROMIUM", "no such file")
    assert out == ""


MATH = {"pdf": "doc.pdf", "page": 1, "id": "broken_ref", "type": "math", "math": r"\frac{1}{2"}


def test_unrenderable_math_reference_is_refused_as_tests_load(tmp_path, capsys):
    if katex.default_renderer() is None:
        pytest.skip("needs chromium and the katex npm package (.ci/deps/bench.sh installs both)")
    tests = write_tests(tmp_path / "arxiv_math.jsonl", MATH)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "doc_pg1_repeat1.md").write_text("$x$")
    report = tmp_path / "report.json"
    code, out, err = run_bench(capsys, "--tests", tests, "--outputs", tmp_path / "out", "--report", report)
    assert_one_line_error(code, err, "'broken_ref'", "arxiv_math.jsonl", "does not render")
    assert out == "" and not report.exists()


def test_without_rendering_math_references_are_listed_as_unchecked(tmp_path, capsys):
    tests = write_tests(tmp_path / "arxiv_math.jsonl", MATH)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "doc_pg1_repeat1.md").write_text("$x$")
    code, out, err = run_bench(capsys, "--tests", tests, "--outputs", tmp_path / "out", "--no-render")
    assert code == 0 and "overall" in out
    assert "unchecked" in err and "broken_ref" in err


def test_a_katex_release_other_than_the_benchmarks_is_named(tmp_path, capsys, monkeypatch):
    renderer = katex.default_renderer()
    if renderer is None:
        pytest.skip("needs chromium and the katex npm package (.ci/deps/bench.sh installs both)")
    other = tmp_path / "katex"
    shutil.copytree(renderer.katex_dir, other / "dist")
    (other / "package.json").write_text(json.dumps({"name": "katex", "version": "0.16.47"}))
    monkeypatch.setenv("JINA_OCR_KATEX", str(other / "dist"))
    katex.default_renderer.cache_clear()
    tests = write_tests(tmp_path / "t.jsonl", present("a", "hello"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "doc_pg1_repeat1.md").write_text("hello")
    code, _, err = run_bench(capsys, "--tests", tests, "--outputs", tmp_path / "out")
    assert code == 0
    assert "KaTeX 0.16.47" in err and "0.16.21" in err
    if katex.katex_version(renderer.katex_dir) == katex.BENCHMARK_KATEX:
        monkeypatch.setenv("JINA_OCR_KATEX", str(renderer.katex_dir))
        katex.default_renderer.cache_clear()
        assert run_bench(capsys, "--tests", tests, "--outputs", tmp_path / "out")[2] == ""
