"""The decode step's hot path: what it reads back from the device, and that library inputs reach
attention. A read-back (``.item()``, ``.tolist()``, ``bool(tensor)``, ...) stalls a GPU until all queued
work is done, so the decode step may make exactly the reads it documents: one per MoE layer (the
experts' token counts) and none in masks, positions or attention."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from fastmtp_helpers import small_model

from jina_ocr.remote_code import modeling_jina_ocr
from jina_ocr.remote_code.compat_jina_ocr import output_cache

READ_BACKS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero")


@contextmanager
def counting_read_backs(monkeypatch):
    """Record every tensor method call that copies a value from the device to the host."""
    calls: list[str] = []
    for name in READ_BACKS:
        original = getattr(torch.Tensor, name)

        def recorder(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, recorder)
    yield calls
    monkeypatch.undo()


def prefilled(model, padded: bool):
    """A left-padded batch of two prompts after the prefill, ready for one decode step."""
    ids = torch.tensor([[3, 4, 5, 6, 8], [2, 2, 9, 10, 11]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0 if padded else 1] * 2 + [1, 1, 1]])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
    token = out.logits[:, -1:].argmax(-1)
    return token, torch.cat([mask, torch.ones_like(token)], dim=1), output_cache(out)


def test_decode_step_reads_back_only_the_expert_counts(monkeypatch):
    model = small_model(seed=0)
    moe_layers = sum(isinstance(layer.mlp, modeling_jina_ocr.JinaOCRMoE) for layer in model.model.layers)
    assert moe_layers == 2
    for padded in (False, True):
        token, mask, cache = prefilled(model, padded)
        with counting_read_backs(monkeypatch) as calls, torch.no_grad():
            model(input_ids=token, attention_mask=mask, cache=cache, use_cache=True)
        assert calls == ["tolist"] * moe_layers, (padded, calls)


def test_padding_is_masked_without_reading_the_mask(monkeypatch):
    """The mask builder always applies a 2-D mask it is given (it cannot peek whether it is all ones),
    so the padded row's decode step equals the same row decoded alone without padding."""
    model = small_model(seed=0)
    token, mask, cache = prefilled(model, padded=True)
    with torch.no_grad():
        batched = model(input_ids=token, attention_mask=mask, cache=cache, use_cache=True).logits[1]
        alone_ids = torch.tensor([[9, 10, 11]])
        alone = model(input_ids=alone_ids, use_cache=True)
        step = model(input_ids=token[1:], cache=output_cache(alone), use_cache=True).logits[0]
    torch.testing.assert_close(batched, step, rtol=1e-9, atol=1e-9)


def test_forward_kwargs_reach_the_attention_function(monkeypatch):
    """Library inputs given to forward (here an unknown marker) are passed down to attention, as
    Transformers' models do, so features such as packed-sequence flash attention reach it."""
    model = small_model(seed=0)
    seen = []
    chosen = modeling_jina_ocr.attention_function(model.config._attn_implementation)

    def spy(*args, **kwargs):
        seen.append(kwargs.pop("marker", None))
        return chosen(*args, **kwargs)

    monkeypatch.setattr(modeling_jina_ocr, "attention_function", lambda implementation: spy)
    with torch.no_grad():
        model(input_ids=torch.tensor([[3, 4, 5]]), marker="passed")
    assert seen == ["passed"] * model.config.num_hidden_layers
