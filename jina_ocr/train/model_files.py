"""A trained model as plain files: weights, config, tokenizer and the processor settings it was trained with.

Training writes this layout (and the repository ships jina-ocr-tiny in it) instead of a Hub folder, so
that no copy of the remote code is stored next to the weights: :mod:`jina_ocr.models` builds the Hub
folder from these files with the current code whenever the model is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from jina_ocr.remote_code.experts_jina_ocr import checkpoint_layout

WEIGHTS = "model.safetensors"
SETTINGS = "jina_ocr_model.json"


def save_model_files(folder: str | Path, model, tokenizer, settings: dict[str, Any]) -> Path:
    """Write ``model``'s weights (in the checkpoint layout, one tensor per expert) and config,
    ``tokenizer`` and ``settings`` (processor mode, provenance)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(folder / "config.json")
    state = {
        name: tensor.detach().contiguous().cpu()
        for name, tensor in checkpoint_layout(model.state_dict()).items()
    }
    tmp = folder / f".{WEIGHTS}.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    tmp.replace(folder / WEIGHTS)
    tokenizer.save_pretrained(folder)
    (folder / SETTINGS).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return folder


def load_settings(folder: str | Path) -> dict[str, Any]:
    return json.loads((Path(folder) / SETTINGS).read_text(encoding="utf-8"))


def load_tokenizer(folder: str | Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def build_processor(tokenizer, mode: str):
    """The jina-ocr processor with ``tokenizer`` and the image processor in ``mode``."""
    from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor, JinaOCRProcessor

    return JinaOCRProcessor(image_processor=JinaOCRImageProcessor(mode=mode), tokenizer=tokenizer)


def load_model_files(folder: str | Path, dtype: torch.dtype = torch.float32, weights: bool = True):
    """(model, processor) from a folder written by :func:`save_model_files`, with this package's classes."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    folder = Path(folder)
    config = JinaOCRConfig.from_json_file(folder / "config.json")
    model = JinaOCRForConditionalGeneration(config)
    if weights:
        model.load_state_dict(load_file(str(folder / WEIGHTS)), strict=True)
    model = model.to(dtype).eval()
    tokenizer = load_tokenizer(folder)
    processor = build_processor(tokenizer, load_settings(folder)["processor_mode"])
    return model, processor
