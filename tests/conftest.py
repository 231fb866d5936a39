"""Shared fixtures: the repository's real-world fixture files, its sample builder and one tiny exported
model per session."""

from __future__ import annotations

import importlib.util
import shutil
import signal
from pathlib import Path

import pytest

# Under CI=true every skip fails, except those skip_policy.ALLOWED_IN_CI names.
pytest_plugins = ["skip_policy"]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SAMPLES = Path(__file__).resolve().parents[1] / "samples"
# ``jina-ocr convert`` options that keep a run fast: 512 px views and two new tokens per page.
FAST_CONVERT = ("--mode", "tiny", "--max-new-tokens", "2")


@pytest.fixture(scope="session", autouse=True)
def interruptible():
    """Ctrl-C raises KeyboardInterrupt here and in the CLI processes the tests start.

    A shell that starts the suite as a background job ignores SIGINT, and an ignored signal stays
    ignored in every child, so the tests of Ctrl-C would see nothing happen. Python's own handler,
    set here, becomes the default again in a child at exec.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Real PDFs, scans and checkpoint metadata (tests/fixtures/README.md says what and whose)."""
    return FIXTURES


@pytest.fixture(scope="session")
def make_sample():
    """``samples/make_sample.py`` as a module: the builders of the README's samples and their text."""
    spec = importlib.util.spec_from_file_location("make_sample", SAMPLES / "make_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory) -> Path:
    """A tiny random-weight Hub folder (code, config, weights, tokenizer, processor), exported once."""
    from jina_ocr.export.presets import export_random

    return export_random(tmp_path_factory.mktemp("tiny") / "jina-ocr-tiny", preset="tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_mtp_export(tmp_path_factory) -> Path:
    """The same tiny folder with FastMTP on in its generation config (``jina-ocr export --mtp on``), for
    the tests of drafting; random exports otherwise decode with plain greedy."""
    from jina_ocr.export.presets import export_random

    folder = tmp_path_factory.mktemp("tiny-mtp") / "jina-ocr-tiny"
    return export_random(folder, preset="tiny", seed=0, mtp=True)


@pytest.fixture(scope="session")
def lively_export(tiny_mtp_export, tmp_path_factory) -> Path:
    """The tiny export (FastMTP on) with its decoder and head weights scaled up (see
    ``model_edits.make_lively``): its greedy text differs from page to page."""
    from model_edits import make_lively, rewrite_weights

    folder = tmp_path_factory.mktemp("lively") / "jina-ocr-tiny"
    shutil.copytree(tiny_mtp_export, folder)
    rewrite_weights(folder, make_lively)
    return folder


@pytest.fixture()
def run(tiny_export, capsys):
    """``jina-ocr convert ARGS`` in this process with the fast options: (exit status, stdout, stderr).
    The model is the tiny export unless ``model=`` names another folder."""
    from jina_ocr.cli import main

    def invoke(*args, model: Path | None = None) -> tuple[int, str, str]:
        status = main(["convert", *map(str, args), "--model", str(model or tiny_export), *FAST_CONVERT])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return invoke


@pytest.fixture(scope="module")
def ray_cluster():
    """A local two-CPU Ray for the tests of a module that need one, and a bucket on an S3-compatible
    server on 127.0.0.1 made before it, so that its workers inherit the variables pointing at it:
    ``(address for --ray, bucket name)``. Ray takes seconds to start; command-line drivers join this
    one through the address instead of starting their own. It is shut down with its module, so that
    its idle processes do not slow the tests after it."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    pytest.importorskip("moto.server")
    from object_store import s3_bucket

    with s3_bucket("ray") as bucket:
        context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield context.address_info["gcs_address"], bucket
        finally:
            ray.shutdown()
