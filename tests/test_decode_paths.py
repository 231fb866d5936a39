"""The decode step's hot path: what it reads back from the device, and that library inputs reach
attention. A read-back (``.item()``, ``.tolist()``, ``bool(tensor)``, ...) stalls a GPU until all queued
work is done, so the decode step may make exactly the reads it documents: one per MoE layer (the
experts' token counts) and none in masks, positions or attention."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from fastmtp_helpers import OracleHead, generate, page_batch, small_model
from transformers import StaticCache

from jina_ocr.remote_code import modeling_jina_ocr
from jina_ocr.remote_code.compat_jina_ocr import output_cache

GUARD = {"loop_guard_ngram_size": 2, "loop_guard_window": 12}  # keeps the random model out of loops
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


def test_static_cache_gives_the_dynamic_cache_tokens(monkeypatch):
    """Greedy and FastMTP decode with ``cache_implementation="static"`` exactly the tokens of the
    dynamic cache (float64): with a random head (drafts rejected, the static cache cropped) and with
    the oracle head (drafts accepted)."""
    model = small_model(seed=3, hidden_size=48)
    options = {"max_new_tokens": 14, "mtp_adaptive_drafting": False, **GUARD}
    for seed in (5, 6):
        inputs = page_batch(seed, [128], model.config.vocab_size)
        dynamic = generate(model, inputs, use_mtp=False, **options)
        static = generate(model, inputs, use_mtp=False, cache_implementation="static", **options)
        assert static.tolist() == dynamic.tolist()
        fast = generate(model, inputs, use_mtp=True, cache_implementation="static", **options)
        assert fast.tolist() == dynamic.tolist()
        assert model.fastmtp_stats["drafted_per_depth"][0] >= 4
        with monkeypatch.context() as patch:
            patch.setitem(model.mtp_module.heads._modules, "0", OracleHead(model, dynamic, [0]))
            fast = generate(model, inputs, use_mtp=True, cache_implementation="static", **options)
        assert fast.tolist() == dynamic.tolist()
        stats = model.fastmtp_stats
        assert stats["accepted_per_depth"][-1] >= 2 and stats["committed_per_step"] > 2


def test_static_cache_decode_step_reads_back_only_the_expert_counts(monkeypatch):
    model = small_model(seed=0)
    ids = torch.tensor([[3, 4, 5, 6, 8]])
    cache = StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        out = model(input_ids=ids, cache=cache, use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        with counting_read_backs(monkeypatch) as calls:
            step = model(input_ids=token, cache=cache, use_cache=True).logits[0, -1]
        dynamic = model(input_ids=torch.cat([ids, token], dim=1)).logits[0, -1]
    assert calls == ["tolist"] * 2
    torch.testing.assert_close(step, dynamic, rtol=1e-10, atol=1e-10)


def test_static_cache_with_batched_fastmtp_is_refused_by_name():
    model = small_model(seed=0)
    inputs = page_batch(7, [128, 128], model.config.vocab_size)
    with pytest.raises(ValueError, match="cache_implementation='static'.*use_mtp=False"):
        generate(model, inputs, use_mtp=True, cache_implementation="static")
