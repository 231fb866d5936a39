"""Bounded memory: a 300-page PDF streams through the document layer and the processor with at most one
batch of rendered pages (and one batch of pixel tensors) alive at any moment."""

from __future__ import annotations

import weakref

import pymupdf
import pytest

from jina_ocr.runtime.documents import PdfDocument, open_document
from jina_ocr.services.conversion import render_batches

PAGES = 300
BATCH = 4


def long_pdf(pages: int) -> bytes:
    """A text PDF whose pages differ, so that no page can be served from a cache of another."""
    document = pymupdf.open()
    for number in range(1, pages + 1):
        lines = [f"Chapter {number // 20 + 1}, page {number}"]
        lines += [f"Line {line} of page {number}: " + "lorem ipsum " * 5 for line in range(30)]
        document.new_page().insert_text((72, 72), "\n".join(lines), fontsize=11)
    return document.tobytes(garbage=3, deflate=True)


class Census:
    """Weak references to objects of one kind; ``alive()`` counts those not yet freed.

    There is deliberately no ``gc.collect()``: an object kept only by a reference cycle stays in
    memory until the collector happens to run, which is the growth this test is about.
    """

    def __init__(self):
        self.refs: list[weakref.ref] = []
        self.peak = 0

    def track(self, obj):
        self.refs.append(weakref.ref(obj))
        return obj

    def alive(self) -> int:
        count = sum(ref() is not None for ref in self.refs)
        self.peak = max(self.peak, count)
        return count


@pytest.fixture(scope="module")
def long_pdf_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("long") / "long.pdf"
    path.write_bytes(long_pdf(PAGES))
    return path


def test_rendering_every_page_keeps_one_page_alive(long_pdf_path, monkeypatch):
    images = Census()
    render = PdfDocument.render

    def tracked_render(self, number):
        assert images.alive() < BATCH, f"{images.alive()} pages still alive before rendering page {number}"
        return images.track(render(self, number))

    monkeypatch.setattr(PdfDocument, "render", tracked_render)
    with open_document(long_pdf_path, dpi=36) as document:
        assert document.page_count == PAGES
        seen = []
        for batch in render_batches(document, document.select(None), BATCH):
            assert images.alive() == len(batch)
            seen.extend(page.number for page in batch)
    assert seen == list(range(1, PAGES + 1))
    assert images.peak == BATCH  # a full batch exists, and never more


def test_300_pages_through_documents_and_processor_keep_one_batch_alive(
    long_pdf_path, tiny_export, monkeypatch
):
    import transformers

    processor = transformers.AutoProcessor.from_pretrained(tiny_export, trust_remote_code=True)
    images, tensors = Census(), Census()
    render = PdfDocument.render

    def tracked_render(self, number):
        # Before a page renders, only pages of the batch being filled may be alive: the previous
        # batch's pages and its tensors must be gone.
        assert images.alive() < BATCH and tensors.alive() == 0
        return images.track(render(self, number))

    monkeypatch.setattr(PdfDocument, "render", tracked_render)
    pages = 0
    with open_document(long_pdf_path, dpi=50) as document:
        for batch in render_batches(document, document.select("1-"), BATCH):
            inputs = processor.prepare_ocr_inputs(
                [page.image for page in batch], mode="tiny"
            )  # 512 px: cheap
            tensors.track(inputs["pixel_values"])
            assert images.alive() == len(batch) and tensors.alive() == 1
            assert inputs["input_ids"].shape[0] == len(batch)
            pages += len(batch)
            del inputs
    assert pages == PAGES
    assert images.peak == BATCH and tensors.peak == 1
