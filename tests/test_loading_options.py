"""Loading options users expect: dtype, device_map="auto" (accelerate), attn_implementation."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForImageTextToText


def inputs(config, seed=0):
    torch.manual_seed(seed)
    ids = torch.tensor([[5, 6] + [config.image_token_id] * 273 + [8]])
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.randn(1, 3, 1024, 1024),
    }


@pytest.fixture(scope="module")
def reference(tiny_export):
    return AutoModelForImageTextToText.from_pretrained(tiny_export, trust_remote_code=True).eval()


def test_device_map_auto_loads_and_generates_the_same(tiny_export, reference):
    pytest.importorskip("accelerate")
    model = AutoModelForImageTextToText.from_pretrained(
        tiny_export, trust_remote_code=True, device_map="auto"
    )
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    batch = inputs(reference.config)
    kwargs = {"max_new_tokens": 4, "do_sample": False, "use_mtp": False}
    assert torch.equal(model.generate(**batch, **kwargs), reference.generate(**batch, **kwargs))


def test_an_automatic_device_map_never_splits_a_layer(reference):
    """With too little memory for one device the map spreads modules over cpu and disk; every module
    named in ``_no_split_modules`` must land whole on one of them."""
    accelerate = pytest.importorskip("accelerate")
    half = sum(p.numel() * p.element_size() for p in reference.parameters()) // 2
    device_map = accelerate.infer_auto_device_map(
        reference,
        max_memory={"cpu": half, "disk": 10**10},
        no_split_module_classes=reference._no_split_modules,
    )
    assert set(device_map.values()) == {"cpu", "disk"}
    whole = [
        name
        for name, module in reference.named_modules()
        if type(module).__name__ in reference._no_split_modules
    ]
    assert {"JinaOCRDecoderLayer", "SAMBlock", "CLIPLayer"} <= set(reference._no_split_modules) and whole
    for name in whole:
        assert not any(key.startswith(name + ".") for key in device_map), f"{name} is split: {device_map}"


def test_bfloat16_loading(tiny_export, reference):
    model = AutoModelForImageTextToText.from_pretrained(
        tiny_export, trust_remote_code=True, dtype=torch.bfloat16
    )
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    batch = inputs(model.config)
    with torch.no_grad():
        logits = model(**{**batch, "pixel_values": batch["pixel_values"].to(torch.bfloat16)}).logits
        expected = reference(**batch).logits
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    # bf16 keeps about three significant digits: the logits agree with float32 to that precision
    assert (logits - expected).abs().max() < 0.05 * expected.abs().max()


def test_eager_and_sdpa_attention_agree(tiny_export):
    eager = AutoModelForImageTextToText.from_pretrained(
        tiny_export, trust_remote_code=True, attn_implementation="eager"
    )
    sdpa = AutoModelForImageTextToText.from_pretrained(
        tiny_export, trust_remote_code=True, attn_implementation="sdpa"
    )
    assert (eager.config._attn_implementation, sdpa.config._attn_implementation) == ("eager", "sdpa")
    eager, sdpa = eager.to(torch.float64).eval(), sdpa.to(torch.float64).eval()
    batch = inputs(eager.config)
    batch["pixel_values"] = batch["pixel_values"].double()
    with torch.no_grad():
        torch.testing.assert_close(eager(**batch).logits, sdpa(**batch).logits, rtol=1e-9, atol=1e-9)
