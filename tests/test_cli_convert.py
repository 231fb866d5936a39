"""``jina-ocr convert`` on the real PDFs and scans of the fixtures, with the tiny exported model.

The model's text is random; the tests check what the command promises: which pages, which files,
which errors, which exit status. Most runs use ``--mode tiny`` (512 px, one small forward per page)
to stay fast; one runs the default mode through the installed entry point in a fresh process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pymupdf
import pytest
from test_documents import damaged_pdf, handwritten_pdf

from jina_ocr.cli import main
from jina_ocr.commands._output import write_atomic
from jina_ocr.commands.convert import _TokenMeter
from jina_ocr.runtime import documents
from jina_ocr.services import conversion

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "sample.pdf"


def markers(markdown: str) -> list[str]:
    return re.findall(r"<!-- page (\d+)(?::| -->)", markdown)


def test_page_selection_to_stdout(run):
    status, out, err = run(SAMPLE, "--pages", "2")
    assert status == 0, err
    assert markers(out) == ["2"]
    assert out.startswith("<!-- page 2 -->\n\n")
    assert "tok/s" in err and "1/1" in err  # the progress bar counts pages and shows throughput


def test_markdown_and_json_files_in_a_new_folder(run, fixtures_dir, tmp_path):
    out = tmp_path / "nested" / "out"
    status, stdout, err = run(SAMPLE, fixtures_dir / "tesseract" / "eurotext.tif", "-o", out)
    assert status == 0, err
    assert stdout == ""
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["eurotext.md", "sample.md"]
    assert markers((out / "sample.md").read_text()) == ["1", "2"]

    status, _, err = run(fixtures_dir / "olmocr" / "earnings.pdf", "--format", "json", "-o", out)
    assert status == 0, err
    record = json.loads((out / "earnings.json").read_text())
    assert record["source"] == str(fixtures_dir / "olmocr" / "earnings.pdf")
    [page] = record["pages"]
    assert set(page) == {
        "page", "markdown", "tokens", "seconds", "finish_reason", "confidence", "mean_logprob",
        "min_logprob", "temperature", "fastmtp", "error",
    }  # fmt: skip
    assert page["page"] == 1 and page["error"] is None and isinstance(page["markdown"], str)
    assert 0 <= page["tokens"] <= 2 and page["seconds"] > 0
    assert page["fastmtp"] is None  # a random export decodes with plain greedy unless exported with --mtp on
    assert not [p for p in out.iterdir() if p.name.endswith(".part")]  # no temporary files left


def test_json_to_stdout_without_fastmtp(run, fixtures_dir):
    status, out, err = run(fixtures_dir / "olmocr" / "blank_book_pg1.pdf", "--format", "json", "--no-mtp")
    assert status == 0, err
    record = json.loads(out)
    assert [p["page"] for p in record["pages"]] == [1] and record["pages"][0]["fastmtp"] is None


def test_each_input_is_opened_once(run, fixtures_dir, tmp_path, monkeypatch):
    """Checked before the model loads and then converted: the same open document, not a second open."""
    opened = []
    open_document = documents.open_document

    def counted(source, **options):
        opened.append(options["name"])
        return open_document(source, **options)

    monkeypatch.setattr(documents, "open_document", counted)
    image = fixtures_dir / "tesseract" / "eurotext.tif"
    status, _, err = run(SAMPLE, image, "-o", tmp_path / "out")
    assert status == 0, err
    assert opened == [str(SAMPLE), str(image)]


def test_corrupt_pdf_fails_before_the_model_loads(fixtures_dir, tmp_path, capsys):
    data = (fixtures_dir / "olmocr" / "olmo2-pg4.pdf").read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[: len(data) // 2])
    # The model folder does not exist: the command must stop on the document before needing it.
    status = main(["convert", str(cut), "-o", str(tmp_path / "out"), "--model", str(tmp_path / "no-model")])
    err = capsys.readouterr().err
    assert status == 1
    assert f"error: {cut}: is truncated" in err
    assert not (tmp_path / "out").exists()


def encrypted_copy(source: Path, target: Path, password: str) -> Path:
    document = pymupdf.open(source)
    document.save(target, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw=password, owner_pw=password + "!")
    return target


def test_encrypted_pdf_with_and_without_password(run, fixtures_dir, tmp_path):
    locked = encrypted_copy(
        fixtures_dir / "olmocr" / "multi_column_miss.pdf", tmp_path / "locked.pdf", "open sesame"
    )
    status, out, err = run(locked)
    assert status == 1 and out == ""
    assert f"{locked}: is encrypted: a password is needed" in err
    status, out, err = run(locked, "--password", "wrong")
    assert status == 1 and "the password is wrong" in err
    status, out, err = run(locked, "--password", "open sesame")
    assert status == 0, err
    assert markers(out) == ["1"]


def test_page_out_of_range(run):
    status, out, err = run(SAMPLE, "--pages", "2-3")
    assert status == 1 and out == ""
    assert f"{SAMPLE}, page 3: out of range: the document has 2 pages" in err


def test_non_document_file(run, fixtures_dir):
    status, out, err = run(fixtures_dir / "olmocr" / "tests.jsonl")
    assert status == 1 and out == ""
    assert "tests.jsonl: is neither a PDF nor a PNG, JPEG, TIFF, WebP or BMP image" in err


def test_mixed_list_converts_the_good_inputs_and_reports_the_bad(run, fixtures_dir, tmp_path):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 100)
    missing = tmp_path / "missing.png"
    out = tmp_path / "out"
    status, _, err = run(
        fixtures_dir / "olmocr" / "mathfuncs.pdf",
        broken,
        missing,
        fixtures_dir / "tesseract" / "phototest.tif",
        "-o",
        out,
    )
    assert status == 1
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "mathfuncs.md",
        "phototest.md",
    ]
    assert f"{broken}: is not a readable PDF" in err and f"{missing}: no such file" in err


def test_a_bad_page_is_reported_and_the_rest_converts(run, tmp_path):
    holes = tmp_path / "holes.pdf"
    holes.write_bytes(handwritten_pdf(b"/MediaBox [0 0 300 400]", [b"", b"/MediaBox [0 0 0 0]", b""]))
    status, _, err = run(holes, "-o", tmp_path)
    assert status == 1
    assert f"{holes}, page 2: page has zero size" in err
    text = (tmp_path / "holes.md").read_text()
    assert markers(text) == ["1", "2", "3"]
    assert "<!-- page 2: not converted: page has zero size" in text


@pytest.mark.parametrize("kind", ["content", "image"])
def test_a_page_mupdf_reports_damaged_fails_and_the_others_convert(run, tmp_path, kind):
    damaged = tmp_path / f"damaged-{kind}.pdf"
    damaged.write_bytes(damaged_pdf(kind))
    status, out, err = run(damaged)
    assert status == 1
    assert markers(out) == ["1", "2", "3"]
    # Pages 1 and 3 converted: page 3, rendered after page 2, is not failed by page 2's warnings.
    assert "<!-- page 1 -->" in out and "<!-- page 3 -->" in out
    assert re.search(r"<!-- page 2: not converted: page is damaged: MuPDF reports .*zlib error", out)
    assert re.search(rf"{re.escape(str(damaged))}, page 2: page is damaged: MuPDF reports .*zlib error", err)


def test_folder_input_and_usage_errors(run, fixtures_dir, tmp_path):
    status, out, err = run(fixtures_dir / "tesseract", "--pages", "1", "--format", "json")
    assert status == 0, err
    sources = [json.loads(line)["source"] for line in out.splitlines()]
    assert [Path(s).name for s in sources] == ["eurotext.tif", "phototest-rotated-L.png", "phototest.tif"]

    assert run(SAMPLE, "--pages", "2-1")[0] == 2  # malformed selection: usage error, nothing runs
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "sample.pdf").write_bytes(SAMPLE.read_bytes())
    status, _, err = run(SAMPLE, tmp_path / "a" / "sample.pdf", "--pages", "1", "-o", tmp_path / "out")
    assert status == 0, err  # two inputs of one name: the second is numbered
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")) == [
        "sample-2.md",
        "sample.md",
    ]


def test_interrupt_leaves_finished_files_and_no_partial_ones(run, fixtures_dir, tmp_path, monkeypatch):
    run_batch = conversion.BatchDriver.run_batch
    calls = []

    def interrupted_on_second_document(self, pages, prompt=None):
        calls.append(len(pages))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run_batch(self, pages, prompt)

    monkeypatch.setattr(conversion.BatchDriver, "run_batch", interrupted_on_second_document)
    out = tmp_path / "out"
    status, _, err = run(fixtures_dir / "tesseract" / "phototest.tif", SAMPLE, "-o", out, "--batch-size", "1")
    assert status == 130 and "interrupted" in err
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == [
        "phototest.md"
    ]  # sample.md was never half written


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path, monkeypatch):
    target = tmp_path / "doc.md"
    target.write_text("old\n")

    def power_cut(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr("os.fsync", power_cut)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "new text that never lands\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["doc.md"]


def test_installed_command_runs_the_default_mode(tiny_mtp_export, fixtures_dir):
    """A fresh process through the real entry point, default resolution mode and FastMTP on (the folder's
    default)."""
    done = subprocess.run(
        [sys.executable, "-m", "jina_ocr.cli", "convert", str(fixtures_dir / "olmocr" / "earnings.pdf")]
        + ["--model", str(tiny_mtp_export), "--max-new-tokens", "2", "--dpi", "40"],  # 340 x 440 px: no tiles
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!-- page 1 -->\n\n")
    assert "tok/s" in done.stderr


def test_the_progress_bar_counts_tokens_while_a_batch_decodes(tiny_export, capsys, monkeypatch):
    monkeypatch.setattr(_TokenMeter, "REDRAW_SECONDS", 0.0)  # redraw at every decoding step
    status = main(
        ["convert", str(SAMPLE), "--pages", "1-2", "--batch-size", "2", "--model", str(tiny_export)]
        + ["--mode", "tiny", "--max-new-tokens", "20"]
    )
    assert status == 0
    err = capsys.readouterr().err
    # While the two-page batch decodes the bar still says 0/2, its token count growing by 2 a step.
    counts = [int(n) for n in re.findall(r" 0/2 [^\r\n]*?(\d+) tokens", err)]
    assert counts == list(range(2, 42, 2)), err
    assert re.search(r" 2/2 [^\r\n]*\b40 tokens", err), err


def one_line_error(err: str) -> str:
    """The whole of stderr for an input refused before any work: one line, no traceback."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def convert_without_a_model(run, tmp_path, *args) -> tuple[int, str]:
    """``jina-ocr convert SAMPLE ARGS`` with a model folder that does not exist: an error about the
    arguments proves they were checked before any model was looked for."""
    status, _, err = run(SAMPLE, *args, model=tmp_path / "no-model")
    return status, one_line_error(err)


def unwritable_folder(tmp_path) -> Path:
    """A folder this process cannot create files in: permission bits bind every user except root, whom
    only a file system that refuses new files (sysfs) stops."""
    if os.geteuid() == 0:
        return Path("/sys/jina-ocr-out")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    return locked / "out"


@pytest.mark.parametrize("case", ["existing file", "under a file", "not writable"])
def test_unusable_output_folder_is_a_usage_error_before_anything_loads(run, tmp_path, case):
    (tmp_path / "taken").write_text("a file\n")
    target, message = {
        "existing file": (tmp_path / "taken", f"-o {tmp_path / 'taken'}: is a file, not a folder"),
        "under a file": (
            tmp_path / "taken" / "out",
            f"-o {tmp_path / 'taken' / 'out'}: lies under {tmp_path / 'taken'}, which is a file, not a folder",
        ),
        "not writable": (unwritable_folder(tmp_path), None),
    }[case]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    status, line = convert_without_a_model(run, tmp_path, "-o", target)
    assert status == 2
    if message is None:
        assert line.startswith(f"jina-ocr convert: error: -o {target}: cannot write in {target.parent} (")
    else:
        assert line == f"jina-ocr convert: error: {message}"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, no probe left
    assert (tmp_path / "taken").read_text() == "a file\n"


def test_a_folder_of_another_model_is_a_usage_error(run, tmp_path):
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    status, _, err = run(SAMPLE, "-o", tmp_path / "out", model=bert)
    line = one_line_error(err)
    assert status == 2
    assert line.startswith(f"jina-ocr convert: error: --model {bert}: config.json is for model type 'bert'")
    assert "accepted: a jina-ocr export" in line and "as released" in line
    status, _, err = run(SAMPLE, model=tmp_path / "missing")
    assert status == 2
    assert one_line_error(err) == (
        f"jina-ocr convert: error: --model {tmp_path / 'missing'}: no such folder (nor a Hub id, which reads ORG/NAME)"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("pages", ["", " ", ","])
def test_an_empty_page_selection_is_a_usage_error(run, tmp_path, pages):
    status, line = convert_without_a_model(run, tmp_path, "--pages", pages, "-o", tmp_path / "out")
    assert status == 2
    assert line.startswith(f"jina-ocr convert: error: invalid page selection {pages!r}: ")
    assert not (tmp_path / "out").exists()


def test_a_device_this_machine_lacks_is_a_usage_error(run, tmp_path):
    import torch

    device = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"
    status, line = convert_without_a_model(run, tmp_path, "--device", device, "-o", tmp_path / "out")
    assert status == 2
    assert line.startswith(f"jina-ocr convert: error: device {device!r}: this machine has ")
    assert not (tmp_path / "out").exists()


def test_ctrl_c_while_the_model_loads(run, tiny_export, tmp_path, monkeypatch):
    """SIGINT delivered while the weights load: exit 130, one line, nothing written."""
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    model = tmp_path / "model"  # a folder of its own: the loaded-model cache must not answer for it
    shutil.copytree(tiny_export, model)

    def interrupted(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)

    # jina_ocr.loading builds the model with the installed class, not through the auto classes
    monkeypatch.setattr(JinaOCRForConditionalGeneration, "from_pretrained", interrupted)
    status, _, err = run(SAMPLE, "-o", tmp_path / "out", model=model)
    assert status == 130
    assert one_line_error(err) == (
        "jina-ocr convert: interrupted while loading the model; nothing was written"
    )
    assert not (tmp_path / "out").exists()


def test_an_encrypted_pdf_without_password_names_the_option(run, fixtures_dir, tmp_path):
    locked = encrypted_copy(fixtures_dir / "olmocr" / "earnings.pdf", tmp_path / "locked.pdf", "secret")
    status, out, err = run(locked, "-o", tmp_path / "out")
    assert status == 1 and out == ""
    assert one_line_error(err) == (
        f"jina-ocr convert: error: {locked}: is encrypted: a password is needed to open it; "
        "pass it with --password"
    )
    assert not (tmp_path / "out").exists()
