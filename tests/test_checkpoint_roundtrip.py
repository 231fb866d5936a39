"""Checkpoints in the original per-expert layout load with no missing or unexpected keys and are
written back key for key and bit for bit."""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file
from small_config import SMALL

from jina_ocr.model_files import checkpoint_layout
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration


def write_original_checkpoint(folder, extra_copies: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    config = JinaOCRConfig(**SMALL)
    model = JinaOCRForConditionalGeneration(config).to(torch.bfloat16)
    tensors = checkpoint_layout(model.state_dict())
    tensors = {k: v + torch.randn_like(v) * 0.01 for k, v in tensors.items()}  # no two equal tensors
    assert "model.layers.1.mlp.experts.5.down_proj.weight" in tensors  # per-expert keys, as published
    stored = dict(tensors)
    if extra_copies:  # the duplicate head tensors some jina-ocr-v1 revisions carry
        head = "mtp_module.heads.0."
        stored[head + "mtp_embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()
        stored[head + "shared_head.norm.weight"] = tensors["model.norm.weight"].clone()
        stored[head + "shared_head.local_head.weight"] = tensors["lm_head.weight"].clone()
    folder.mkdir()
    config.save_pretrained(folder)
    save_file(stored, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return tensors


def test_original_layout_loads_and_saves_back_bit_for_bit(tmp_path):
    tensors = write_original_checkpoint(tmp_path / "original", extra_copies=False)
    model, info = JinaOCRForConditionalGeneration.from_pretrained(
        tmp_path / "original", dtype=torch.bfloat16, output_loading_info=True
    )
    assert info["missing_keys"] == [] or info["missing_keys"] == set()
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    model.save_pretrained(tmp_path / "saved")
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert sorted(saved) == sorted(tensors)
    for key, value in tensors.items():
        assert saved[key].dtype == value.dtype and torch.equal(saved[key], value), key


def test_duplicate_head_tensors_are_accepted_and_dropped(tmp_path):
    tensors = write_original_checkpoint(tmp_path / "original", extra_copies=True)
    model, info = JinaOCRForConditionalGeneration.from_pretrained(
        tmp_path / "original", dtype=torch.bfloat16, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert torch.equal(model.lm_head.weight, tensors["lm_head.weight"])
    model.save_pretrained(tmp_path / "saved")
    assert sorted(load_file(str(tmp_path / "saved" / "model.safetensors"))) == sorted(tensors)
