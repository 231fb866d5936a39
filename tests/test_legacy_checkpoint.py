"""A training checkpoint whose optimizer knew one parameter per expert goes on with the fused model."""

from __future__ import annotations

import pytest
import torch
from small_config import SMALL

from jina_ocr.errors import UserError
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.train.sft import SFTOptions, make_optimizer, restored_optimizer_state
from jina_ocr.train.supervision import GlyphHead

EXPERTS = SMALL["n_routed_experts"]
SIZE = SMALL["moe_intermediate_size"]


def legacy_tensors(named: dict, name: str, grad: bool) -> list[torch.Tensor]:
    """What the model held for ``name`` before the fused layout, in its parameter order then:
    every expert's gate, up and down in turn for ``gate_up_proj``, nothing for the fused ``down_proj``
    (it was interleaved there), the tensor itself otherwise."""
    tensor = named[name].grad if grad else named[name]
    if name.endswith("experts.gate_up_proj"):
        down = named[name.replace("gate_up_proj", "down_proj")]
        down = down.grad if grad else down
        return [t for e in range(EXPERTS) for t in (tensor[e, :SIZE], tensor[e, SIZE:], down[e])]
    if name.endswith("experts.down_proj"):
        return []
    return [tensor]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL))


def test_the_per_expert_moments_become_the_fused_ones_exactly(model, tmp_path):
    """One AdamW step over the old per-expert parameters and one over the fused ones, with the same
    gradients, give the same moments; the converted old state equals the fused run's."""
    head = GlyphHead(SMALL["hidden_size"], SMALL["vocab_size"])
    options = SFTOptions(out=tmp_path)
    fused = make_optimizer(model, head, options)
    named = dict([*model.named_parameters(), *head.named_parameters(prefix="glyph_head")])
    generator = torch.Generator().manual_seed(1)
    for parameter in named.values():
        parameter.grad = torch.randn(parameter.shape, generator=generator)
    legacy_groups = []
    for group in fused.param_groups:
        tensors = [t for name in group["names"] for t in legacy_tensors(named, name, grad=False)]
        grads = [t for name in group["names"] for t in legacy_tensors(named, name, grad=True)]
        params = [torch.nn.Parameter(t.detach().clone()) for t in tensors]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        legacy_groups.append({"params": params, "weight_decay": group["weight_decay"]})
    legacy = torch.optim.AdamW(legacy_groups, lr=1e-3, betas=(0.9, 0.95))
    legacy.step()
    fused.step()

    resumed = make_optimizer(model, head, options)
    resumed.load_state_dict(restored_optimizer_state(legacy.state_dict(), resumed.state_dict(), EXPERTS))
    experts = model.model.layers[1].mlp.experts
    assert resumed.state[experts.gate_up_proj]["exp_avg"].shape == experts.gate_up_proj.shape
    for parameter in named.values():
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(resumed.state[parameter][field], fused.state[parameter][field])


def test_saved_moments_follow_their_parameters_into_a_rerun_s_groups(model, tmp_path):
    """A rerun may group the parameters otherwise (the glyph head at the towers' rate, the towers left
    out): each parameter gets its own saved moments, and the groups' rates are the rerun's."""
    head = GlyphHead(SMALL["hidden_size"], SMALL["vocab_size"])
    saved = make_optimizer(model, head, SFTOptions(out=tmp_path))
    generator = torch.Generator().manual_seed(2)
    for parameter in [*model.parameters(), *head.parameters()]:
        parameter.grad = torch.randn(parameter.shape, generator=generator)
    saved.step()
    reruns = [
        SFTOptions(out=tmp_path, lr=1e-4, towers_from_glyphs=True, vision_lr_scale=10),
        SFTOptions(out=tmp_path, freeze_vision=True),
    ]
    for options in reruns:
        resumed = make_optimizer(model, head, options)
        resumed.load_state_dict(restored_optimizer_state(saved.state_dict(), resumed.state_dict(), EXPERTS))
        moved = [p for group in resumed.param_groups for p in group["params"]]
        assert moved and all(
            torch.equal(resumed.state[p][field], saved.state[p][field])
            for p in moved
            for field in ("exp_avg", "exp_avg_sq", "step")
        )
        fresh = make_optimizer(model, head, options).param_groups
        assert [g["peak_lr"] for g in resumed.param_groups] == [g["peak_lr"] for g in fresh]
        head_rates = {
            g["peak_lr"] for g in resumed.param_groups for p in g["params"] if p in set(head.parameters())
        }
        assert head_rates == {options.lr * (options.vision_lr_scale if options.towers_from_glyphs else 1)}


def test_an_optimizer_of_another_model_is_a_clear_error(model, tmp_path):
    head = GlyphHead(SMALL["hidden_size"], SMALL["vocab_size"])
    fresh = make_optimizer(model, head, SFTOptions(out=tmp_path)).state_dict()
    saved = make_optimizer(model, head, SFTOptions(out=tmp_path)).state_dict()
    for group in saved["param_groups"]:
        del group["names"]
    saved["param_groups"][0]["params"] = saved["param_groups"][0]["params"][:-1]
    with pytest.raises(UserError, match="other parameters than this model"):
        restored_optimizer_state(saved, fresh, EXPERTS)
