"""The exported folder loads with trust_remote_code in a process that has neither this repository
nor PyMuPDF, and runs a forward pass and greedy generation."""

from __future__ import annotations

import json
import os
import sys

import pytest
from isolation import run_as_hub_user

# CI sets JINA_OCR_FLOOR_PYTHON to an interpreter with the oldest supported Transformers, so the same
# exported folder is also loaded under that release.
FLOOR_PYTHON = os.environ.get("JINA_OCR_FLOOR_PYTHON")
INTERPRETERS = [
    pytest.param(sys.executable, id="installed-transformers"),
    pytest.param(
        FLOOR_PYTHON,
        id="oldest-supported-transformers",
        marks=pytest.mark.skipif(not FLOOR_PYTHON, reason="JINA_OCR_FLOOR_PYTHON is not set (CI sets it)"),
    ),
]

LOAD_AND_GENERATE = """
import json, sys, torch
from transformers import AutoConfig, AutoModelForImageTextToText, AutoModel, AutoModelForCausalLM
folder = sys.argv[1]
try:
    import jina_ocr
    raise SystemExit("jina_ocr must not be importable here")
except ModuleNotFoundError:
    pass
model = AutoModelForImageTextToText.from_pretrained(folder, trust_remote_code=True).eval()
config = model.config
assert type(model).__name__ == "JinaOCRForConditionalGeneration"
assert type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__name__ == "JinaOCRConfig"
for auto in (AutoModel, AutoModelForCausalLM):
    assert type(auto.from_pretrained(folder, trust_remote_code=True)).__name__ == type(model).__name__
torch.manual_seed(0)
view = torch.randn(1, 3, 1024, 1024)
ids = torch.tensor([[5, 6] + [config.image_token_id] * 273 + [8, 9]])
out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=view,
                     max_new_tokens=3, do_sample=False, use_mtp=False)
# Greedy means each generated token is the argmax after its prefix: one uncached forward checks all.
with torch.no_grad():
    logits = model(input_ids=out, pixel_values=view, use_cache=False).logits
greedy = logits[0, ids.shape[1] - 1 : -1].argmax(-1)
import transformers
print(json.dumps({"transformers": transformers.__version__, "logits": list(logits.shape), "generated": out[0, ids.shape[1]:].tolist(),
                  "greedy": greedy.tolist(), "module": type(model).__module__}))
"""


@pytest.mark.floor
@pytest.mark.parametrize("python", INTERPRETERS)
def test_exported_tiny_folder_loads_and_generates_as_a_hub_user(tiny_export, tmp_path, python):
    result = run_as_hub_user(LOAD_AND_GENERATE, tmp_path, str(tiny_export), python=python)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    config = json.loads((tiny_export / "config.json").read_text())
    assert report["logits"] == [1, 280, config["vocab_size"]]
    assert report["generated"] == report["greedy"]
    assert report["module"].startswith("transformers_modules.")


def test_export_ships_flat_code_and_every_auto_class(tiny_export):
    config = json.loads((tiny_export / "config.json").read_text())
    assert set(config["auto_map"]) >= {
        "AutoConfig",
        "AutoModel",
        "AutoModelForCausalLM",
        "AutoModelForImageTextToText",
    }
    shipped = {p.name for p in tiny_export.glob("*.py")}
    assert {
        "configuration_jina_ocr.py",
        "modeling_jina_ocr.py",
        "compat_jina_ocr.py",
        "pages_jina_ocr.py",
        "pipeline_jina_ocr.py",
    } <= shipped
    assert "__init__.py" not in shipped
    assert not [p for p in tiny_export.iterdir() if p.is_dir()]


def test_model_card_front_matter_and_lfs_rules(tiny_export):
    card = (tiny_export / "README.md").read_text()
    front = card.split("---")[1]
    assert "license: apache-2.0" in front and "pipeline_tag: image-to-text" in front
    assert "library_name: transformers" in front
    assert "random weights" in card and "__" not in card
    assert "*.safetensors filter=lfs" in (tiny_export / ".gitattributes").read_text()
