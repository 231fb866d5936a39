"""The full-size model: exact parameter count and the checkpoint layout of SPEC section 2, both ways."""

from __future__ import annotations

import json
import re

import pytest
import torch

from jina_ocr.model_files import checkpoint_layout
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

# Written from SPEC section 2, independently of the model code: (key pattern, shape) for every tensor.
SAM = "model.sam_model."
CLIP = "model.vision_model."
GLOBAL_BLOCKS = {2, 5, 8, 11}


def spec_layout() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {
        SAM + "patch_embed.proj.weight": (768, 3, 16, 16),
        SAM + "patch_embed.proj.bias": (768,),
        SAM + "pos_embed": (1, 64, 64, 768),
        SAM + "neck.0.weight": (256, 768, 1, 1),
        SAM + "neck.1.weight": (256,),
        SAM + "neck.1.bias": (256,),
        SAM + "neck.2.weight": (256, 256, 3, 3),
        SAM + "neck.3.weight": (256,),
        SAM + "neck.3.bias": (256,),
        SAM + "net_2.weight": (512, 256, 3, 3),
        SAM + "net_3.weight": (1024, 512, 3, 3),
        CLIP + "embeddings.class_embedding": (1024,),
        CLIP + "embeddings.patch_embedding.weight": (1024, 3, 14, 14),
        CLIP + "embeddings.position_embedding.weight": (257, 1024),
        CLIP + "pre_layrnorm.weight": (1024,),
        CLIP + "pre_layrnorm.bias": (1024,),
        "model.projector.layers.weight": (1280, 2048),
        "model.projector.layers.bias": (1280,),
        "model.image_newline": (1280,),
        "model.view_seperator": (1280,),
        "model.embed_tokens.weight": (129280, 1280),
        "model.norm.weight": (1280,),
        "lm_head.weight": (129280, 1280),
    }
    for n in range(12):
        b = f"{SAM}blocks.{n}."
        rel = 127 if n in GLOBAL_BLOCKS else 27
        for norm in ("norm1", "norm2"):
            shapes[b + norm + ".weight"] = (768,)
            shapes[b + norm + ".bias"] = (768,)
        shapes.update(
            {
                b + "attn.qkv.weight": (2304, 768),
                b + "attn.qkv.bias": (2304,),
                b + "attn.proj.weight": (768, 768),
                b + "attn.proj.bias": (768,),
                b + "attn.rel_pos_h": (rel, 64),
                b + "attn.rel_pos_w": (rel, 64),
                b + "mlp.lin1.weight": (3072, 768),
                b + "mlp.lin1.bias": (3072,),
                b + "mlp.lin2.weight": (768, 3072),
                b + "mlp.lin2.bias": (768,),
            }
        )
    for n in range(24):
        b = f"{CLIP}transformer.layers.{n}."
        for norm in ("layer_norm1", "layer_norm2"):
            shapes[b + norm + ".weight"] = (1024,)
            shapes[b + norm + ".bias"] = (1024,)
        shapes.update(
            {
                b + "self_attn.qkv_proj.weight": (3072, 1024),
                b + "self_attn.qkv_proj.bias": (3072,),
                b + "self_attn.out_proj.weight": (1024, 1024),
                b + "self_attn.out_proj.bias": (1024,),
                b + "mlp.fc1.weight": (4096, 1024),
                b + "mlp.fc1.bias": (4096,),
                b + "mlp.fc2.weight": (1024, 4096),
                b + "mlp.fc2.bias": (1024,),
            }
        )
    for n in range(12):
        b = f"model.layers.{n}."
        shapes[b + "input_layernorm.weight"] = (1280,)
        shapes[b + "post_attention_layernorm.weight"] = (1280,)
        for proj in "qkvo":
            shapes[b + f"self_attn.{proj}_proj.weight"] = (1280, 1280)
        if n == 0:
            shapes.update(
                {
                    b + "mlp.gate_proj.weight": (6848, 1280),
                    b + "mlp.up_proj.weight": (6848, 1280),
                    b + "mlp.down_proj.weight": (1280, 6848),
                }
            )
            continue
        shapes[b + "mlp.gate.weight"] = (64, 1280)
        for e in range(64):
            shapes[b + f"mlp.experts.{e}.gate_proj.weight"] = (896, 1280)
            shapes[b + f"mlp.experts.{e}.up_proj.weight"] = (896, 1280)
            shapes[b + f"mlp.experts.{e}.down_proj.weight"] = (1280, 896)
        shapes[b + "mlp.shared_experts.gate_proj.weight"] = (1792, 1280)
        shapes[b + "mlp.shared_experts.up_proj.weight"] = (1792, 1280)
        shapes[b + "mlp.shared_experts.down_proj.weight"] = (1280, 1792)
    return shapes


def mtp_layout() -> dict[str, tuple[int, ...]]:
    head = "mtp_module.heads.0."
    return {
        head + "enorm.weight": (1280,),
        head + "hnorm.weight": (1280,),
        head + "eh_proj.weight": (1280, 2560),
        head + "mtp_block.input_layernorm.weight": (1280,),
        head + "mtp_block.post_attention_layernorm.weight": (1280,),
        **{head + f"mtp_block.self_attn.{p}_proj.weight": (1280, 1280) for p in "qkvo"},
        head + "mtp_block.mlp.gate_proj.weight": (6848, 1280),
        head + "mtp_block.mlp.up_proj.weight": (6848, 1280),
        head + "mtp_block.mlp.down_proj.weight": (1280, 6848),
    }


@pytest.fixture(scope="module")
def full_state_shapes() -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(JinaOCRConfig())
    return {key: tuple(value.shape) for key, value in checkpoint_layout(model.state_dict()).items()}


def test_full_model_has_the_exact_parameter_count(full_state_shapes):
    main = [shape for key, shape in full_state_shapes.items() if not key.startswith("mtp_module.")]
    assert sum(torch.Size(shape).numel() for shape in main) == 3_336_106_240


def test_full_model_keys_and_shapes_match_the_spec_both_ways(full_state_shapes):
    expected = {**spec_layout(), **mtp_layout()}
    assert sorted(set(expected) - set(full_state_shapes)) == []
    assert sorted(set(full_state_shapes) - set(expected)) == []
    wrong = {k: (full_state_shapes[k], expected[k]) for k in expected if full_state_shapes[k] != expected[k]}
    assert wrong == {}


def test_keys_are_those_of_the_real_deepseek_ocr_checkpoint(full_state_shapes, fixtures_dir):
    index = json.loads((fixtures_dir / "deepseek_ocr" / "model.safetensors.index.json").read_text())
    real = set(index["weight_map"])
    ours = {k for k in full_state_shapes if not k.startswith("mtp_module.")}
    assert len(real) == 2710
    assert real == ours


def test_the_real_deepseek_ocr_config_builds_the_real_model_without_head(fixtures_dir):
    config = JinaOCRConfig.from_pretrained(fixtures_dir / "deepseek_ocr")
    assert (config.rope_theta, config.max_position_embeddings, config.num_nextn_predict_layers) == (
        10000.0,
        8192,
        0,
    )
    assert config.sam_global_attn_indexes == [2, 5, 8, 11] and config.clip_num_layers == 24
    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(config)
    assert sum(p.numel() for p in model.parameters()) == 3_336_106_240
    assert not any(re.match(r"mtp_module\.", k) for k in model.state_dict())


def test_config_precedence_top_level_over_language_block_over_defaults():
    config = JinaOCRConfig(
        language_config={"hidden_size": 64, "num_hidden_layers": 3},
        num_hidden_layers=5,
        num_attention_heads=4,
    )
    assert (config.hidden_size, config.num_hidden_layers) == (64, 5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"use_mla": True}, "multi-head latent attention"),
        ({"topk_method": "noaux_tc"}, "topk_method"),
        ({"sam_downsample_channels": [512, 768]}, "clip_hidden_size"),
        ({"mtp_feedback_hidden": "middle"}, "mtp_feedback_hidden"),
        ({"num_nextn_predict_layers": 2}, "one recursive head"),
        ({"sam_downsample_channels": [1024]}, "two stride-2 compressor convolutions"),
        ({"mtp_recursive": False}, r"^mtp_recursive=False is not supported: .* applied recursively"),
        ({"mtp_share_embedding_weights": False}, r"^mtp_share_embedding_weights=False is not supported"),
        ({"mtp_share_lm_head": False}, r"^mtp_share_lm_head=False is not supported"),
        ({"mtp_share_norm": False}, r"^mtp_share_norm=False is not supported"),
        ({"hidden_act": "gelu"}, r"^hidden_act='gelu' is not supported: .* only 'silu'"),
    ],
)
def test_unsupported_configs_are_refused_with_a_clear_message(overrides, message):
    with pytest.raises(ValueError, match=message):
        JinaOCRConfig(**overrides)


def test_real_configs_and_the_pixels_per_visual_token(fixtures_dir):
    """The fields read but not otherwise used hold the values the real checkpoints write (SPEC section 2),
    and a view's side per visual token comes from the patch size and the compressor, not a constant."""
    original = json.loads((fixtures_dir / "deepseek_ocr" / "config.json").read_text(encoding="utf-8"))
    released = {"num_nextn_predict_layers": 1, "mtp_recursive": True, "mtp_share_embedding_weights": True}
    released.update(mtp_share_lm_head=True, mtp_share_norm=True, mtp_moe=False, hidden_act="silu")
    for config in (JinaOCRConfig.from_dict(original), JinaOCRConfig(**released)):
        assert config.hidden_act == "silu" and config.mtp_recursive is True
        assert config.pixels_per_visual_token == 64  # 16 px patches, two stride-2 convolutions
    assert JinaOCRConfig(sam_patch_size=8).pixels_per_visual_token == 32


def test_views_follow_the_configs_pixels_per_visual_token():
    from small_config import SMALL

    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL, sam_patch_size=8)).eval()
    with torch.no_grad():
        [features] = model.model.get_image_features(torch.zeros(1, 3, 96, 96))
    assert features.shape[0] == 3 * (3 + 1) + 1  # 96 / 32 = 3 tokens a side, a newline a row, the separator
    with pytest.raises(ValueError, match=r"divisible by 32 \(pixels per visual token\), got \(80, 80\)"):
        model.model.get_image_features(torch.zeros(1, 3, 80, 80))
