"""``RayConverter`` on a local two-CPU Ray: the same pages as a local ``Converter``, read from files and
from an S3-compatible server (moto on 127.0.0.1), and still every page once when a model actor and a
render worker are killed mid-run. Ray starts once for the module (it takes seconds)."""

from __future__ import annotations

import signal
import threading
import time

import psutil
import pymupdf
import pytest
from object_store import put
from test_documents import pdf_with_a_blank_second_page, pdf_with_pages

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pytest.importorskip("moto.server")

from jina_ocr.errors import UserError  # noqa: E402
from jina_ocr.loading import BUNDLED_MODEL  # noqa: E402
from jina_ocr.runtime.documents import open_document  # noqa: E402
from jina_ocr.services import storage  # noqa: E402
from jina_ocr.services.conversion import Converter  # noqa: E402
from jina_ocr.services.ray_pages import RayConverter  # noqa: E402

FAST = dict(mode="tiny", max_new_tokens=6)
COMPARED = ("source", "page", "markdown", "tokens", "finish_reason", "error")


@pytest.fixture(scope="module")
def bucket(ray_cluster):
    return ray_cluster[1]


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    return ray_cluster[0]


def expected(work, **options) -> list[list[tuple]]:
    """What a local converter makes of ``work``, document by document (``s3://`` read as bytes)."""
    local = Converter.from_pretrained(BUNDLED_MODEL).with_options(**FAST, **options)
    pages = []
    for source, numbers in work:
        data = storage.read_bytes(source) if storage.is_object_url(source) else source
        document = open_document(data, name=source, dpi=local.dpi, max_pixels=local.max_pixels)
        pages.append([fields(result) for result in local.convert(document, numbers)])
    return pages


def fields(result) -> tuple:
    return tuple(getattr(result, name) for name in COMPARED)


def pdf_with_a_page_too_large() -> bytes:
    """Two pages, the second far beyond the pixel limit at 144 dpi: it fails to render, alone."""
    document = pymupdf.open()
    document.new_page(width=300, height=200).insert_text((30, 60), "Small", fontsize=24)
    document.new_page(width=14000, height=14000)
    return document.tobytes()


def test_endpoint_runs_refuse_the_model_options():
    with pytest.raises(UserError, match="^model, mode: set on the servers"):
        RayConverter(endpoints=["http://127.0.0.1:1/v1"], model="m", mode="tiny")
    with pytest.raises(UserError, match="workers"):
        RayConverter(workers=0)


def test_pages_equal_a_local_run_from_files_and_object_storage(cluster, bucket, fixtures_dir, tmp_path):
    (tmp_path / "three.pdf").write_bytes(pdf_with_pages(3))
    (tmp_path / "blank.pdf").write_bytes(pdf_with_a_blank_second_page())
    (tmp_path / "large.pdf").write_bytes(pdf_with_a_page_too_large())
    storage.write_text(f"s3://{bucket}/in/notes.md", "not a document")
    put(f"s3://{bucket}/in/remote.pdf", pdf_with_pages(2, (300, 400)))
    work = [
        (str(tmp_path / "three.pdf"), [1, 3]),
        (str(fixtures_dir / "tesseract" / "phototest.tif"), [1]),
        (f"s3://{bucket}/in/remote.pdf", [1, 2]),
        (str(tmp_path / "blank.pdf"), [1, 2, 3]),
        (str(fixtures_dir / "olmocr" / "multi_column_miss.pdf"), [1]),
        (str(tmp_path / "large.pdf"), [1, 2]),
        (f"s3://{bucket}/in/gone.pdf", [1]),
    ]
    converter = RayConverter(model=BUNDLED_MODEL, batch_size=3, **FAST)
    try:
        converter.schedule(work)
        got = [[fields(result) for result in converter.convert(source, numbers)] for source, numbers in work]
        # Out of turn, with a selection the plan does not have: converted alone.
        alone = [fields(result) for result in converter.convert(str(tmp_path / "three.pdf"), "2-3")]
    finally:
        converter.close()
    local = expected(work[:-1])
    assert got[:-1] == local
    assert got[3][1][2:5] == ("", 0, "stop")  # the blank page, without the model
    assert got[5][1][5].startswith("page would be 28000x28000 = 784,000,000 pixels, over the limit")
    assert got[-1] == [(f"s3://{bucket}/in/gone.pdf", 1, None, 0, "error", "no such object")]
    assert alone == expected([(str(tmp_path / "three.pdf"), [2, 3])])[0]
    assert ray.is_initialized()  # the converter leaves a Ray it did not start running


def kill_one(title: str) -> int | None:
    """SIGKILL the first Ray worker process whose title starts with ``title``; its pid, or None."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if cmdline.startswith(title):
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                continue
            return process.pid
    return None


def test_killed_model_actor_and_render_worker_lose_no_page_and_repeat_none(cluster, tmp_path):
    """A render worker is killed while it draws, the model actor once it has sent its first pages: Ray
    restarts both and runs their work again, and every page comes back once."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.pdf").write_bytes(pdf_with_pages(10, (300, 400)))
    work = [(str(tmp_path / "a.pdf"), list(range(1, 11))), (str(tmp_path / "b.pdf"), list(range(1, 11)))]
    killed: dict[str, int] = {}
    first_result = threading.Event()
    done = threading.Event()

    def assassin():
        while "render" not in killed and not done.is_set():
            pid = kill_one("ray::MapBatches(_render)")
            if pid is not None:
                killed["render"] = pid
            time.sleep(0.005)
        first_result.wait()
        pid = kill_one("ray::MapWorker(MapBatches(_PageModel))")
        if pid is not None:
            killed["model"] = pid

    converter = RayConverter(model=BUNDLED_MODEL, batch_size=2, dpi=300, **FAST)
    thread = threading.Thread(target=assassin, daemon=True)
    got = []
    try:
        converter.schedule(work)
        thread.start()
        for source, numbers in work:
            for result in converter.convert(source, numbers):
                got.append(fields(result))
                first_result.set()
    finally:
        done.set()
        first_result.set()
        thread.join()
        converter.close()
    assert set(killed) == {"render", "model"}, killed
    assert got == [page for document in expected(work, dpi=300) for page in document]
