"""The routed experts: fused in the model, one module per expert in every checkpoint, and each
Transformers expert kernel computing the same layer."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from small_config import SMALL
from test_model_parity import ref_routed, ref_swiglu_of

from jina_ocr.model_files import checkpoint_layout
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.experts_jina_ocr import fused_layout
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRExperts, JinaOCRForConditionalGeneration, JinaOCRMoE


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(5)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).eval()
    with torch.no_grad():
        for layer in model.model.layers[1:]:
            layer.mlp.gate.weight.normal_(0.0, 0.5)  # the router starts at zero: make its choice matter
    return model


def test_checkpoint_layout_is_one_tensor_per_expert_and_round_trips_exactly(model, tmp_path):
    state = model.state_dict()
    per_expert = checkpoint_layout(state)
    experts = model.model.layers[1].mlp.experts
    size = SMALL["moe_intermediate_size"]
    for e in range(SMALL["n_routed_experts"]):
        key = f"model.layers.1.mlp.experts.{e}."
        assert torch.equal(per_expert[key + "gate_proj.weight"], experts.gate_up_proj[e, :size])
        assert torch.equal(per_expert[key + "up_proj.weight"], experts.gate_up_proj[e, size:])
        assert torch.equal(per_expert[key + "down_proj.weight"], experts.down_proj[e])
    assert not any(k.endswith(("gate_up_proj", "experts.down_proj")) for k in per_expert)
    save_file(per_expert, str(tmp_path / "w.safetensors"))  # no tensor shares the model's storage
    back = fused_layout(load_file(str(tmp_path / "w.safetensors")))
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_from_pretrained_and_load_state_dict_fuse_a_per_expert_checkpoint_alike(model, tmp_path):
    """Transformers' registered converter (from_pretrained) and the module's load hook (training
    checkpoints) read the same per-expert file into the same fused tensors, and save_pretrained
    writes back exactly the per-expert tensors it read."""
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder)
    on_disk = load_file(str(folder / "model.safetensors"))
    assert "model.layers.2.mlp.experts.5.up_proj.weight" in on_disk
    assert on_disk.keys() == checkpoint_layout(model.state_dict()).keys()
    loaded = JinaOCRForConditionalGeneration.from_pretrained(folder)
    hooked = JinaOCRForConditionalGeneration(model.config)
    hooked.load_state_dict(on_disk, strict=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
        assert torch.equal(hooked.state_dict()[name], tensor), name
    eager = JinaOCRForConditionalGeneration.from_pretrained(folder, experts_implementation="eager")
    assert eager.model.layers[1].mlp.experts.config._experts_implementation == "eager"
    assert loaded.model.layers[1].mlp.experts.config._experts_implementation == "grouped_mm"
    loaded.save_pretrained(tmp_path / "again")
    again = load_file(str(tmp_path / "again" / "model.safetensors"))
    assert again.keys() == on_disk.keys()
    assert all(torch.equal(again[k], on_disk[k]) for k in on_disk)


def test_a_checkpoint_missing_an_expert_names_it(model):
    per_expert = checkpoint_layout(model.state_dict())
    del per_expert["model.layers.1.mlp.experts.3.up_proj.weight"]
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.experts: .* expert 3\.up_proj"):
        fused_layout(per_expert)


def per_expert_reference(moe):
    """Expert ``e`` in float64 from the per-expert tensors of the checkpoint layout."""
    prefix = "mlp.experts."
    layer = checkpoint_layout({f"mlp.{k}": v for k, v in moe.state_dict().items()})
    weights = {k[len(prefix) :]: v.double() for k, v in layer.items() if k.startswith(prefix)}
    return lambda token, e: ref_swiglu_of(
        token, *(weights[f"{e}.{name}_proj.weight"] for name in ("gate", "up", "down"))
    )


@pytest.mark.parametrize("implementation", ["eager", "grouped_mm", "batched_mm"])
@pytest.mark.parametrize("tokens", [1, 7])
def test_each_experts_implementation_computes_the_routed_experts(model, implementation, tokens):
    moe = model.model.layers[1].mlp
    torch.manual_seed(tokens)
    x = torch.randn(tokens, SMALL["hidden_size"])
    model.set_experts_implementation(implementation)
    try:
        with torch.no_grad():
            ours = moe(x[None])[0] - moe.shared_experts(x)
    finally:
        model.set_experts_implementation("grouped_mm")
    expected = ref_routed(
        x.double(), moe.gate.weight.double(), per_expert_reference(moe), SMALL["num_experts_per_tok"]
    )
    torch.testing.assert_close(ours.double(), expected, rtol=0, atol=1e-5)


def test_the_grouped_mm_dispatch_reads_nothing_back_from_the_device(model, monkeypatch):
    """A host read (``.tolist()``, ``.item()``, ``bool()`` of a tensor) stalls a GPU on every MoE layer
    of every step; the eager dispatch needs one per layer, grouped_mm none."""
    moe = model.model.layers[1].mlp
    x = torch.randn(1, 3, SMALL["hidden_size"])

    def host_read(*args, **kwargs):
        raise AssertionError("a value was read back from the device")

    for name in ("tolist", "item", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, host_read)
    assert model.config._experts_implementation == "grouped_mm"
    with torch.no_grad():
        moe(x)
        moe(x[:, :1])


def test_a_seeded_experts_module_draws_what_one_linear_per_expert_drew():
    """Seeded random models (tests, random exports) stay the same as with one module per expert."""
    config = JinaOCRConfig(**SMALL)
    torch.manual_seed(4)
    fused = JinaOCRExperts(config)
    torch.manual_seed(4)
    hidden, size = SMALL["hidden_size"], SMALL["moe_intermediate_size"]
    for e in range(SMALL["n_routed_experts"]):
        gate, up = torch.nn.Linear(hidden, size, bias=False), torch.nn.Linear(hidden, size, bias=False)
        down = torch.nn.Linear(size, hidden, bias=False)
        assert torch.equal(fused.gate_up_proj[e], torch.cat([gate.weight, up.weight]))
        assert torch.equal(fused.down_proj[e], down.weight)


@pytest.mark.parametrize(("implementation", "breaks"), [("grouped_mm", 0), ("eager", 1)])
def test_the_grouped_mm_layer_traces_into_one_graph(implementation, breaks):
    """What CUDA graphs of a compiled decode step need; the eager dispatch breaks the graph once."""
    config = JinaOCRConfig(**SMALL)
    config._experts_implementation = implementation
    moe = JinaOCRMoE(config).eval()
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(moe)(torch.randn(1, 3, SMALL["hidden_size"]))
    assert explained.graph_break_count == breaks
