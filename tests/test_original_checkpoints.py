"""Folders laid out like deepseek-ai/DeepSeek-OCR or jinaai/jina-ocr-v1 (their config.json schema,
per-expert safetensors, optional FastMTP head and duplicate head tensors) load into our classes and
convert to our Hub folder; broken folders are refused with a clear message."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

from jina_ocr.cli import main as cli
from jina_ocr.export.folder import ExportError, validate_folder
from jina_ocr.model_files import checkpoint_layout
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

DECODER = {
    "vocab_size": 50,
    "hidden_size": 24,
    "intermediate_size": 40,
    "moe_intermediate_size": 8,
    "num_hidden_layers": 3,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "n_routed_experts": 6,
    "n_shared_experts": 2,
    "num_experts_per_tok": 3,
    "image_token_id": 7,  # the real id (128815) does not fit this vocabulary
}


def original_config(fixtures_dir, with_head: bool) -> dict:
    """The real DeepSeek-OCR config.json with every dimension shrunk, the schema kept as shipped."""
    config = copy.deepcopy(json.loads((fixtures_dir / "deepseek_ocr" / "config.json").read_text()))
    widths = config["vision_config"]["width"]
    widths["sam_vit_b"].update(
        width=16, layers=2, heads=2, global_attn_indexes=[1], downsample_channels=[12, 16]
    )
    widths["clip-l-14-224"].update(width=16, layers=1, heads=2)
    config["projector_config"]["n_embed"] = 24
    config.update(DECODER, torch_dtype="float32")  # the random weights below are stored in float32
    config["language_config"].update(DECODER)
    if with_head:  # jina-ocr-v1 adds its FastMTP fields at the top level
        config.update(num_nextn_predict_layers=1, mtp_num_speculative_steps=3, mtp_recursive=True)
    return config


def write_original(folder, fixtures_dir, with_head: bool, duplicates: bool = False, dtype=torch.float32):
    raw = original_config(fixtures_dir, with_head)
    torch.manual_seed(0)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig.from_dict(copy.deepcopy(raw))).to(dtype).eval()
    tensors = checkpoint_layout(model.state_dict())
    if duplicates:
        head = "mtp_module.heads.0."
        tensors[head + "mtp_embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()
        tensors[head + "shared_head.norm.weight"] = tensors["model.norm.weight"].clone()
        tensors[head + "shared_head.local_head.weight"] = tensors["lm_head.weight"].clone()
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return model


def sample_logits(model) -> torch.Tensor:
    torch.manual_seed(1)
    view = torch.randn(1, 3, 128, 128)
    ids = torch.tensor([[3, 4] + [model.config.image_token_id] * 7 + [5]])
    with torch.no_grad():
        return model(input_ids=ids, pixel_values=view).logits


@pytest.mark.parametrize(("with_head", "duplicates"), [(False, False), (True, False), (True, True)])
def test_original_layout_loads_with_no_missing_or_unexpected_keys(
    tmp_path, fixtures_dir, with_head, duplicates
):
    reference = write_original(tmp_path / "ckpt", fixtures_dir, with_head, duplicates)
    loaded, info = JinaOCRForConditionalGeneration.from_pretrained(
        tmp_path / "ckpt", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert hasattr(loaded, "mtp_module") == with_head
    torch.testing.assert_close(sample_logits(loaded.eval()), sample_logits(reference), rtol=0, atol=0)


def test_export_from_original_checkpoint_gives_a_folder_with_our_code(tmp_path, fixtures_dir):
    reference = write_original(tmp_path / "ckpt", fixtures_dir, with_head=False)
    assert cli(["export", "--from", str(tmp_path / "ckpt"), str(tmp_path / "out")]) == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "jina_ocr"
    assert (
        config["auto_map"]["AutoModelForImageTextToText"]
        == "modeling_jina_ocr.JinaOCRForConditionalGeneration"
    )
    assert "language_config" not in config and config["num_nextn_predict_layers"] == 0
    assert "license: cc-by-nc-4.0" in (tmp_path / "out" / "README.md").read_text()  # jina-ocr-v1's weights
    from transformers import AutoModelForImageTextToText

    loaded = AutoModelForImageTextToText.from_pretrained(tmp_path / "out", trust_remote_code=True).eval()
    torch.testing.assert_close(sample_logits(loaded), sample_logits(reference), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("stored", "claimed"), [(torch.float32, "bfloat16"), (torch.bfloat16, "float32"), (torch.float32, None)]
)
def test_export_keeps_the_stored_dtype_whatever_the_config_says(tmp_path, fixtures_dir, stored, claimed):
    """config.json's torch_dtype is only a claim: the weights come out bit for bit as they went in."""
    write_original(tmp_path / "ckpt", fixtures_dir, with_head=True, dtype=stored)
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config.pop("torch_dtype")
    if claimed:
        config["torch_dtype"] = claimed
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    assert cli(["export", "--from", str(tmp_path / "ckpt"), str(tmp_path / "out")]) == 0
    source = load_file(tmp_path / "ckpt" / "model.safetensors")
    exported = load_file(tmp_path / "out" / "model.safetensors")
    assert set(exported) == set(source)
    for key, tensor in source.items():
        assert exported[key].dtype == stored, key
        assert torch.equal(exported[key], tensor), key


def test_export_of_the_real_deepseek_config_builds_the_full_model(tmp_path, fixtures_dir, capsys):
    assert (
        cli(["export", "--from", str(fixtures_dir / "deepseek_ocr"), "--no-weights", str(tmp_path / "out")])
        == 0
    )
    assert "no FastMTP head" in capsys.readouterr().out
    config = JinaOCRConfig.from_pretrained(tmp_path / "out")
    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(config)
    assert sum(p.numel() for p in model.parameters()) == 3_336_106_240
    assert not list((tmp_path / "out").glob("*.safetensors"))


@pytest.fixture
def exported(tmp_path, fixtures_dir):
    write_original(tmp_path / "ckpt", fixtures_dir, with_head=True)
    assert cli(["export", "--from", str(tmp_path / "ckpt"), str(tmp_path / "out")]) == 0
    return tmp_path / "out"


def test_validation_refuses_a_missing_auto_map_target(exported):
    config = json.loads((exported / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "modeling_jina_ocr.NoSuchModel"
    (exported / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match="defines no class NoSuchModel"):
        validate_folder(exported)
    (exported / "modeling_jina_ocr.py").unlink()
    with pytest.raises(ExportError, match="modeling_jina_ocr"):
        validate_folder(exported)


def test_validation_refuses_a_subpackage_import(exported):
    path = exported / "modeling_jina_ocr.py"
    path.write_text(path.read_text() + "\nfrom .generation.fastmtp import FastMTP\n")
    with pytest.raises(ExportError, match="subpackage"):
        validate_folder(exported)


def test_validation_refuses_weights_that_do_not_fit_the_config(exported):
    config = json.loads((exported / "config.json").read_text())
    config["hidden_size"] = 32
    config["num_attention_heads"] = 4
    (exported / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match="do not match its config.json"):
        validate_folder(exported)


def test_export_refuses_a_non_empty_folder_and_a_folder_without_config(tmp_path, capsys):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    assert cli(["export", "--random", "--no-weights", str(tmp_path / "busy")]) == 2
    assert "not empty" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli(["export", "--from", str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_a_checkpoint_without_head_says_once_that_fastmtp_is_off(tmp_path, fixtures_dir, caplog):
    from transformers.utils import logging as hf_logging

    write_original(tmp_path / "ckpt", fixtures_dir, with_head=False)
    logging.Logger.warning_once.cache_clear()  # "once" is per process; earlier tests may have used it
    hf_logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"):
            JinaOCRForConditionalGeneration.from_pretrained(tmp_path / "ckpt")
            JinaOCRForConditionalGeneration.from_pretrained(tmp_path / "ckpt")
    finally:
        hf_logging.disable_propagation()
    assert sum("no FastMTP head" in record.getMessage() for record in caplog.records) == 1
