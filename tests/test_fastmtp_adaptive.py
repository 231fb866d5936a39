"""Adaptive drafting and the batched loop's bookkeeping: the draft length follows the head's record,
statistics show it, cache compaction keeps decoding identical to greedy, and the batched loop reads
one small tensor per step instead of per-row values."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from fastmtp_helpers import CostedLength, OracleHead, draft_lengths_from, generate, page_batch, small_model
from test_decode_paths import counting_read_backs
from transformers import DynamicCache

from jina_ocr.remote_code import modeling_jina_ocr
from jina_ocr.remote_code.generation import batched, fastmtp
from jina_ocr.remote_code.generation.adaptive import DraftLength

GUARD = {"loop_guard_ngram_size": 2, "loop_guard_window": 12}  # keeps the random model out of loops


def draft_lengths(per_draft: float, accepts, steps: int, rows: int = 1) -> list[int]:
    """The lengths adaptive drafting picks (at most 3) over ``steps`` steps when ``accepts(k)`` gives
    each step's accepted rows per depth and a draft costs ``per_draft`` greedy steps."""
    length, seen = CostedLength(3, per_draft=per_draft), []
    for _ in range(steps):
        k = length.next()
        length.update(k, accepts(k), rows)
        seen.append(k)
    return seen


def test_first_step_drafts_the_most_and_a_head_that_agrees_keeps_drafting_it():
    assert draft_lengths(0.3, lambda k: [1] * k, 40) == [3] * 40


def test_a_head_that_never_agrees_falls_back_to_greedy_with_rare_probes():
    seen = draft_lengths(0.3, lambda k: [0] * k, 400)
    assert seen[:4] == [3, 0, 1, 0]  # the second step measures what a greedy step costs
    probes = [i for i, k in enumerate(seen) if k and i > 2]
    assert probes and all(seen[i] == 1 for i in probes)
    gaps = [b - a for a, b in zip([2, *probes[:-1]], probes, strict=True)]
    assert min(gaps) >= 20 and len(probes) <= 400 // 20
    # a whole batch failing is stronger evidence than one row: rarer probes
    eight_rows = draft_lengths(0.3, lambda k: [0] * k, 400, rows=8)
    assert sum(map(bool, eight_rows[3:])) < len(probes)


def test_the_length_follows_the_cost_of_a_draft():
    """The same head (draft 1 accepted half the time, draft 2 half the time after it, draft 3
    whenever draft 2 is) is worth one draft where a draft costs 0.35 greedy steps (1.5 / 1.35 tokens
    per unit of time against 1.75 / 1.7 and 2 / 2.05), all three where it costs 0.05 (2 / 1.15
    against 1.75 / 1.1) and none where it costs 0.6 (1.5 / 1.6): there the greedy step's cost,
    which no drafting step shows, has to be measured."""
    pattern = itertools.cycle([[1, 1, 1], [0, 0, 0], [1, 0, 0], [0, 0, 0]])

    def half(k: int) -> list[int]:
        return next(pattern)[:k]

    costly = draft_lengths(0.35, half, 400)[100:]
    assert costly.count(1) > 0.8 * len(costly)
    cheap = draft_lengths(0.05, half, 400)[100:]
    assert cheap.count(3) > 0.8 * len(cheap)
    dear = draft_lengths(0.6, half, 400)[100:]
    assert dear.count(0) > 0.8 * len(dear)


def test_draft_length_counts_rows_and_can_be_turned_off():
    length = CostedLength(3)
    length.update(3, [2, 1, 0], rows=4)  # depth 1: 2 of 4 rows, depth 2: 1 of 2, depth 3: 0 of 1
    assert length.hits == [2, 1, 0] and length.tries == [4, 2, 1]
    a1 = (2 + 0.5) / (4 + 0.5)  # the prior: half a try at certainty
    a2 = (1 + 0.5 * a1) / (2 + 0.5)  # ... then at the depth above
    assert length.acceptance() == pytest.approx([a1, a2, 0.5 * a2 / 1.5])
    never = DraftLength(3, adaptive=False)
    never.update(3, [0, 0, 0], 1)
    assert never.next() == 3


@pytest.fixture(scope="module")
def model():
    return small_model(seed=0, vocab_size=200)


@pytest.mark.parametrize("batch", [1, 3])
def test_random_head_falls_back_to_greedy_steps_and_stays_lossless(model, batch, monkeypatch):
    draft_lengths_from(monkeypatch, CostedLength)  # the lengths the loops pick do not depend on timing
    inputs = page_batch(50, [128] * batch, 200)
    options = {"max_new_tokens": 24, "eos_token_id": 199, **GUARD}
    greedy = generate(model, inputs, use_mtp=False, **options)
    fast = generate(model, inputs, use_mtp=True, **options)
    assert fast.tolist() == greedy.tolist()
    stats = model.fastmtp_stats
    assert stats["adaptive_drafting"] is True
    lengths = stats["draft_length_histogram"]
    assert lengths.get(0, 0) > sum(n for k, n in lengths.items() if k) >= batch  # mostly greedy steps
    assert sum(lengths.values()) == stats["verification_steps"]
    generate(model, inputs, use_mtp=True, mtp_adaptive_drafting=False, **options)
    assert model.fastmtp_stats["adaptive_drafting"] is False
    lengths = model.fastmtp_stats["draft_length_histogram"]
    assert max(lengths, key=lengths.get) == 3 and lengths.get(0, 0) <= batch  # only budget cuts shorten


def test_adaptive_option_is_checked(model):
    inputs = page_batch(50, [128], 200)
    with pytest.raises(ValueError, match="mtp_adaptive_drafting must be True or False"):
        generate(model, inputs, use_mtp=True, mtp_adaptive_drafting="yes")


def full_length_greedy(model, inputs, options: dict) -> torch.Tensor:
    """Greedy output with ``options["eos_token_id"]`` set to a token no row produces (every row runs
    to its budget, so the batch never shrinks under the oracle head)."""
    width = inputs["input_ids"].shape[1] + options["max_new_tokens"]
    for eos in range(3, model.config.vocab_size):
        greedy = generate(model, inputs, use_mtp=False, **{**options, "eos_token_id": eos})
        if greedy.shape[1] == width and not (greedy[:, width - options["max_new_tokens"] :] == eos).any():
            options["eos_token_id"] = eos
            return greedy
    raise AssertionError("every token ends some row")


def pad_free(inputs: dict, rows: int, mask: bool) -> dict:
    """``rows`` copies of the longest prompt of ``inputs``: no padding, with an all-ones mask or none."""
    longest = int(inputs["attention_mask"].sum(1).argmax())
    batch = {
        "input_ids": inputs["input_ids"][longest].expand(rows, -1).clone(),
        "pixel_values": inputs["pixel_values"][longest].expand(rows, -1, -1, -1).clone(),
    }
    if mask:
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    return batch


@pytest.mark.parametrize("prompts", ["padded", "pad-free", "pad-free, no mask"])
def test_compacting_every_step_keeps_batched_output_identical(monkeypatch, prompts):
    """Row 0 gets correct drafts and the others wrong ones, so every step leaves holes in the other
    rows; compaction after every step moves the caches' real columns together and must change
    nothing in the output. Pad-free prompts start without masks, which the first holes bring in."""
    wide = small_model(seed=3, hidden_size=48, vocab_size=40)
    inputs = page_batch(61, [128] * 3, 40)
    if prompts != "padded":
        inputs = pad_free(inputs, 3, mask=prompts == "pad-free")
    options = {"max_new_tokens": 16, "mtp_adaptive_drafting": False, **GUARD}
    greedy = full_length_greedy(wide, inputs, options)
    wrong = greedy.clone()
    wrong[1:] = torch.where(wrong[1:] == 3, 4, 3)  # never the greedy token
    pads = (1 - inputs.get("attention_mask", torch.ones_like(inputs["input_ids"]))).sum(1).tolist()
    head = OracleHead(wide, wrong, pads)
    monkeypatch.setitem(wide.mtp_module.heads._modules, "0", head)
    select = fastmtp.FastMTPDrafter.select

    def select_rows(drafter, rows):  # row 0 finishes first: the oracle follows the rows that stay
        select(drafter, rows)
        head.continuation, head.pads = head.continuation[rows], [head.pads[i] for i in rows.tolist()]

    monkeypatch.setattr(fastmtp.FastMTPDrafter, "select", select_rows)
    sizes = []

    def recording(cache, mask):
        compacted = fastmtp.compact(cache, mask)
        sizes.append((mask.shape[1], compacted.shape[1], cache.get_seq_length()))
        return compacted

    monkeypatch.setattr(batched, "COMPACT_AFTER", 1)
    monkeypatch.setattr(batched, "compact", recording)
    fast = generate(wide, inputs, use_mtp=True, **options)
    assert fast.tolist() == greedy.tolist()
    stats = wide.fastmtp_stats
    assert stats["accepted_per_depth"][-1] >= 3  # row 0 accepted every draft of several steps
    assert sizes and all(after == cached for _, after, cached in sizes)
    assert any(after < before for before, after, _ in sizes)  # holes were dropped


def test_a_pad_free_batch_decodes_without_masks(model, monkeypatch):
    """A 2-D mask costs every forward an additive padding mask and a count of positions over it; a
    batch without padding or holes (batch size 1 never has holes) passes none to the main model or
    the head, and the positions it counts itself."""
    inputs = pad_free(page_batch(53, [128] * 2, 200), 1, mask=True)
    options = {"max_new_tokens": 12, "eos_token_id": 199, "mtp_adaptive_drafting": False, **GUARD}
    greedy = generate(model, inputs, use_mtp=False, **options)
    head = model.mtp_module.heads[0]
    seen = {"main": [], "head": []}

    def recording(name, forward):
        @functools.wraps(forward)
        def call(*args, **kwargs):
            seen[name].append(kwargs)
            return forward(*args, **kwargs)

        return call

    monkeypatch.setattr(model, "forward", recording("main", model.forward))
    monkeypatch.setattr(head, "forward", recording("head", head.forward))
    assert generate(model, inputs, use_mtp=True, **options).tolist() == greedy.tolist()
    assert seen["head"] and all(call["attention_mask"] is None for call in seen["head"])
    prefill, *steps = seen["main"]
    assert steps and all(call["attention_mask"] is None for call in seen["main"])
    prompt = inputs["input_ids"].shape[1]
    starts = [int(call["position_ids"][0, 0]) for call in steps]
    assert starts[0] == prompt and starts == sorted(set(starts))
    assert all(call["position_ids"].shape == call["input_ids"].shape for call in steps)


def test_compact_moves_real_columns_right_in_order():
    cache = DynamicCache()
    columns = torch.arange(5.0).expand(2, 5)[:, None, :, None]  # (B, heads, L, 1): key = column
    cache.update(columns.clone(), -columns, 0)
    mask = torch.tensor([[1, 0, 1, 0, 1], [1, 1, 1, 1, 0]])
    compacted = fastmtp.compact(cache, mask)
    assert compacted.tolist() == [[0, 1, 1, 1], [1, 1, 1, 1]]
    keys = cache.layers[0].keys[:, 0, :, 0]
    assert keys[0, 1:].tolist() == [0, 2, 4] and keys[1].tolist() == [0, 1, 2, 3]
    assert torch.equal(cache.layers[0].values, -cache.layers[0].keys)
    assert cache.get_seq_length() == 4


def test_batched_loop_reads_one_summary_per_step(model, monkeypatch):
    """Per-row Python in the loop would read values of every row at every step."""
    inputs = page_batch(52, [128] * 4, 200)
    options = {"max_new_tokens": 12, "eos_token_id": 199, "mtp_adaptive_drafting": False, **GUARD}
    moe_layers = sum(isinstance(layer.mlp, modeling_jina_ocr.JinaOCRMoE) for layer in model.model.layers)
    with counting_read_backs(monkeypatch) as calls:
        generate(model, inputs, use_mtp=True, **options)
    forwards = model.fastmtp_stats["verification_forwards"]
    assert forwards >= 3
    # The MoE layers' expert counts in every forward, the prefill's image grids, one summary per step.
    assert calls.count("tolist") == (forwards + 1) * moe_layers + 1 + forwards, calls
    # The prefill's placeholder check, the first tokens' EOS check, a row leaving, the output width:
    # none of them per step.
    assert len(calls) - calls.count("tolist") <= 5, calls
