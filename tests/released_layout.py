"""A tiny checkpoint in jina-ocr-v1's released layout, as the Hub repository jinaai/jina-ocr-v1 holds it.

``config.json`` is the published one (``fixtures/jina_ocr_v1/config.json``: model_type
``deepseek_vl_v2``, decoder keys at the top and under ``language_config``, ``image_token_index``, the
head's ``mtp_*`` keys) with every dimension shrunk and the vocabulary of the small test tokenizer;
the weights are per-expert safetensors with the head's ``mtp_module.heads.0.*`` tensors (and, on
request, the shared copies some revisions carry); ``processor_config.json`` is the published one; and
a stand-in for the repository's own remote code, which nothing here may run.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from jina_ocr.model_files import checkpoint_layout
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.tokenizer import build_tiny_tokenizer

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "jina_ocr_v1" / "config.json"

DECODER = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "moe_intermediate_size": 16,
    "num_hidden_layers": 3,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "n_routed_experts": 6,
    "n_shared_experts": 2,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 8192,
}

PROCESSOR_CONFIG = {
    "base_size": 1024,
    "crop_mode": True,
    "image_size": 640,
    "processor_class": "DeepseekOCRProcessor",
}

REMOTE_CODE = 'raise SystemExit("the released repository\'s own code ran")\n'


def released_config(tokenizer) -> dict:
    """The published config.json, shrunk: the schema exactly as shipped, the sizes of a test model."""
    config = copy.deepcopy(json.loads(FIXTURE.read_text(encoding="utf-8")))
    widths = config["vision_config"]["width"]
    widths["sam_vit_b"].update(
        width=16, layers=2, heads=2, global_attn_indexes=[1], downsample_channels=[24, 32]
    )
    widths["clip-l-14-224"].update(width=32, layers=1, heads=2)
    config["projector_config"].update(input_dim=64, n_embed=DECODER["hidden_size"])
    tokens = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config.update(DECODER, **tokens, image_token_index=tokenizer.convert_tokens_to_ids("<image>"))
    config["language_config"].update(DECODER, **tokens)
    config["dtype"] = config["language_config"]["torch_dtype"] = "float32"  # the weights below are float32
    return config


def write_released(
    folder: Path, seed: int = 0, shared_copies: bool = False
) -> JinaOCRForConditionalGeneration:
    """Write the checkpoint into ``folder`` (new) and return the model whose weights it holds."""
    tokenizer = build_tiny_tokenizer()
    raw = released_config(tokenizer)
    torch.manual_seed(seed)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig.from_dict(copy.deepcopy(raw))).eval()
    tensors = {name: tensor.contiguous() for name, tensor in checkpoint_layout(model.state_dict()).items()}
    if shared_copies:
        head = "mtp_module.heads.0."
        tensors[head + "mtp_embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()
        tensors[head + "shared_head.norm.weight"] = tensors["model.norm.weight"].clone()
        tensors[head + "shared_head.local_head.weight"] = tensors["lm_head.weight"].clone()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(raw, indent=2), encoding="utf-8")
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)
    (folder / "processor_config.json").write_text(json.dumps(PROCESSOR_CONFIG), encoding="utf-8")
    (folder / "modeling_deepseekocr.py").write_text(REMOTE_CODE, encoding="utf-8")
    return model
