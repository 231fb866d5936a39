"""Shared fixtures: paths to the shared real-world fixtures and one tiny exported model per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"the shared fixtures are missing: expected them at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory) -> Path:
    """A tiny random-weight Hub folder (code, config, weights, tokenizer, processor), exported once."""
    from jina_ocr.export.presets import export_random

    return export_random(tmp_path_factory.mktemp("tiny") / "jina-ocr-tiny", preset="tiny", seed=0)


@pytest.fixture(scope="session")
def lively_export(tiny_export, tmp_path_factory) -> Path:
    """The tiny export with its decoder and head weights scaled up (see ``model_edits.make_lively``):
    its greedy text differs from page to page."""
    from model_edits import make_lively, rewrite_weights

    folder = tmp_path_factory.mktemp("lively") / "jina-ocr-tiny"
    shutil.copytree(tiny_export, folder)
    rewrite_weights(folder, make_lively)
    return folder
