"""``jina-ocr convert`` against hostile files: what it reads, what it refuses and what it writes.

Every bad input is one line on stderr naming the path and the problem, never a traceback; the other
inputs still convert, and nothing already on disk is lost. The model is the tiny export with the fast
options of ``tests/conftest.py``; the documents are made here.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from PIL import Image
from test_documents import pdf_with_pages

from jina_ocr.cli import main
from jina_ocr.commands import _output
from jina_ocr.runtime.documents import open_document
from jina_ocr.services.conversion import render_batches


def error_lines(err: str) -> list[str]:
    """The error lines of stderr, after checking it holds no traceback."""
    assert "Traceback" not in err, err
    return [line for line in re.split(r"[\r\n]", err) if "error:" in line]


def pdf(path: Path, pages: int = 1) -> Path:
    path.write_bytes(pdf_with_pages(pages))
    return path


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


# -- 1: the frames of a multi-page TIFF ----------------------------------------------------------------


def test_each_tiff_frame_of_a_batch_keeps_its_own_pixels(tmp_path):
    """A batch renders several frames before the model sees any; each must still be its own frame."""
    colours = [(200, 0, 0), (0, 200, 0), (0, 0, 200)]
    frames = [Image.new("RGB", (64, 48), colour) for colour in colours]
    path = tmp_path / "scan.tif"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    with open_document(path) as document:
        seen = [
            [page.image.getpixel((5, 5)) for page in batch]
            for batch in render_batches(document, [1, 2, 3], batch_size=4)
        ]
    assert seen == [colours]


# -- 2: an output over an input --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_an_output_that_would_overwrite_an_input_is_refused_before_any_work(run, tmp_path, fmt):
    scan = tmp_path / f"scan.{fmt}"  # a document whose name is the output's: scan.md -> scan.md
    if fmt == "md":
        Image.new("RGB", (64, 48), (10, 20, 30)).save(scan, format="PNG")
    else:
        pdf(scan)
    before = scan.read_bytes()
    for out in (tmp_path, tmp_path / "sub" / ".."):  # sub/.. is tmp_path once -o has made sub
        status, _, err = run(scan, "--format", fmt, "-o", out)
        assert status == 2
        assert error_lines(err) == [
            f"jina-ocr convert: error: {out / scan.name}: would overwrite the input {scan}"
        ]
        assert err.count("\n") == 1  # the refusal comes before the progress bar
        assert scan.read_bytes() == before
    assert names(tmp_path) == [scan.name]


# -- 3: the longest file names ----------------------------------------------------------------------------


def test_output_names_of_the_longest_file_names_are_written(run, tmp_path):
    """Input names of 255 bytes, the most there is: ``.pdf`` to ``.md`` (254), ``.tiff`` to ``.json`` (255)."""
    scan = tmp_path / ("t" * 250 + ".tiff")
    Image.new("RGB", (64, 48), (10, 20, 30)).save(scan, format="TIFF")
    out = tmp_path / "out"
    for source, fmt in ((pdf(tmp_path / ("p" * 251 + ".pdf")), "md"), (scan, "json")):
        status, _, err = run(source, "--format", fmt, "-o", out)
        assert status == 0, err
    assert names(out) == ["p" * 251 + ".md", "t" * 250 + ".json"]


# -- 4: a full disk -----------------------------------------------------------------------------------------


def test_a_write_that_fails_keeps_the_old_output_and_the_others_convert(run, tmp_path, monkeypatch):
    first, second = pdf(tmp_path / "first.pdf"), pdf(tmp_path / "second.pdf")
    out = tmp_path / "out"
    out.mkdir()
    (out / "first.md").write_text("old\n")
    fsync = os.fsync
    calls = []

    def disk_full_once(fd):
        calls.append(fd)
        if len(calls) == 2:  # the first write is the record of the run's options (for --resume)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(_output.os, "fsync", disk_full_once)
    status, _, err = run(first, second, "-o", out)
    assert status == 1
    assert error_lines(err) == [
        f"jina-ocr convert: error: {out / 'first.md'}: cannot be written ({os.strerror(errno.ENOSPC)})"
    ]
    assert (out / "first.md").read_text() == "old\n"
    assert names(out) == ["first.md", "second.md"]  # and no temporary file left behind


# -- 5, 6: paths that are not files -----------------------------------------------------------------------


def test_paths_that_lead_nowhere_are_one_line_each_and_the_others_convert(run, tmp_path):
    loop = tmp_path / "loop.pdf"
    loop.symlink_to(loop)
    plain = pdf(tmp_path / "plain.pdf")
    under = plain / "x.pdf"
    long = tmp_path / ("l" * 300 + ".pdf")
    good = pdf(tmp_path / "good.pdf")
    out = tmp_path / "out"
    status, _, err = run(loop, under, long, good, "-o", out)
    assert status == 1
    assert error_lines(err) == [
        f"jina-ocr convert: error: {loop}: is a loop of symbolic links",
        f"jina-ocr convert: error: {under}: no such file ({plain} is a file, not a folder)",
        f"jina-ocr convert: error: {long}: the path or a name in it is too long for the file system",
    ]
    assert names(out) == ["good.md"]


def test_a_symlink_loop_in_a_folder_is_reported(run, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    pdf(folder / "a.pdf")
    (folder / "b.pdf").symlink_to(folder / "b.pdf")
    out = tmp_path / "out"
    status, _, err = run(folder, "-o", out)
    assert status == 1
    assert error_lines(err) == [f"jina-ocr convert: error: {folder / 'b.pdf'}: is a loop of symbolic links"]
    assert names(out) == ["a.md"]


def test_a_fifo_is_refused_without_being_opened(run, tmp_path):
    fifo = tmp_path / "x.pdf"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer that never comes
    good = pdf(tmp_path / "good.pdf")

    def stuck(signum, frame):
        raise TimeoutError("convert opened the FIFO and waited")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(30)
    try:
        status, _, err = run(fifo, good, "-o", tmp_path / "out")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert status == 1
    assert error_lines(err) == [f"jina-ocr convert: error: {fifo}: is a FIFO, not a regular file"]
    assert names(tmp_path / "out") == ["good.md"]


# -- 7: Markdown and the progress bar on one terminal ----------------------------------------------------


def terminal_lines(text: str) -> list[str]:
    """What a terminal shows for ``text``: a carriage return goes back to the start of the line, and what
    follows overwrites what was there."""
    lines, line, column = [], [], 0
    for char in text:
        if char == "\n":
            lines.append("".join(line).rstrip())
            line, column = [], 0
        elif char == "\r":
            column = 0
        else:
            line[column : column + 1] = [char]
            column += 1
    return lines + ["".join(line).rstrip()]


def test_markdown_on_a_terminal_never_shares_a_line_with_the_progress_bar(run, monkeypatch):
    terminal = io.StringIO()  # stdout and stderr both on one terminal, instead of the run's capture
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", terminal)
    assert run(Path(__file__).resolve().parents[1] / "samples" / "sample.pdf")[0] == 0
    shown = terminal_lines(terminal.getvalue())
    pages = [line for line in shown if "<!-- page" in line]
    assert pages == ["<!-- page 1 -->", "<!-- page 2 -->"], shown


# -- 8: one file given several times ---------------------------------------------------------------------


def test_a_file_given_several_times_is_converted_once(run, tmp_path, monkeypatch):
    source = pdf(tmp_path / "doc.pdf")
    link = tmp_path / "link.pdf"
    link.symlink_to(source)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    status, _, err = run(source, "doc.pdf", link, "-o", out)
    assert status == 0, err
    assert names(out) == ["doc.md"]
    assert "Traceback" not in err
    notes = [line for line in err.splitlines() if "converted once" in line]
    assert notes == [
        f"jina-ocr convert: doc.pdf: the same file as {source}, converted once",
        f"jina-ocr convert: {link}: the same file as {source}, converted once",
    ]


def test_pages_of_several_small_documents_share_batches(tmp_path, tiny_mtp_export, monkeypatch):
    """Three one-page documents with --batch-size 4 are one generate call, not three, and each output
    holds its own page."""
    from jina_ocr.runtime.batching import BatchDriver

    folder = tmp_path / "scans"
    folder.mkdir()
    for index in range(3):
        pdf(folder / f"d{index}.pdf")
    sizes = []
    run_batch = BatchDriver.run_batch

    def counted(self, pages, prompt=None):
        sizes.append(len(pages))
        return run_batch(self, pages, prompt)

    monkeypatch.setattr(BatchDriver, "run_batch", counted)
    out = tmp_path / "out"
    args = [str(folder), "-o", str(out), "--model", str(tiny_mtp_export), "--batch-size", "4"]
    assert main(["convert", *args, "--max-new-tokens", "2", "--format", "json"]) == 0
    assert sizes == [3]
    for index in range(3):
        record = json.loads((out / f"d{index}.json").read_text())
        assert record["source"].endswith(f"d{index}.pdf") and [p["page"] for p in record["pages"]] == [1]
