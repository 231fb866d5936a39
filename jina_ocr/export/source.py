"""Read a checkpoint folder of the original layout (deepseek-ai/DeepSeek-OCR, jinaai/jina-ocr-v1) or
one of ours, so the export can rewrite it with our code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jina_ocr.errors import UserError


@dataclass
class Source:
    config: Any
    model: Any | None
    tokenizer: Any | None
    notes: list[str] = field(default_factory=list)


_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def stored_dtype(folder: Path):
    """The floating-point dtype the folder's safetensors store their weights in. Mixed files give the
    widest of their dtypes, into which every stored value converts exactly."""
    import torch
    from safetensors import safe_open

    found = set()
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                name = _SAFETENSORS_DTYPES.get(handle.get_slice(key).get_dtype())
                if name is not None:
                    found.add(getattr(torch, name))
    if not found:
        raise UserError(f"the weights in {folder} hold no floating-point tensors")
    if found == {torch.bfloat16, torch.float16}:  # neither holds the other's values exactly
        return torch.float32
    return max(found, key=lambda dtype: dtype.itemsize)


def load_source(folder: str | Path, weights: bool = True) -> Source:
    """Config (as shipped: nested DeepSeek-OCR blocks are read), weights in their stored dtype when
    asked for, and the tokenizer when the folder has one."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder} has no config.json; point --from at a checkpoint folder")
    # from_dict rather than from_pretrained: the original model_type ("deepseek_vl_v2") is expected here.
    config = JinaOCRConfig.from_dict(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    notes = []
    if not config.num_nextn_predict_layers:
        notes.append(f"{folder} has no FastMTP head: the export decodes with plain greedy (FastMTP off)")
    model = None
    if weights:
        if not any(folder.glob("*.safetensors")):
            raise UserError(
                f"{folder} has no .safetensors weights; pass --no-weights to convert the config only"
            )
        # Not dtype="auto": that follows config.json's torch_dtype, which may disagree with the stored
        # tensors (float32 weights under a config that says bfloat16 would be rounded silently).
        model, info = JinaOCRForConditionalGeneration.from_pretrained(
            folder, config=config, dtype=stored_dtype(folder), output_loading_info=True
        )
        if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
            raise UserError(f"the weights in {folder} do not fit the model: {info}")
    tokenizer = None
    if (folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
    return Source(config=config, model=model, tokenizer=tokenizer, notes=notes)
