"""``jina-ocr convert`` for large runs: ``--resume``, ``--shard I/N``, the run summary,
``--max-page-error-rate`` and ``--retry-truncated`` (local and through ``--endpoint``).

The model is the tiny export of ``tests/conftest.py`` with its fast options, or a copy whose head is
edited so that its greedy text runs to the token limit while its sampled text ends; documents are
made here, one or two small pages each. Pages fail on purpose by being too large for ``--max-pixels``
(refused before drawing, so they cost no model time) or by a damaged content stream.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from pathlib import Path

import pymupdf
import pytest
import torch
from stub_endpoint import ANSWER, Step, StubEndpoint, running
from test_convert_files import error_lines, names
from test_documents import damaged_pdf

from jina_ocr.cli import main
from jina_ocr.commands import _output, _shard
from jina_ocr.commands import convert as convert_command
from jina_ocr.runtime.batching import BatchDriver
from jina_ocr.runtime.documents import DEFAULT_DPI, open_document
from jina_ocr.services.conversion import Converter
from jina_ocr.services.endpoints import EndpointConverter

SMALL = (200, 150)
"""A page of 200 x 150 pt: 400 x 300 = 120,000 pixels at 144 dpi."""
BIG = (600, 600)
"""A page of 600 x 600 pt: 1200 x 1200 = 1,440,000 pixels, over ``--max-pixels`` :data:`LIMIT`."""
LIMIT = "500000"
RECORD = ".jina-ocr-convert.json"
SUMMARY = ".jina-ocr-summary.json"
SUMMARY_LINE = re.compile(
    r"jina-ocr convert: (\d+) documents \((\d+) failed\), (\d+) pages \((\d+) failed\) "
    r"in \d+\.\d s, \d+\.\d\d pages/s(; (\d+) already converted)?"
)


def write_pdf(path: Path, sizes=(SMALL,)) -> Path:
    """A PDF with a page of each size in ``sizes`` (in points), each with a line of text."""
    document = pymupdf.open()
    for number, (width, height) in enumerate(sizes, start=1):
        document.new_page(width=width, height=height).insert_text((20, 40), f"{path.stem} page {number}")
    document.save(path)
    return path


@pytest.fixture()
def cli(tiny_export, capsys):
    """``jina-ocr convert ARGS`` in this process: (status, stdout, stderr). Local runs use the tiny export
    in ``--mode tiny`` with ``max_new_tokens`` (2) new tokens per page unless ``model=`` names another
    folder; ``local=False`` adds neither (for ``--endpoint``, which refuses them)."""

    def invoke(*args, model: Path | None = None, max_new_tokens: int = 2, local: bool = True):
        options = ["--max-new-tokens", str(max_new_tokens)]
        if local:
            options += ["--model", str(model or tiny_export), "--mode", "tiny"]
        status = main(["convert", *map(str, args), *options])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return invoke


def summary_line(err: str) -> re.Match:
    """The summary line, which must be the last line of stderr."""
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    match = SUMMARY_LINE.fullmatch(last)
    assert match, err
    return match


def model_calls(monkeypatch) -> list[int]:
    """The size of every batch the model is asked to generate from now on."""
    sizes: list[int] = []
    run_batch = BatchDriver.run_batch

    def counted(self, pages, prompt=None):
        sizes.append(len(pages))
        return run_batch(self, pages, prompt)

    monkeypatch.setattr(BatchDriver, "run_batch", counted)
    return sizes


def markers(text: str) -> list[str]:
    return re.findall(r"^<!-- page (\d+)(?::| -->)", text, flags=re.MULTILINE)


# -- 1: --resume ---------------------------------------------------------------------------------------


def test_resume_converts_only_what_an_interrupted_run_left_or_failed(cli, tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdf(docs / "d1.pdf")
    write_pdf(docs / "d2.pdf", (SMALL, SMALL))
    write_pdf(docs / "d3.pdf", (BIG,))  # fails under --max-pixels: its output marks the page
    write_pdf(docs / "d4.pdf")
    out = tmp_path / "out"

    # One page per batch; Ctrl-C during the fourth batch, which is d4's (d3's page never reaches the model).
    run_batch = BatchDriver.run_batch
    calls = []

    def interrupted_at_d4(self, pages, prompt=None):
        calls.append(len(pages))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return run_batch(self, pages, prompt)

    monkeypatch.setattr(BatchDriver, "run_batch", interrupted_at_d4)
    status, _, err = cli(docs, "-o", out, "--batch-size", "1", "--max-pixels", LIMIT)
    assert status == 130 and "interrupted" in err
    assert names(out) == ["d1.md", "d2.md", "d3.md"]
    assert (out / "d3.md").read_text().startswith("<!-- page 1: not converted: ")
    assert (out / RECORD).is_file()
    done = {name: (out / name).stat().st_mtime_ns for name in ("d1.md", "d2.md")}
    monkeypatch.undo()

    # --max-pixels does not shape the text: the resume takes the record, redoes d3 and converts d4.
    sizes = model_calls(monkeypatch)
    status, _, err = cli(docs, "-o", out, "--batch-size", "1", "--resume")
    assert status == 0, err
    assert "jina-ocr convert: resuming: 2 of 4 documents already converted" in err.splitlines()
    assert sizes == [1, 1]  # d3 and d4, one page each; nothing of d1 or d2
    assert {name: (out / name).stat().st_mtime_ns for name in ("d1.md", "d2.md")} == done
    assert [markers((out / f"d{i}.md").read_text()) for i in range(1, 5)] == [["1"], ["1", "2"], ["1"], ["1"]]
    assert "not converted" not in (out / "d3.md").read_text()
    line = summary_line(err)
    assert line.groups() == ("2", "0", "2", "0", "; 2 already converted", "2")
    summary = json.loads((out / SUMMARY).read_text())
    assert (summary["documents"], summary["skipped_as_converted"], summary["pages"]) == (2, 2, 2)


def test_resume_refuses_other_text_options_and_loads_nothing_when_all_is_done(
    cli, tiny_export, tmp_path, monkeypatch
):
    docs = tmp_path / "docs"
    docs.mkdir()
    for index in (1, 2):
        write_pdf(docs / f"d{index}.pdf")
    out = tmp_path / "out"

    # A model that cannot load: a usage error, and no record of options that never converted anything.
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    status, _, err = cli(docs, "-o", out, model=not_a_model)
    assert status == 2 and "not a model folder" in err
    assert not (out / RECORD).exists()

    status, _, err = cli(docs, "-o", out)
    assert status == 0, err
    record = json.loads((out / RECORD).read_text())
    assert record == {
        "model": str(tiny_export),
        "revision": None,
        "mode": "tiny",
        "dtype": record["dtype"],
        "quantize": None,
        "served_model": None,
        "prompt": None,
        "max_new_tokens": 2,
        "pages": None,
        "dpi": DEFAULT_DPI,
        "retry_truncated": None,
        "since": record["since"],
    }
    assert isinstance(record["dtype"], str)
    assert all(record["since"] <= p.stat().st_mtime for p in out.iterdir() if p.suffix == ".md")
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.suffix == ".md"}

    loads = []
    monkeypatch.setattr(
        convert_command.Converter,
        "from_pretrained",
        classmethod(lambda cls, *a, **k: loads.append(a) or 1 / 0),
    )
    status, _, err = cli(docs, "-o", out, "--resume")
    assert status == 0, err
    assert loads == []
    assert "jina-ocr convert: resuming: 2 of 2 documents already converted" in err.splitlines()
    assert summary_line(err).groups()[:4] == ("0", "0", "0", "0")

    status, _, err = cli(docs, "-o", out, "--resume", max_new_tokens=3)
    assert status == 2
    assert error_lines(err) == [
        f"jina-ocr convert: error: --resume: {out} was converted with other options: "
        "--max-new-tokens (was 2, now 3)"
    ]
    status, _, err = cli(docs, "-o", out, "--resume", "--pages", "1", "--dpi", "100")
    assert status == 2 and len(error_lines(err)) == 1
    assert "--pages (was None, now [[1, 1]]); --dpi (was 144, now 100)" in err

    assert cli(docs, "--resume")[0] == 2  # nowhere to look for earlier outputs
    (out / RECORD).unlink()  # outputs whose options nobody recorded: refused, not taken as done
    status, _, err = cli(docs, "-o", out, "--resume")
    assert status == 2 and f"{out} has no {RECORD}" in err
    assert loads == []
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.suffix == ".md"} == before


def test_resume_of_a_document_with_a_page_cut_from_its_output_converts_it_again(cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdf(docs / "one.pdf")
    write_pdf(docs / "two.pdf", (SMALL, SMALL))
    out = tmp_path / "out"
    assert cli(docs, "-o", out)[0] == 0
    text = (out / "two.md").read_text()
    (out / "two.md").write_text(text[: text.index("<!-- page 2 -->")])  # lists page 1 only
    status, _, err = cli(docs, "-o", out, "--resume")
    assert status == 0, err
    assert "resuming: 1 of 2 documents already converted" in err
    assert (out / "two.md").read_text() == text


# -- 2: --shard ----------------------------------------------------------------------------------------


def test_shards_cover_every_document_once_under_the_unsharded_names(cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for index in range(1, 7):
        write_pdf(docs / f"d{index}.pdf")
    # two inputs named notes.pdf: notes.json and notes-2.json, which fall in different shards
    first, second = (tmp_path / "a" / "notes.pdf", tmp_path / "b" / "notes.pdf")
    for path in (first, second):
        path.parent.mkdir()
        write_pdf(path)
    assert _shard.owner("notes.json", 2) != _shard.owner("notes-2.json", 2)
    out = tmp_path / "out"
    everything = [f"d{i}.json" for i in range(1, 7)] + ["notes-2.json", "notes.json"]

    written = []
    for index in (1, 2):
        before = set(names(out)) if out.exists() else set()
        status, _, err = cli(docs, first, second, "-o", out, "--format", "json", "--shard", f"{index}/2")
        assert status == 0, err
        mine = sorted(set(names(out)) - before)
        written.append(mine)
        summary = json.loads((out / f".jina-ocr-summary-{index}-of-2.json").read_text())
        assert (summary["shard"], summary["documents"], summary["pages"]) == (
            f"{index}/2",
            len(mine),
            len(mine),
        )
        assert summary_line(err).groups()[:4] == (str(len(mine)), "0", str(len(mine)), "0")
    assert written[0] and written[1]
    assert not set(written[0]) & set(written[1])
    assert sorted(written[0] + written[1]) == sorted(everything) == names(out)
    assert not (out / SUMMARY).exists()
    sources = {
        name: json.loads((out / name).read_text())["source"] for name in ("notes.json", "notes-2.json")
    }
    assert sources == {"notes.json": str(first), "notes-2.json": str(second)}


@pytest.mark.parametrize("shard", ["0/2", "3/2", "x", "1/0", "1-2"])
def test_a_bad_shard_is_one_line(cli, tmp_path, shard):
    doc = write_pdf(tmp_path / "doc.pdf")
    status, out, err = cli(doc, "-o", tmp_path / "out", "--shard", shard)
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"jina-ocr convert: error: --shard {shard}: expected I/N with 1 <= I <= N, such as 1/4"
    ]
    assert not (tmp_path / "out").exists()


def test_a_shard_that_holds_no_document_does_nothing(cli, tmp_path):
    doc = write_pdf(tmp_path / "doc.pdf")
    other = 3 - _shard.owner("doc.md", 2)
    status, _, err = cli(doc, "-o", tmp_path / "out", "--shard", f"{other}/2")
    assert status == 0 and "holds none of the documents" in err
    assert not (tmp_path / "out").exists() or names(tmp_path / "out") == []


# -- 3: the run summary ----------------------------------------------------------------------------------


def test_summary_counts_documents_pages_and_failures(cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    good = write_pdf(docs / "good.pdf")
    damaged = docs / "damaged.pdf"
    damaged.write_bytes(damaged_pdf("content"))  # page 2 of 3 fails to draw
    broken = docs / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\nnot a pdf at all\n")
    out = tmp_path / "out"
    status, _, err = cli(docs, "-o", out)
    assert status == 1
    assert summary_line(err).groups()[:4] == ("3", "2", "4", "1")
    assert names(out) == ["damaged.md", "good.md"]
    summary = json.loads((out / SUMMARY).read_text())
    assert set(summary) == {
        "documents", "skipped_as_converted", "failed_documents", "pages", "failed_pages", "tokens",
        "finish_reasons", "seconds", "pages_per_second", "failed", "shard",
    }  # fmt: skip
    assert summary["documents"] == 3 and summary["skipped_as_converted"] == 0
    assert summary["failed_documents"] == 2 and summary["shard"] is None
    assert (summary["pages"], summary["failed_pages"]) == (4, 1)
    assert summary["finish_reasons"]["error"] == 1 and sum(summary["finish_reasons"].values()) == 4
    assert 0 < summary["tokens"] <= 3 * 2
    assert summary["seconds"] > 0
    assert summary["pages_per_second"] == pytest.approx(4 / summary["seconds"], rel=0.01)
    [unreadable, partly] = sorted(summary["failed"])
    assert unreadable.startswith(f"{broken}: ") and len(unreadable) > len(f"{broken}: ")
    assert partly == f"{damaged}: 1 of 3 pages not converted"
    assert good.exists()


def test_inputs_all_refused_print_their_errors_and_no_summary(cli, tmp_path):
    bad = [tmp_path / "a.pdf", tmp_path / "b.pdf"]
    for path in bad:
        path.write_bytes(b"not a pdf")
    out = tmp_path / "out"
    status, stdout, err = cli(*bad, "-o", out)
    assert (status, stdout) == (1, "")
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines == error_lines(err)
    assert [line.split(":")[2].strip() for line in lines] == [str(p) for p in bad]
    assert not (out / SUMMARY).exists()


def test_a_document_whose_output_cannot_be_written_is_one_failed_document(cli, tmp_path, monkeypatch):
    """A document that failed twice over (a failed page, then its output could not be written) is still
    one failed document among one."""

    write_atomic = _output.write_atomic

    def full_for_the_output(path, text):
        if path.name == "doc.md":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_atomic(path, text)

    monkeypatch.setattr(_output, "write_atomic", full_for_the_output)
    doc = write_pdf(tmp_path / "doc.pdf", (BIG,))
    out = tmp_path / "out"
    status, _, err = cli(doc, "-o", out, "--max-pixels", LIMIT)
    assert status == 1
    summary = json.loads((out / SUMMARY).read_text())
    assert (summary["documents"], summary["failed_documents"]) == (1, 1), summary["failed"]
    assert summary_line(err).groups()[:2] == ("1", "1")


# -- 4: --max-page-error-rate ------------------------------------------------------------------------------


def test_max_page_error_rate_decides_which_documents_fail(cli, tmp_path):
    one = write_pdf(tmp_path / "one.pdf", (SMALL, BIG, SMALL, SMALL))
    two = write_pdf(tmp_path / "two.pdf", (BIG, SMALL, BIG, SMALL))  # exactly the rate: not more
    three = write_pdf(tmp_path / "three.pdf", (BIG, BIG, SMALL, BIG))
    out = tmp_path / "out"

    # default 0: any failed page fails the document
    status, _, err = cli(one, "-o", out, "--max-pixels", LIMIT)
    assert status == 1
    assert [line for line in error_lines(err) if "page 2" not in line] == []
    assert json.loads((out / SUMMARY).read_text())["failed"] == [f"{one}: 1 of 4 pages not converted"]

    status, _, err = cli(one, two, "-o", out, "--max-pixels", LIMIT, "--max-page-error-rate", "0.5")
    assert status == 0, err
    summary = json.loads((out / SUMMARY).read_text())
    assert (summary["failed"], summary["failed_documents"], summary["failed_pages"]) == ([], 0, 3)
    assert markers((out / "one.md").read_text()) == ["1", "2", "3", "4"]
    assert "<!-- page 2: not converted: " in (out / "one.md").read_text()

    status, _, err = cli(three, "-o", out, "--max-pixels", LIMIT, "--max-page-error-rate", "0.5")
    assert status == 1
    reason = "3 of 4 pages not converted (more than --max-page-error-rate 0.5)"
    assert error_lines(err)[-1] == f"jina-ocr convert: error: {three}: {reason}"
    assert len(error_lines(err)) == 4  # one per failed page, then the document's
    assert json.loads((out / SUMMARY).read_text())["failed"] == [f"{three}: {reason}"]
    assert (out / "three.md").read_text().count("not converted") == 3  # written all the same

    for rate in ("-0.1", "1.5"):
        status, _, err = cli(one, "--max-page-error-rate", rate)
        assert status == 2 and "--max-page-error-rate must be from 0 to 1" in err


# -- 5: --retry-truncated, local -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page_pdf(tmp_path_factory) -> Path:
    return write_pdf(tmp_path_factory.mktemp("page") / "page.pdf")


@pytest.fixture(scope="module")
def ending_export(tiny_export, page_pdf, tmp_path_factory) -> Path:
    """The tiny export with its head scaled up and the end token's row a hair below that of the token
    greedy repeats on :func:`page_pdf`: greedy still picks that token to the limit, while sampling at a
    low temperature soon picks the end token."""
    from model_edits import rewrite_weights

    eos = json.loads((tiny_export / "generation_config.json").read_text())["eos_token_id"]
    with open_document(page_pdf) as document:
        image = document.render(1)
    greedy = Converter.from_pretrained(tiny_export, mode="tiny", max_new_tokens=12).generate([image])[0]
    assert greedy.finish_reason == "length" and len(set(greedy.token_ids)) == 1, greedy.token_ids
    repeated = greedy.token_ids[-1]
    assert repeated != eos

    def edit(state):
        head = state["lm_head.weight"] * 200
        head[eos] = head[repeated] * 0.999
        state["lm_head.weight"] = head

    folder = tmp_path_factory.mktemp("ending") / "jina-ocr-tiny"
    shutil.copytree(tiny_export, folder)
    rewrite_weights(folder, edit)
    return folder


def temperatures_asked(monkeypatch) -> list[float]:
    """The temperature of every batch driver made from now on (0 for greedy)."""
    asked: list[float] = []
    driver = Converter.driver

    def recorded(self, temperature=0.0):
        asked.append(temperature)
        return driver(self, temperature)

    monkeypatch.setattr(Converter, "driver", recorded)
    return asked


def convert_page(model: Path, pdf: Path, retries: int):
    torch.manual_seed(0)
    converter = Converter.from_pretrained(model, mode="tiny", max_new_tokens=12, retry_truncated=retries)
    [result] = converter.convert(pdf)
    return result


def test_retry_truncated_keeps_the_first_sampled_text_that_ends(ending_export, page_pdf, monkeypatch):
    asked = temperatures_asked(monkeypatch)
    greedy = convert_page(ending_export, page_pdf, 0)
    assert (greedy.finish_reason, greedy.temperature, greedy.tokens) == ("length", 0.0, 12)
    assert asked == [0.0]
    assert greedy.to_dict()["temperature"] == 0.0

    asked.clear()
    retried = convert_page(ending_export, page_pdf, 2)
    assert retried.ok and retried.finish_reason == "stop"
    assert retried.temperature in (0.2, 0.4) and retried.tokens < 12
    assert asked == [0.0, 0.2, 0.4][: asked.index(retried.temperature) + 1]  # no retry after it ended
    assert retried.to_dict()["temperature"] == retried.temperature


def test_retry_truncated_keeps_the_greedy_text_when_no_sample_ends(tiny_export, page_pdf, monkeypatch):
    greedy = convert_page(tiny_export, page_pdf, 0)
    asked = temperatures_asked(monkeypatch)
    retried = convert_page(tiny_export, page_pdf, 2)
    assert asked == [0.0, 0.2, 0.4]  # N retries at rising temperatures, then given up
    assert (retried.finish_reason, retried.temperature) == ("length", 0.0)
    assert (retried.markdown, retried.tokens) == (greedy.markdown, greedy.tokens)


def test_retry_truncated_through_the_command(cli, ending_export, page_pdf, tmp_path):
    out = tmp_path / "out"
    torch.manual_seed(0)
    status, _, err = cli(
        page_pdf,
        "-o",
        out,
        "--format",
        "json",
        "--retry-truncated",
        "2",
        model=ending_export,
        max_new_tokens=12,
    )
    assert status == 0, err
    [page] = json.loads((out / "page.json").read_text())["pages"]
    assert page["finish_reason"] == "stop" and page["temperature"] in (0.2, 0.4), page
    assert json.loads((out / RECORD).read_text())["retry_truncated"] == 2
    assert json.loads((out / SUMMARY).read_text())["finish_reasons"] == {"stop": 1}

    status, _, err = cli(
        page_pdf, "-o", out, "--format", "json", "--resume", model=ending_export, max_new_tokens=12
    )
    assert status == 2 and "--retry-truncated (was 2, now None)" in err  # retried text is not greedy text

    status, _, err = cli(page_pdf, "--retry-truncated", "-1")
    assert status == 2 and error_lines(err) == [
        "jina-ocr convert: error: --retry-truncated must be 0 or more, got -1"
    ]


# -- 6: --retry-truncated through endpoints --------------------------------------------------------------------


def test_retry_truncated_through_an_endpoint_sends_a_sampled_request(cli, page_pdf):
    stub = StubEndpoint([Step(finish_reason="length"), Step(finish_reason="stop")])
    with running(stub) as url:
        status, stdout, err = cli(
            page_pdf, "--endpoint", url, "--format", "json", "--retry-truncated", "2", local=False
        )
    assert status == 0, err
    [page] = json.loads(stdout)["pages"]
    assert (page["markdown"], page["finish_reason"], page["temperature"]) == (ANSWER, "stop", 0.2)
    assert [chat.body["temperature"] for chat in stub.chats] == [0, 0.2]


@pytest.mark.parametrize(
    "retries, script, temperatures, ending",
    [
        (0, ["length", "stop"], [0], ("length", 0.0)),
        (2, ["length"], [0, 0.2, 0.4], ("length", 0.0)),  # no answer ends: the greedy one stays
        (3, ["length", "length", "stop"], [0, 0.2, 0.4], ("stop", 0.4)),
        (2, ["stop"], [0], ("stop", 0.0)),
    ],
)
def test_endpoint_retries_of_truncated_pages(page_pdf, retries, script, temperatures, ending):
    stub = StubEndpoint([Step(finish_reason=reason) for reason in script])
    with running(stub) as url, EndpointConverter(url, concurrency=1, retry_truncated=retries) as converter:
        [result] = list(converter.convert(page_pdf))
    assert [chat.body["temperature"] for chat in stub.chats] == temperatures
    assert (result.finish_reason, result.temperature) == ending and result.markdown == ANSWER


def test_a_failed_retry_keeps_the_greedy_answer(page_pdf):
    """A retry is optional: when its request fails for good (HTTP 400), the page keeps the greedy answer it
    already had, as a local run does when a retried batch fails."""
    stub = StubEndpoint([Step(finish_reason="length"), Step("status", 400)])
    with running(stub) as url, EndpointConverter(url, concurrency=1, retry_truncated=1) as converter:
        [result] = list(converter.convert(page_pdf))
    assert len(stub.chats) == 2
    assert result.ok, result.error
    assert (result.finish_reason, result.temperature, result.markdown) == ("length", 0.0, ANSWER)


def test_a_failed_local_retry_keeps_the_greedy_text(tiny_export, page_pdf, monkeypatch):
    driver = Converter.driver

    def failing_when_sampled(self, temperature=0.0):
        made = driver(self, temperature)
        if temperature:
            made.run_batch = lambda pages, prompt=None: [RuntimeError("out of memory")] * len(pages)
        return made

    monkeypatch.setattr(Converter, "driver", failing_when_sampled)
    result = convert_page(tiny_export, page_pdf, 1)
    assert result.ok and (result.finish_reason, result.temperature, result.tokens) == ("length", 0.0, 12)


def test_outputs_of_earlier_options_are_not_taken_as_done_after_the_options_changed(cli, tmp_path):
    """Run A converts d1 and d2; run B, with another token limit and without --resume, takes the folder
    (here: converting only d3, as a run interrupted before it rewrote d1 and d2 would leave it). A
    --resume with B's options redoes d1 and d2, which A wrote, rather than mixing two kinds of text."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for index in (1, 2, 3):
        write_pdf(docs / f"d{index}.pdf")
    out = tmp_path / "out"
    assert cli(docs / "d1.pdf", docs / "d2.pdf", "-o", out)[0] == 0
    for name in ("d1.md", "d2.md"):  # written well before B took the folder
        os.utime(out / name, (time.time() - 10, time.time() - 10))
    assert cli(docs / "d3.pdf", "-o", out, max_new_tokens=3)[0] == 0
    status, _, err = cli(docs, "-o", out, "--resume", max_new_tokens=3)
    assert status == 0, err
    assert "resuming: 1 of 3 documents already converted" in err
