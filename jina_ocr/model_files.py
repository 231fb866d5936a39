"""A trained model as plain files: weights, config, tokenizer and the processor settings it was trained with.

Training writes this layout (and the repository ships jina-ocr-tiny in it) instead of a Hub folder, so
that no copy of the remote code is stored next to the weights: the loader (:mod:`jina_ocr.loading`)
builds the model from these files with the installed classes, and ``jina-ocr export`` turns them into
a Hub folder for users of plain Transformers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from jina_ocr.quantization import Quantization, load_quantized, quantization_of

WEIGHTS = "model.safetensors"
SETTINGS = "jina_ocr_model.json"
FUSED = re.compile(r"^(?P<experts>(?:.*\.)?mlp\.experts)\.(?P<name>gate_up_proj|down_proj)$")


def checkpoint_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fused expert tensors (``experts_jina_ocr``) -> one contiguous tensor per expert and projection, the
    checkpoint layout, for files written without ``save_pretrained`` (no storage shared with the model,
    as safetensors requires); every other key as it is."""
    out = {}
    for key, tensor in state.items():
        if (match := FUSED.match(key)) is None:
            out[key] = tensor
            continue
        if match["name"] == "down_proj":
            parts = {"down": tensor}
        else:
            parts = dict(zip(("gate", "up"), tensor.chunk(2, dim=1), strict=True))
        for e in range(tensor.shape[0]):
            for proj, stacked in parts.items():
                out[f"{match['experts']}.{e}.{proj}_proj.weight"] = stacked[e].clone(
                    memory_format=torch.contiguous_format
                )
    return out


def save_model_files(folder: str | Path, model, tokenizer, settings: dict[str, Any]) -> Path:
    """Write ``model``'s weights (in the checkpoint layout, one tensor per expert) and config,
    ``tokenizer`` and ``settings`` (processor mode, provenance). A quantised model's tensors are written
    as they are, its experts fused, and its quantisation is added to the settings."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(folder / "config.json")
    state = model.state_dict()
    if (quantization := quantization_of(model)) is not None:
        settings = {**settings, "quantization": quantization.settings()}
    else:
        state = checkpoint_layout(state)
    state = {name: tensor.detach().contiguous().cpu() for name, tensor in state.items()}
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


def build_processor(tokenizer, mode: str, pixels_per_token: int | None = None):
    """The jina-ocr processor with ``tokenizer`` and the image processor in ``mode`` (placeholder counts
    for ``pixels_per_token``, the config's ``pixels_per_visual_token``; None: the default geometry)."""
    from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor, JinaOCRProcessor

    geometry = {} if pixels_per_token is None else {"pixels_per_token": pixels_per_token}
    return JinaOCRProcessor(image_processor=JinaOCRImageProcessor(mode=mode, **geometry), tokenizer=tokenizer)


def load_model_files(folder: str | Path, dtype: torch.dtype = torch.float32, weights: bool = True):
    """(model, processor) from a folder written by :func:`save_model_files`, with this package's classes
    and the decoding defaults an export would write (FastMTP on when the model has a head, loop guard)."""
    from jina_ocr.generation_defaults import build_generation_config
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    folder = Path(folder)
    config = JinaOCRConfig.from_json_file(folder / "config.json")
    settings = load_settings(folder)
    if "quantization" in settings:  # the stored integers as they are, without a float copy
        quantization = Quantization.from_settings(settings["quantization"])
        layout = settings["quantization"].get("int4_rows", 64)
        model = load_quantized(config, folder / WEIGHTS, quantization, layout)
    else:
        model = JinaOCRForConditionalGeneration(config)
        if weights:
            model.load_state_dict(load_file(str(folder / WEIGHTS)), strict=True)
    model = model.to(dtype).eval()
    tokenizer = load_tokenizer(folder)
    mode = settings["processor_mode"]
    model.generation_config = build_generation_config(config, tokenizer, mode=mode)
    processor = build_processor(tokenizer, mode, config.pixels_per_visual_token)
    return model, processor
