"""``jina-ocr convert`` at scale: with ``--ray`` the fixture documents and 50 generated PDFs give the
files a local run gives; a Ray run stopped with Ctrl-C and resumed converts only what is missing; and
documents are read from and written to an S3-compatible server on 127.0.0.1, with and without Ray."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from conftest import FAST_CONVERT
from object_store import put
from stub_endpoint import StubEndpoint, running
from test_documents import pdf_with_pages
from test_endpoints import run_cli_process, wait_for

from jina_ocr.cli import main
from jina_ocr.runtime.documents import find_documents
from jina_ocr.services import storage


def archive(folder: Path) -> Path:
    """50 PDFs of one to three pages, each page with its own text."""
    folder.mkdir()
    for index in range(50):
        (folder / f"report-{index:02d}.pdf").write_bytes(
            pdf_with_pages(1 + index % 3, (300 + 4 * index, 400))
        )
    return folder


def outputs(folder: Path) -> dict[str, dict]:
    """The documents' JSON outputs in ``folder`` (not the run's record and summary) by name, without
    the seconds each page took."""
    found = {}
    for path in sorted(folder.iterdir()):
        if not path.name.startswith("."):
            record = json.loads(path.read_text())
            for page in record["pages"]:
                del page["seconds"]
            found[path.name] = record
    return found


def test_a_ray_run_equals_a_local_run_and_resumes_after_ctrl_c(
    ray_cluster, tiny_export, fixtures_dir, tmp_path
):
    address, _ = ray_cluster
    inputs = [fixtures_dir / "olmocr", fixtures_dir / "tesseract", archive(tmp_path / "archive")]
    common = [*inputs, "--model", tiny_export, *FAST_CONVERT, "--format", "json"]
    assert main(["convert", *map(str, common), "-o", str(tmp_path / "local")]) == 0
    local = outputs(tmp_path / "local")
    assert len(local) == sum(len(find_documents(folder)) for folder in inputs)

    out = tmp_path / "ray"
    first = run_cli_process(*common, "-o", out, f"--ray={address}", "--batch-size", "2")
    try:
        wait_for(lambda: out.exists() and len(outputs(out)) >= 5, seconds=180)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 130, err
    done = {name: (out / name).stat().st_mtime_ns for name in outputs(out)}
    assert 5 <= len(done) < len(local)

    second = run_cli_process(*common, "-o", out, f"--ray={address}", "--resume")
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert f"resuming: {len(done)} of {len(local)} documents already converted" in err
    assert outputs(out) == local
    assert {name: (out / name).stat().st_mtime_ns for name in done} == done  # not converted twice


def test_documents_in_object_storage_convert_into_object_storage(ray_cluster, tiny_export, tmp_path, capsys):
    """``s3://bucket/in/`` to ``-o s3://bucket/out/``: the objects a local run writes as files, the record
    and summary beside them; a resume there skips every document; and the same through Ray."""
    address, bucket = ray_cluster
    folder = tmp_path / "in"
    folder.mkdir()
    for index in range(3):
        data = pdf_with_pages(index + 1, (300 + 10 * index, 400))
        (folder / f"d{index}.pdf").write_bytes(data)
        put(f"s3://{bucket}/in/d{index}.pdf", data)
    put(f"s3://{bucket}/in/readme.txt", b"not a document")
    fast = ["--model", str(tiny_export), *FAST_CONVERT]
    assert main(["convert", str(folder), "-o", str(tmp_path / "local"), *fast]) == 0
    local = sorted((tmp_path / "local").iterdir())
    expected = {path.name: path.read_text() for path in local if not path.name.startswith(".")}

    def objects(prefix: str) -> dict[str, str]:
        return {name: storage.read_text(f"s3://{bucket}/{prefix}/{name}") for name in expected}

    assert main(["convert", f"s3://{bucket}/in/", "-o", f"s3://{bucket}/out", *fast]) == 0
    assert objects("out") == expected
    assert storage.exists(f"s3://{bucket}/out/.jina-ocr-convert.json")
    assert '"pages": 6' in storage.read_text(f"s3://{bucket}/out/.jina-ocr-summary.json")
    capsys.readouterr()
    assert main(["convert", f"s3://{bucket}/in/", "-o", f"s3://{bucket}/out/", *fast, "--resume"]) == 0
    assert "resuming: 3 of 3 documents already converted" in capsys.readouterr().err

    assert (
        main(["convert", f"s3://{bucket}/in/", "-o", f"s3://{bucket}/ray/", *fast, f"--ray={address}"]) == 0
    )
    assert objects("ray") == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--workers", "2"], "--workers and --gpus-per-worker work with --ray"),
        (["--ray", "--workers", "0"], "--workers must be at least 1, got 0"),
        (["--ray=auto", "--gpus-per-worker", "-1"], "--gpus-per-worker must be 0 or more, got -1.0"),
        (["--ray", "https://example.org/a.pdf"], "looks like an input, not a Ray address"),
    ],
)
def test_ray_usage_errors_are_one_line(tmp_path, capsys, arguments, message):
    document = tmp_path / "a.pdf"
    document.write_bytes(pdf_with_pages(1))
    assert main(["convert", str(document), *arguments]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_with_ray_documents_fetched_over_http_are_refused(tmp_path, capsys):
    assert main(["convert", "https://example.org/a.pdf", "--ray=auto"]) == 2
    assert "with --ray, documents are read where their pages are drawn" in capsys.readouterr().err


def test_ray_actors_send_pages_to_endpoints(ray_cluster, tmp_path):
    """With ``--endpoint``, the Ray actors are endpoint clients: every page is sent once to the server
    and the outputs are those an endpoint run gives."""
    address, _ = ray_cluster
    folder = tmp_path / "in"
    folder.mkdir()
    for index in range(3):
        (folder / f"d{index}.pdf").write_bytes(pdf_with_pages(index + 1, (300 + 10 * index, 400)))
    stub = StubEndpoint()
    with running(stub) as url:
        common = ["convert", str(folder), "--format", "json", "--endpoint", url]
        direct = main([*common, "-o", str(tmp_path / "direct")])
        sent = len(stub.chats)
        via_ray = main([*common, "-o", str(tmp_path / "ray"), f"--ray={address}"])
    assert direct == via_ray == 0
    assert sent == 6 and len(stub.chats) == 12
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "direct")
