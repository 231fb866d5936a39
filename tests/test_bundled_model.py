"""The bundled jina-ocr-tiny reads: ``jina-ocr convert`` with no ``--model`` on printed test pages
and on the README's main-job page.

This is the one test that runs the shipped weights end to end (PDF -> page images -> processor ->
generate -> Markdown), so a change to the loader, the processor, the export or the decoder that breaks
reading fails here rather than in a user's hands.
"""

from __future__ import annotations

import json
from pathlib import Path

import pymupdf
import pytest

from jina_ocr import loading
from jina_ocr.cli import main
from jina_ocr.services import conversion
from jina_ocr.train.drills import printed_page
from jina_ocr.train.evaluate import character_error_rate

SEEDS = range(8)
MAX_CER = 0.10


@pytest.mark.floor
def test_the_bundled_model_reads_the_printed_test_pages(tmp_path, monkeypatch, capsys):
    """Eight fixed pages (A5, a 28 pt heading and two 20 pt lines in words no training page uses, seeds
    0-7 of :func:`printed_page`) in one PDF, converted with the bundled model: CER under 10 % over
    the eight. A random or broken model writes nothing like them (CER near 1)."""
    monkeypatch.delenv(loading.MODEL_ENV, raising=False)
    monkeypatch.setattr(loading, "_said", set())  # a fresh process, as a user's first run is
    pages = [printed_page(seed) for seed in SEEDS]
    document = pymupdf.open()
    for page in pages:
        document.insert_pdf(pymupdf.open(stream=page.pdf_bytes, filetype="pdf"))
    pdf = tmp_path / "printed.pdf"
    document.save(pdf)

    status = main(["convert", str(pdf), "--format", "json", "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 0, err
    assert "bundled jina-ocr-tiny" in err
    record = json.loads((tmp_path / "out" / "printed.json").read_text())
    outputs = [entry["markdown"] for entry in record["pages"]]
    assert [entry["page"] for entry in record["pages"]] == [1 + seed for seed in SEEDS]
    cer = character_error_rate(outputs, [page.markdown for page in pages])
    assert cer < MAX_CER, f"CER {cer:.3f} on the printed test pages: {outputs}"


def test_the_main_job_reads_the_sample_page(make_sample, tmp_path, monkeypatch, capsys):
    """The README's main job, ``jina-ocr convert samples/page.pdf``, writes the page's Markdown to
    stdout after its page marker (CER under 10 %) and says on stderr that the bundled demo model read
    it."""
    monkeypatch.delenv(loading.MODEL_ENV, raising=False)
    monkeypatch.setattr(loading, "_said", set())  # a fresh process, as the main job is
    status = main(["convert", str(Path(make_sample.__file__).parent / "page.pdf")])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "bundled jina-ocr-tiny" in err and "not jina-ocr-v1" in err
    marker, markdown = out.strip().split("\n\n", 1)
    assert marker == conversion.PAGE_MARKER.format(page=1)
    cer = character_error_rate([markdown.strip()], [make_sample.SHORT_MARKDOWN])
    assert cer < MAX_CER, f"CER {cer:.3f} on samples/page.pdf: {out!r}"
