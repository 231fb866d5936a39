"""A training checkpoint whose optimizer knew one parameter per expert goes on with the fused model."""

from __future__ import annotations

import pytest
import torch
from small_config import SMALL

from jina_ocr.errors import UserError
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.train.legacy_checkpoint import fused_optimizer_state
from jina_ocr.train.sft import SFTOptions, _parameter_groups, make_optimizer
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
    groups = _parameter_groups(model, head, options)
    resumed.load_state_dict(fused_optimizer_state(legacy.state_dict(), groups, EXPERTS))
    experts = model.model.layers[1].mlp.experts
    assert resumed.state[experts.gate_up_proj]["exp_avg"].shape == experts.gate_up_proj.shape
    for parameter in named.values():
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(resumed.state[parameter][field], fused.state[parameter][field])
    # A state saved since records its names and comes back as it is.
    current = fused.state_dict()
    assert fused_optimizer_state(current, groups, EXPERTS) is current


def test_an_optimizer_of_another_model_is_a_clear_error(model, tmp_path):
    head = GlyphHead(SMALL["hidden_size"], SMALL["vocab_size"])
    groups = _parameter_groups(model, head, SFTOptions(out=tmp_path))
    saved = make_optimizer(model, head, SFTOptions(out=tmp_path)).state_dict()
    for group in saved["param_groups"]:
        del group["names"]
    saved["param_groups"][0]["params"] = saved["param_groups"][0]["params"][:-1]
    with pytest.raises(UserError, match="other parameters than this model"):
        fused_optimizer_state(saved, groups, EXPERTS)
