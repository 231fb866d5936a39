"""The Hub folder is a model package and the tools run one copy of it.

The export ships the model package only (configuration, modeling, processing, the FastMTP generation
that ``model.generate`` needs, the pipeline, the version shim): no page scheduler, no document
renderer, and at most ``HUB_FOLDER_LINE_LIMIT`` lines, so that it cannot grow back into an engine.
The project's goal is 3,000 lines, about what Transformers' own DeepSeek-OCR-2 ships without any
speculative decoding; the limit here is what the package holds today and only ever comes down.

The installed tools build models from the installed classes: a conversion never imports a
``transformers_modules`` copy of the model code, which another release's export could have written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from jina_ocr.export.parts.code import remote_code_sources

HUB_FOLDER_LINE_LIMIT = 3250


def test_the_hub_folder_stays_within_its_line_limit(tiny_export):
    counts = {
        path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in tiny_export.glob("*.py")
    }
    assert set(counts) == set(remote_code_sources())  # what the test counts is what the export ships
    total = sum(counts.values())
    assert total <= HUB_FOLDER_LINE_LIMIT, f"{total} lines ship to the Hub: {sorted(counts.items())}"


def test_no_shipped_module_drives_a_batch_of_pages(tiny_export):
    """The batch driver, row stops and document rendering are installed code (jina_ocr.runtime)."""
    for path in tiny_export.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        for name in ("class BatchDriver", "class RowStops", "def ocr(", "import pymupdf"):
            assert name not in source, f"{path.name} ships {name!r}"


CONVERT_AND_LIST_MODULES = """
import json, sys
import jina_ocr
from jina_ocr.loading import load
model = None if sys.argv[1] == "-" else sys.argv[1]
pages = list(jina_ocr.convert(sys.argv[2], model=model, max_new_tokens=2, mode="tiny"))
loaded, _ = load(model)
print(json.dumps({
    "ok": [page.ok for page in pages],
    "class_module": type(loaded).__module__,
    "remote": sorted(name for name in sys.modules if name.startswith("transformers_modules")),
}))
"""


def _convert_in_a_fresh_process(model: str, document) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CONVERT_AND_LIST_MODULES, model, str(document)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_conversion_runs_the_installed_classes_only(tiny_export, fixtures_dir):
    """An exported folder (which carries remote code) and the bundled model files alike."""
    page = fixtures_dir / "tesseract" / "phototest.tif"
    for model in (str(tiny_export), "-"):
        report = _convert_in_a_fresh_process(model, page)
        assert report["ok"] == [True]
        assert report["class_module"] == "jina_ocr.remote_code.modeling_jina_ocr"
        assert report["remote"] == [], f"a conversion imported remote code: {report['remote']}"
