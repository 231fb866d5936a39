"""Scoring a folder of outputs: file layout, repeats, baselines, categories, interval, report and CLI."""

from __future__ import annotations

import json

import pytest

from jina_ocr.bench.scoring import bootstrap_interval, score_outputs, summarize
from jina_ocr.cli import main


def write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def present(test_id, text, pdf="doc.pdf", page=1, category="cat"):
    return {"pdf": pdf, "page": page, "id": test_id, "type": "present", "text": text, "_category": category}


def test_majority_of_repeats_decides(tmp_path):
    tests = [present("t", "hello world")]
    write(tmp_path, "doc_pg1_repeat1.md", "hello world")
    write(tmp_path, "doc_pg1_repeat2.md", "hello world")
    write(tmp_path, "doc_pg1_repeat3.md", "goodbye")
    result = score_outputs(tests, tmp_path, baselines="none").results[0]
    assert (result.passed, result.repeats, result.repeats_passed) == (True, 3, 2)
    write(tmp_path, "doc_pg1_repeat4.md", "goodbye")
    # Two of four is not more than half.
    assert score_outputs(tests, tmp_path, baselines="none").results[0].passed is False


def test_outputs_mirror_pdf_subfolders_and_pages(tmp_path):
    tests = [
        present("a", "first page", pdf="arxiv/paper.pdf", page=1),
        present("b", "second page", pdf="arxiv/paper.pdf", page=2),
    ]
    write(tmp_path, "arxiv/paper_pg1_repeat1.md", "the first page")
    write(tmp_path, "arxiv/paper_pg2_repeat1.md", "the second page")
    write(tmp_path, "paper_pg1_repeat1.md", "wrong folder: ignored")
    score = score_outputs(tests, tmp_path, baselines="none")
    assert [r.passed for r in score.results] == [True, True]
    assert score.missing == []


def test_missing_outputs_fail_and_are_listed(tmp_path):
    score = score_outputs([present("a", "x", pdf="gone.pdf")], tmp_path, baselines="none")
    assert score.results[0].passed is False
    assert score.results[0].explanation == "no output file for this page"
    assert score.missing == ["gone_pg1_repeat*.md"]


def test_baselines_added_per_page_without_one(tmp_path):
    tests = [present("a", "text", pdf="one.pdf"), present("b", "text", pdf="two.pdf")]
    tests.append(
        {"pdf": "two.pdf", "page": 1, "id": "blank", "type": "baseline", "max_length": 3, "_category": "cat"}
    )
    write(tmp_path, "one_pg1_repeat1.md", "text " + "ab" * 40)
    write(tmp_path, "two_pg1_repeat1.md", "text")
    score = score_outputs(tests, tmp_path)
    added = [r for r in score.results if r.category == "baseline"]
    assert [(r.pdf, r.passed) for r in added] == [("one.pdf", False)]  # looping tail
    assert set(score.categories) == {"cat", "baseline"}


def test_overall_is_the_mean_of_categories_not_of_tests(tmp_path):
    tests = [present(f"a{i}", "yes", category="big") for i in range(9)] + [
        present("b", "absent text", category="small")
    ]
    write(tmp_path, "doc_pg1_repeat1.md", "yes")
    score = score_outputs(tests, tmp_path, baselines="none")
    assert score.categories["big"]["score"] == 1.0 and score.categories["small"]["score"] == 0.0
    assert score.overall == 0.5
    low, high = score.ci
    # Every category keeps its size in each replicate; "big" and "small" are constant, so no spread.
    assert low == high == 0.5


def test_bootstrap_interval_is_deterministic_and_brackets_the_mean(tmp_path):
    tests = [present(f"t{i}", "yes" if i % 3 else "no", category="c") for i in range(30)]
    write(tmp_path, "doc_pg1_repeat1.md", "yes")
    score = score_outputs(tests, tmp_path, baselines="none")
    assert score.ci[0] < score.overall < score.ci[1]
    again = summarize(score.results)
    assert again.ci == score.ci
    # Close to the normal approximation for a pass rate of 2/3 over 30 tests: 2/3 -+ 0.169.
    low, high = bootstrap_interval(score.results, samples=4000, seed=1)
    assert low == pytest.approx(2 / 3 - 0.169, abs=0.04) and high == pytest.approx(2 / 3 + 0.169, abs=0.04)


def test_bootstrap_is_stratified_by_category_as_the_benchmark_does(tmp_path):
    # olmOCR-Bench resamples each JSONL file's tests on their own and averages the file means. With
    # category a = [pass, fail] and b = eight passes, a replicate's score is (mean_a + 1) / 2 with
    # mean_a 0, 1/2 or 1 (probabilities 1/4, 1/2, 1/4): the 95 % interval is exactly [0.5, 1.0].
    # Resampling all ten tests together would put the lower bound near 0.7 instead.
    tests = [present("a1", "yes", category="a"), present("a2", "no", category="a")]
    tests += [present(f"b{i}", "yes", category="b") for i in range(8)]
    write(tmp_path, "doc_pg1_repeat1.md", "yes")
    score = score_outputs(tests, tmp_path, baselines="none")
    assert score.overall == 0.75
    assert bootstrap_interval(score.results, samples=4000, seed=3) == (0.5, 1.0)


def test_cli_report_and_fallback_listing(tmp_path, capsys):
    tests_dir = tmp_path / "bench"
    tests_dir.mkdir()
    rows = [
        {"pdf": "p.pdf", "page": 1, "id": "m", "type": "math", "math": r"\frac{1}{2}"},
        {"pdf": "p.pdf", "page": 1, "id": "t", "type": "present", "text": "Half"},
    ]
    (tests_dir / "arxiv_math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    outputs = tmp_path / "system"
    write(outputs, "p_pg1_repeat1.md", r"Half is $\frac{1}{2}$ here, and $\frac{1}{3}$ there.")
    report_path = tmp_path / "out" / "report.json"

    def bench() -> int:
        args = ["--tests", str(tests_dir), "--outputs", str(outputs), "--report", str(report_path)]
        return main(["bench", *args, "--no-render"])

    code = bench()
    assert code == 0
    printed = capsys.readouterr()
    assert "category arxiv_math" in printed.out and "overall (95% CI)" in printed.out
    report = json.loads(report_path.read_text())
    assert {"tests", "categories", "overall"} <= set(report)
    assert {tuple(sorted(t)) for t in report["tests"]} == {
        tuple(
            sorted(
                [
                    "id",
                    "type",
                    "pdf",
                    "page",
                    "passed",
                    "explanation",
                    "category",
                    "repeats",
                    "repeats_passed",
                    "method",
                ]
            )
        )
    }
    assert report["categories"]["arxiv_math"] == {"passed": 2, "total": 2, "score": 1.0}
    assert report["overall"] == 1.0
    # \frac{1}{2} occurs verbatim, so it is an exact match, not a fallback.
    assert report["math_fallback"] is None
    (tests_dir / "arxiv_math.jsonl").write_text(json.dumps({**rows[0], "math": "\\frac12"}) + "\n")
    bench()
    report = json.loads(report_path.read_text())
    assert report["math_fallback"]["tests"] == ["m"]
    assert "m" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tests", "{tmp}/nope.jsonl", "--outputs", "{tmp}"], "no such test file"),
        (["--tests", "{tmp}/t.jsonl"], "give --outputs"),
        (["--tests", "{tmp}/t.jsonl", "--outputs", "{tmp}/missing"], "not a folder"),
    ],
)
def test_cli_user_errors(tmp_path, capsys, argv, message):
    (tmp_path / "t.jsonl").write_text(json.dumps(present("a", "x")) + "\n")
    code = main(["bench", *(arg.format(tmp=tmp_path) for arg in argv)])
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_names_the_way_out_when_the_math_renderer_breaks(tmp_path, capsys, monkeypatch):
    from jina_ocr.bench import katex

    if katex.find_katex() is None:
        pytest.skip("needs the katex npm package (.ci/deps/bench.sh installs it)")
    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("JINA_OCR_CHROMIUM", str(broken))
    katex.default_renderer.cache_clear()
    try:
        (tmp_path / "t.jsonl").write_text(
            json.dumps({"pdf": "p.pdf", "id": "m", "type": "math", "math": "x^2"}) + "\n"
        )
        write(tmp_path / "out", "p_pg1_repeat1.md", "$x^{2}$")
        assert main(["bench", "--tests", str(tmp_path / "t.jsonl"), "--outputs", str(tmp_path / "out")]) == 2
        assert "--no-render" in capsys.readouterr().err
    finally:
        katex.default_renderer.cache_clear()


def test_baselines_one_per_pdf_on_page_1_as_the_benchmark_adds_them(tmp_path):
    tests = [present("a", "first", pdf="book.pdf", page=1), present("b", "second", pdf="book.pdf", page=2)]
    write(tmp_path, "book_pg1_repeat1.md", "first")
    write(tmp_path, "book_pg2_repeat1.md", "second" + "\n" * 40)
    added = [r for r in score_outputs(tests, tmp_path).results if r.category == "baseline"]
    assert [(r.id, r.page, r.passed) for r in added] == [("book.pdf_baseline", 1, True)]
    per_page = score_outputs(tests, tmp_path, baselines="per-page").results
    assert [(r.id, r.page) for r in per_page if r.category == "baseline"] == [
        ("book.pdf_pg1_baseline", 1),
        ("book.pdf_pg2_baseline", 2),
    ]
    # 40 trailing newlines collapse to one space: no loop, as the benchmark counts it.
    assert all(r.passed for r in per_page)
    # A baseline test of the file on any page of the PDF means none is added.
    own = {"pdf": "book.pdf", "page": 2, "id": "own", "type": "baseline", "_category": "cat"}
    assert [r.id for r in score_outputs([*tests, own], tmp_path).results] == ["a", "b", "own"]
