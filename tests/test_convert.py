"""The Python API: ``jina_ocr.convert`` and ``Converter`` with the tiny exported model.

Pages are rendered at 36 dpi, go through the processor's ``tiny`` mode (512 px, no tiles) and generate
at most 3 tokens, so each page costs one small forward pass; what is tested is the plumbing, not the
(random) text. The command-line tests run the default mode.
"""

from __future__ import annotations

import pymupdf
import pytest
from PIL import Image
from test_documents import handwritten_pdf, pdf_with_a_blank_second_page, pdf_with_pages

import jina_ocr
from jina_ocr import loading
from jina_ocr.errors import UserError
from jina_ocr.loading import resolve_model
from jina_ocr.runtime import documents
from jina_ocr.runtime.documents import PageRangeError, PasswordError, PdfDocument, UnknownFormatError
from jina_ocr.services import conversion
from jina_ocr.services.conversion import Converter


@pytest.fixture(scope="module")
def converter(tiny_export) -> Converter:
    return Converter.from_pretrained(
        tiny_export, device="cpu", max_new_tokens=3, batch_size=2, dpi=36, mode="tiny"
    )


def count_generate_calls(converter: Converter, monkeypatch) -> list[int]:
    """Record the batch size of every ``model.generate`` call the converter makes."""
    calls = []
    generate = converter.model.generate

    def counting(**inputs):
        calls.append(len(inputs["input_ids"]))
        return generate(**inputs)

    monkeypatch.setattr(converter.model, "generate", counting)
    return calls


def test_pages_stream_out_as_each_batch_finishes(converter, monkeypatch):
    local = converter.with_options(batch_size=2)
    calls = count_generate_calls(local, monkeypatch)
    stream = jina_ocr.convert(pdf_with_pages(3), pages="1-", model=local, name="three.pdf")
    first = next(stream)
    assert calls == [2]  # the first result arrives after one batch, not after the document
    results = [first, *stream]
    assert calls == [2, 1]
    assert [r.page for r in results] == [1, 2, 3]
    for result in results:
        assert result.ok and result.source == "three.pdf"
        assert isinstance(result.markdown, str) and 0 <= result.tokens <= 3 and result.seconds > 0
    assert set(results[0].to_dict()) == {
        "page", "markdown", "tokens", "seconds", "finish_reason", "confidence", "mean_logprob",
        "min_logprob", "temperature", "fastmtp", "error",
    }  # fmt: skip


def test_a_blank_page_converts_to_empty_markdown_without_the_model(converter, monkeypatch):
    local = converter.with_options(batch_size=3)
    calls = count_generate_calls(local, monkeypatch)
    results = list(jina_ocr.convert(pdf_with_a_blank_second_page(), model=local, name="gap.pdf"))
    assert calls == [2]  # pages 1 and 3 only
    assert [(r.page, r.error) for r in results] == [(1, None), (2, None), (3, None)]
    assert (results[1].markdown, results[1].tokens, results[1].fastmtp) == ("", 0, None)
    assert "\n\n<!-- page 2 -->\n\n<!-- page 3 -->\n\n" in conversion.document_markdown(results)


def test_a_batch_gives_what_each_page_gives_alone(converter, fixtures_dir):
    images = [
        Image.open(fixtures_dir / "tesseract" / "phototest.tif").convert("RGB"),
        Image.open(fixtures_dir / "tesseract" / "phototest-rotated-L.png").convert("RGB"),
    ]
    limits = [3, 2]
    together = converter.generate(images, max_new_tokens=limits)
    alone = [
        converter.generate([image], max_new_tokens=n)[0] for image, n in zip(images, limits, strict=True)
    ]
    assert [(g.markdown, g.tokens) for g in together] == [(g.markdown, g.tokens) for g in alone]
    assert [g.tokens <= n for g, n in zip(together, limits, strict=True)] == [True, True]
    assert all(g.prompt_tokens > 0 for g in together)


def test_whole_document_errors_raise_at_the_call_before_any_page(converter):
    with pytest.raises(UnknownFormatError, match="notes.txt"):
        jina_ocr.convert(b"plain text", model=converter, name="notes.txt")
    with pytest.raises(PageRangeError, match=r"two\.pdf, page 3"):
        jina_ocr.convert(pdf_with_pages(2), pages="2-3", model=converter, name="two.pdf")
    locked = pymupdf.open(stream=pdf_with_pages(1), filetype="pdf").tobytes(
        encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="owner"
    )
    with pytest.raises(PasswordError):
        jina_ocr.convert(locked, model=converter)
    assert [r.ok for r in jina_ocr.convert(locked, model=converter, password="pw", max_new_tokens=1)] == [
        True
    ]


def test_document_errors_come_before_looking_for_a_model(monkeypatch, tmp_path):
    monkeypatch.delenv(loading.MODEL_ENV, raising=False)
    monkeypatch.setattr(loading, "BUNDLED_MODEL", tmp_path / "absent")
    with pytest.raises(UnknownFormatError):
        jina_ocr.convert(b"plain text")
    with pytest.raises(UserError, match="no model given"):
        jina_ocr.convert(pdf_with_pages(1))


def test_a_bad_page_is_reported_and_the_others_convert(converter):
    data = handwritten_pdf(b"/MediaBox [0 0 300 400]", [b"", b"/MediaBox [0 0 0 0]", b""])
    results = list(converter.convert(data, name="holes.pdf"))
    assert [(r.page, r.ok) for r in results] == [(1, True), (2, False), (3, True)]
    assert results[1].markdown is None and "zero size" in results[1].error
    assert results[1].to_dict()["error"] == results[1].error


def test_at_most_one_batch_of_pages_is_alive(converter, monkeypatch):
    import weakref

    refs = []
    render = PdfDocument.render

    def tracked(self, number):
        assert sum(ref() is not None for ref in refs) < 2, "a page outlived its batch"
        image = render(self, number)
        refs.append(weakref.ref(image))
        return image

    monkeypatch.setattr(PdfDocument, "render", tracked)
    results = list(converter.with_options(batch_size=2, max_new_tokens=1).convert(pdf_with_pages(4)))
    assert [r.page for r in results if r.ok] == [1, 2, 3, 4]


def test_convert_loads_a_model_folder_once(tiny_export, fixtures_dir):
    first = list(
        jina_ocr.convert(fixtures_dir / "tesseract" / "phototest.tif", model=tiny_export, max_new_tokens=2)
    )
    again = list(
        jina_ocr.convert(fixtures_dir / "tesseract" / "phototest.tif", model=tiny_export, max_new_tokens=2)
    )
    assert [r.markdown for r in first] == [r.markdown for r in again]
    assert loading._load.cache_info().hits >= 1


def test_fastmtp_statistics_are_reported_only_with_fastmtp(converter, fixtures_dir):
    page = fixtures_dir / "tesseract" / "phototest.tif"
    with_mtp = list(converter.with_options(use_mtp=True).convert(page))
    without = list(converter.with_options(use_mtp=False).convert(page))
    assert isinstance(with_mtp[0].fastmtp, dict) and with_mtp[0].fastmtp
    assert without[0].fastmtp is None
    assert with_mtp[0].markdown == without[0].markdown  # FastMTP is lossless


def test_model_resolution_order(tiny_export, tmp_path, monkeypatch):
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    (bundled / "config.json").write_text('{"model_type": "jina_ocr"}')
    (bundled / "model.safetensors").write_bytes(b"")  # resolution looks at the layout, not the weights
    monkeypatch.setattr(loading, "BUNDLED_MODEL", bundled)
    monkeypatch.delenv(loading.MODEL_ENV, raising=False)
    assert resolve_model(None) == bundled
    monkeypatch.setenv(loading.MODEL_ENV, str(tmp_path))
    with pytest.raises(UserError, match=r"\$JINA_OCR_MODEL .*not a model folder"):
        resolve_model(None)
    monkeypatch.setenv(loading.MODEL_ENV, str(tiny_export))
    assert resolve_model(None) == tiny_export  # the environment wins
    assert resolve_model(bundled) == bundled  # and an explicit folder wins over both
    monkeypatch.setattr(loading, "BUNDLED_MODEL", tmp_path / "absent")
    monkeypatch.delenv(loading.MODEL_ENV)
    with pytest.raises(UserError, match=r"jina-ocr export --random --preset tiny DIR.*meaningless"):
        resolve_model(None)


def test_options_are_validated(converter):
    with pytest.raises(UserError, match="batch_size"):
        converter.with_options(batch_size=0)
    with pytest.raises(UserError, match="unknown dtype"):
        Converter.from_pretrained(converter.model.name_or_path, dtype="int4")


def test_the_bundled_model_says_once_that_it_is_the_demo_model(tiny_export, tmp_path, monkeypatch, capsys):
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    (bundled / "config.json").write_text("{}")
    monkeypatch.setattr(loading, "BUNDLED_MODEL", bundled)
    monkeypatch.setattr(loading, "_said", set())
    monkeypatch.delenv(loading.MODEL_ENV, raising=False)
    assert resolve_model(tiny_export) == tiny_export
    assert capsys.readouterr().err == ""  # an explicit model is not the demo model
    resolve_model(None)
    resolve_model(None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bundled jina-ocr-tiny" in err and "not jina-ocr-v1" in err


def test_a_document_is_opened_once_checked_before_the_model_loads_and_then_converted(
    tiny_export, fixtures_dir, monkeypatch
):
    opened = []
    open_document = documents.open_document

    def counted(source, **options):
        opened.append(source)
        return open_document(source, **options)

    monkeypatch.setattr(documents, "open_document", counted)
    scan = fixtures_dir / "tesseract" / "phototest.tif"
    assert [r.ok for r in jina_ocr.convert(scan, model=tiny_export, max_new_tokens=2)] == [True]
    assert opened == [scan]
