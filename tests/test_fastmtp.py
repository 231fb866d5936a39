"""FastMTP in model.generate: lossless against plain greedy, real acceptance, draft-cache rollback,
statistics, streaming, option errors, and the exported generation config as a Hub user sees it."""

from __future__ import annotations

import json

import pytest
import torch
from fastmtp_helpers import (
    EOS,
    PAD,
    OracleHead,
    generate,
    loop_options,
    page_batch,
    scripted_lengths,
    small_model,
)
from isolation import run_as_hub_user
from small_config import SMALL
from transformers import DynamicCache
from transformers.generation import LogitsProcessor, LogitsProcessorList
from transformers.generation.streamers import BaseStreamer

from jina_ocr.generation_defaults import DEFAULT_MAX_NEW_TOKENS
from jina_ocr.remote_code.generation import dispatch, hooks
from jina_ocr.remote_code.generation.fastmtp import FastMTPCandidateGenerator

GUARD = {"loop_guard_ngram_size": 3, "loop_guard_window": 8}  # small enough to fire in short outputs


@pytest.fixture(scope="module")
def model():
    return small_model(seed=0)


@pytest.fixture(scope="module")
def wide_model():
    """hidden_size >= vocab_size, as the oracle head needs; pre-norm choices for variety."""
    return small_model(seed=3, hidden_size=48, mtp_first_hidden="pre_norm", mtp_feedback_hidden="pre_norm")


def assert_lossless(model, inputs, **options):
    greedy = generate(model, inputs, use_mtp=False, **options)
    assert model.fastmtp_stats is None
    fast = generate(model, inputs, use_mtp=True, **options)
    assert fast.tolist() == greedy.tolist()
    return greedy, model.fastmtp_stats


@pytest.mark.floor
@pytest.mark.parametrize("loop", ["ours", "library"])
def test_fastmtp_equals_greedy_batch_1(model, loop):
    for seed in range(3):
        inputs = page_batch(seed, [128], SMALL["vocab_size"])
        _, stats = assert_lossless(model, inputs, max_new_tokens=12, **loop_options(loop))
        assert stats["batch_size"] == 1 and stats["verification_steps"] > 0


@pytest.mark.parametrize(
    ("options", "loop"),
    [
        ({}, "ours"),
        ({"loop_guard_ngram_size": 3, "loop_guard_window": 8, "mtp_num_speculative_steps": 2}, "ours"),
        ({"streamer": "discard"}, "library"),
        ({"logits_processor": "identity"}, "library"),
        ({"cache_implementation": "static"}, "library"),
        ({"output_scores": True, "return_dict_in_generate": True}, "library"),
    ],
    ids=["plain", "guard-and-steps", "streamer", "logits-processor", "static-cache", "scores"],
)
def test_batch_1_runs_our_loop_unless_the_call_needs_the_librarys(model, monkeypatch, options, loop):
    """Our loop is much faster at batch 1; what only the library's loop honours sends a call there."""
    ran = []
    ours = dispatch.generate_batched
    monkeypatch.setattr(dispatch, "generate_batched", lambda *a, **k: ran.append("ours") or ours(*a, **k))

    class Library(FastMTPCandidateGenerator):
        def get_candidates(self, input_ids, **kwargs):
            ran.append("library")
            return super().get_candidates(input_ids, **kwargs)

    monkeypatch.setattr(hooks, "FastMTPCandidateGenerator", Library)
    stand_ins = {
        "discard": loop_options("library")["streamer"],
        "identity": LogitsProcessorList([Identity()]),
    }
    options = {key: stand_ins.get(value, value) for key, value in options.items()}
    inputs = page_batch(7, [128], SMALL["vocab_size"])
    greedy = generate(model, inputs, use_mtp=False, max_new_tokens=8, **options)
    fast = generate(model, inputs, use_mtp=True, max_new_tokens=8, **options)
    sequences = lambda out: out if isinstance(out, torch.Tensor) else out.sequences  # noqa: E731
    assert sequences(fast).tolist() == sequences(greedy).tolist()
    assert ran and set(ran) == {loop}


class Identity(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores


@pytest.mark.floor
def test_fastmtp_equals_greedy_batch_2(model):
    for seed in range(2):
        inputs = page_batch(10 + seed, [128, 128], SMALL["vocab_size"])
        _, stats = assert_lossless(model, inputs, max_new_tokens=12)
        assert stats["batch_size"] == 2


@pytest.mark.parametrize(
    ("batch", "steps", "side"), [(1, 1, 192), (1, 2, 128), (2, 3, 192), (5, 1, 128), (5, 3, 128)]
)
def test_lossless_over_seeds_sizes_steps_and_guard(model, batch, steps, side):
    guard_changed_something = False
    for seed in (20 + steps, 30 + batch):
        inputs = page_batch(seed, [side] * batch, SMALL["vocab_size"])
        for guard in ({}, GUARD):
            greedy, stats = assert_lossless(
                model, inputs, max_new_tokens=9, mtp_num_speculative_steps=steps, **guard
            )
            assert len(stats["drafted_per_depth"]) == steps
            if guard:
                plain = generate(model, inputs, use_mtp=False, max_new_tokens=9, loop_guard_ngram_size=0)
                guard_changed_something |= plain.tolist() != greedy.tolist()
    if batch > 1:  # several random pages loop quickly; the guard must really have fired somewhere
        assert guard_changed_something


def test_other_head_state_choices_are_lossless_too(wide_model):
    inputs = page_batch(5, [128, 128], wide_model.config.vocab_size)
    assert_lossless(wide_model, inputs, max_new_tokens=8)
    assert_lossless(wide_model, {k: v[:1] for k, v in inputs.items()}, max_new_tokens=8)


def absent_token(model, inputs, new: int, **options) -> int:
    """A token greedy decoding never produces here: as EOS it lets every row run to its budget."""
    probe = generate(model, inputs, use_mtp=False, max_new_tokens=new, **options)
    return sorted(set(range(3, model.config.vocab_size)) - set(probe.flatten().tolist()))[0]


def install_oracle(model, monkeypatch, inputs, max_new_tokens, **options):
    greedy = generate(model, inputs, use_mtp=False, max_new_tokens=max_new_tokens, **options)
    pads = (1 - inputs["attention_mask"]).sum(1).tolist()
    monkeypatch.setitem(model.mtp_module.heads._modules, "0", OracleHead(model, greedy, pads))
    return greedy


@pytest.mark.parametrize(("batch", "loop"), [(1, "ours"), (1, "library"), (3, "ours")])
@pytest.mark.parametrize("steps", [1, 3])
def test_correct_drafts_are_all_accepted(wide_model, monkeypatch, batch, loop, steps):
    inputs = page_batch(40 + batch, [128] * batch, wide_model.config.vocab_size)
    # 1 + 4 * (K + 1) new tokens: the prefill's token, then full steps only (no budget cut).
    new = 1 + 4 * (steps + 1)
    options = {"eos_token_id": absent_token(wide_model, inputs, new)}  # every step is a full one
    greedy = install_oracle(wide_model, monkeypatch, inputs, new, **options)
    options |= loop_options(loop)
    fast = generate(
        wide_model, inputs, use_mtp=True, max_new_tokens=new, mtp_num_speculative_steps=steps, **options
    )
    assert fast.tolist() == greedy.tolist()
    stats = wide_model.fastmtp_stats
    assert stats["acceptance_rate"] == 1.0
    assert stats["accepted_per_depth"] == stats["drafted_per_depth"] == [4 * batch] * steps
    assert stats["committed_per_step"] == steps + 1
    assert stats["committed_histogram"] == {steps + 1: 4 * batch}


def test_random_head_accepts_almost_nothing():
    """A larger vocabulary and a tight loop guard keep the random main model out of one-token loops,
    which even a random head would predict. Adaptive drafting is off: every step drafts K."""
    model = small_model(seed=0, vocab_size=200)
    inputs = page_batch(50, [128] * 3, 200)
    options = {"max_new_tokens": 12, "loop_guard_ngram_size": 2, "loop_guard_window": 12}
    options["mtp_adaptive_drafting"] = False
    eos = absent_token(model, inputs, 12)
    _, stats = assert_lossless(model, inputs, eos_token_id=eos, **options)
    assert stats["drafted_per_depth"][0] >= 30
    assert stats["acceptance_rate"] < 0.1
    assert stats["committed_per_step"] < 1.2


@pytest.mark.parametrize(("batch", "loop"), [(1, "ours"), (1, "library"), (2, "ours")])
def test_eos_inside_a_draft_and_budget_inside_a_draft(wide_model, monkeypatch, batch, loop):
    inputs = page_batch(60, [128] * batch, wide_model.config.vocab_size)
    guard = {"loop_guard_ngram_size": 2, "loop_guard_window": 12}  # keeps the random model out of loops
    never = absent_token(wide_model, inputs, 12, **guard)
    continuation = generate(wide_model, inputs, use_mtp=False, max_new_tokens=12, eos_token_id=never, **guard)
    width = inputs["input_ids"].shape[1]
    # EOS = new token 6 of row 0, which did not occur before: with K = 3 the first step commits tokens
    # 1..4, so it is the second draft of the second step, and the oracle keeps drafting past it.
    row = continuation[0, width:].tolist()
    assert row[6] not in row[:6]
    eos = row[6]
    greedy = install_oracle(wide_model, monkeypatch, inputs, 12, eos_token_id=eos, **guard)
    guard |= loop_options(loop)
    fast = generate(wide_model, inputs, use_mtp=True, max_new_tokens=12, eos_token_id=eos, **guard)
    assert fast.tolist() == greedy.tolist()
    assert greedy[0, width + 6] == eos and (greedy.shape[1] == width + 7 or batch > 1)
    # A budget of 7 new tokens ends inside the second step's drafts (1 + 4 + 2).
    greedy = install_oracle(wide_model, monkeypatch, inputs, 7, eos_token_id=never, **guard)
    fast = generate(wide_model, inputs, use_mtp=True, max_new_tokens=7, eos_token_id=never, **guard)
    assert fast.tolist() == greedy.tolist() and fast.shape[1] == width + 7
    assert wide_model.fastmtp_stats["committed_histogram"] == {4: batch, 2: batch}


def test_draft_cache_rolls_back_to_the_accepted_prefix(model, monkeypatch):
    """After every verification the head cache holds exactly the pairs built from main-model states,
    equal to a head run from scratch over the committed prefix: nothing of a rejected draft remains."""
    records = []

    class Recording(FastMTPCandidateGenerator):
        def get_candidates(self, input_ids, **kwargs):
            self.length_before = input_ids.shape[1]
            return super().get_candidates(input_ids, **kwargs)

        def update_candidate_strategy(self, input_ids, scores, num_matches):
            super().update_candidate_strategy(input_ids, scores, num_matches)
            keys = self.drafter.cache.layers[0].keys.clone() if len(self.drafter) else None
            if self.drafted:  # a step without drafts (no room left) leaves the head untouched
                records.append(
                    (self.length_before, int(num_matches), len(self.drafter), keys, input_ids.clone())
                )

    monkeypatch.setattr(hooks, "FastMTPCandidateGenerator", Recording)
    scripted_lengths(monkeypatch, [3, 0, 0, 1, 2, 0])  # steps without drafts leave pairs unread
    inputs = page_batch(70, [128], SMALL["vocab_size"])
    eos = absent_token(model, inputs, 14)
    generate(model, inputs, use_mtp=True, max_new_tokens=14, eos_token_id=eos, **loop_options("library"))
    sequence = records[-1][4]
    with torch.no_grad():
        full = model(input_ids=sequence, pixel_values=inputs["pixel_values"], use_cache=False)
    head, cache = model.mtp_module.heads[0], None
    assert len(records) >= 4 and any(r[1] == 0 for r in records)  # rejections happened
    for length_before, _, cached, keys, _ in records:
        assert cached == length_before - 1  # one entry per pair (x_{j+1}, h_j) with j < length_before - 1
        cache = DynamicCache()
        with torch.no_grad():
            head(
                model.get_input_embeddings()(sequence[:, 1:length_before]),
                full.last_hidden_state[:, : length_before - 1],
                torch.arange(length_before - 1)[None],
                cache=cache,
            )
        torch.testing.assert_close(keys, cache.layers[0].keys, rtol=1e-10, atol=1e-10)


def test_float32_mismatch_only_at_near_ties():
    """In float32 the verification forward and one-token decoding round differently; FastMTP may then
    differ from greedy only where greedy's two best logits are closer than 1e-5.

    Random weights almost never give such a tie, so the LM head gets twin rows: every text token's
    row is copied to another token with the last bits changed, so whatever token wins, its twin trails
    it by about one rounding error, and the two paths' roundings pick different twins somewhere."""
    model = small_model(seed=1, dtype=torch.float32)
    text = [t for t in range(SMALL["vocab_size"]) if t not in (EOS, PAD, SMALL["image_token_id"])]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        weight = model.lm_head.weight
        for token, twin in zip(text[0::2], text[1::2], strict=False):
            weight[twin] = weight[token] + 1e-9 * torch.randn(weight.shape[1], generator=generator)
    mismatches = 0
    for seed in range(2):
        inputs = page_batch(80 + seed, [128] * 4, SMALL["vocab_size"], dtype=torch.float32)
        out = generate(
            model, inputs, use_mtp=False, max_new_tokens=16, output_scores=True, return_dict_in_generate=True
        )
        fast = generate(model, inputs, use_mtp=True, max_new_tokens=16)
        width = inputs["input_ids"].shape[1]
        for row in range(fast.shape[0]):
            differ = (fast[row, width:] != out.sequences[row, width:]).nonzero()
            if differ.numel():
                mismatches += 1
                step = int(differ[0])
                top2 = out.scores[step][row].topk(2).values
                assert float(top2[0] - top2[1]) < 1e-5, f"seed {seed} row {row} differs at step {step}"
    assert mismatches >= 1  # the tie branch above was reached: the near-ties are real


def test_statistics_and_per_call_steps(model):
    inputs = page_batch(90, [128], SMALL["vocab_size"])
    generate(model, inputs, use_mtp=True, max_new_tokens=10, mtp_num_speculative_steps=2)
    stats = model.fastmtp_stats
    assert stats["num_speculative_steps"] == 2
    assert stats["committed_tokens"] == 9  # the prefill commits the first of the 10 tokens
    assert stats["committed_tokens"] == sum(n * c for n, c in stats["committed_histogram"].items())
    assert stats["verification_steps"] == sum(stats["committed_histogram"].values())
    generate(model, inputs, use_mtp=False)
    assert model.fastmtp_stats is None


def test_streaming_with_fastmtp_batch_1(model):
    class Collect(BaseStreamer):
        def __init__(self):
            self.chunks, self.ended = [], False

        def put(self, value):
            self.chunks.append(value.flatten().tolist())

        def end(self):
            self.ended = True

    inputs = page_batch(95, [128], SMALL["vocab_size"])
    streamer = Collect()
    out = generate(model, inputs, use_mtp=True, max_new_tokens=10, streamer=streamer)
    width = inputs["input_ids"].shape[1]
    assert streamer.ended and streamer.chunks[0] == inputs["input_ids"][0].tolist()
    assert sum(streamer.chunks[1:], []) == out[0, width:].tolist()


def test_errors_name_the_problem(model):
    batch = page_batch(99, [128, 128], SMALL["vocab_size"])
    with pytest.raises(ValueError, match="repetition_penalty"):
        generate(model, batch, use_mtp=True, repetition_penalty=1.3)
    with pytest.raises(ValueError, match="streamer"):
        generate(model, batch, use_mtp=True, streamer=BaseStreamer())
    with pytest.raises(ValueError, match="do_sample"):
        generate(model, batch, use_mtp=True, do_sample=True)
    with pytest.raises(ValueError, match="from 1 to 3"):
        generate(model, batch, use_mtp=True, mtp_num_speculative_steps=4)
    headless = small_model(seed=0, num_nextn_predict_layers=0)
    with pytest.raises(ValueError, match="FastMTP head"):
        generate(headless, {k: v[:1] for k, v in batch.items()}, use_mtp=True)


HUB_USER = """
import json, sys, torch
from transformers import AutoModelForImageTextToText
model = AutoModelForImageTextToText.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
gc = model.generation_config
config = model.config
torch.manual_seed(0)
view = torch.randn(2, 3, 256, 256)
ids = torch.tensor([[5, 6] + [config.image_token_id] * 21 + [8, 9], [2, 7] + [config.image_token_id] * 21 + [9, 8]])
mask = torch.tensor([[1] * 25, [0] + [1] * 24])
report = {"use_mtp": gc.use_mtp, "steps": gc.mtp_num_speculative_steps, "max_new_tokens": gc.max_new_tokens,
          "guard": [gc.loop_guard_ngram_size, gc.loop_guard_window, gc.loop_guard_exempt_token_ids]}
for rows in (slice(0, 1), slice(0, 2)):
    inputs = dict(input_ids=ids[rows], attention_mask=mask[rows], pixel_values=view[rows], max_new_tokens=8)
    default = model.generate(**inputs)
    report[f"stats{rows.stop}"] = model.fastmtp_stats is not None
    plain = model.generate(**inputs, use_mtp=False)
    report[f"same{rows.stop}"] = default.tolist() == plain.tolist()
print(json.dumps(report))
"""


@pytest.mark.parametrize("mtp", [True, False], ids=["exported-with-mtp-on", "random-export-default"])
def test_exported_generation_config_sets_fastmtp_for_hub_users(request, tmp_path, mtp):
    """``--mtp on`` makes FastMTP the folder's default; a random export's default is plain greedy."""
    folder = request.getfixturevalue("tiny_mtp_export" if mtp else "tiny_export")
    result = run_as_hub_user(HUB_USER, tmp_path, str(folder))
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (
        report["use_mtp"] is mtp
        and report["steps"] == 3
        and report["max_new_tokens"] == DEFAULT_MAX_NEW_TOKENS
    )
    ngram, window, exempt = report["guard"]
    assert (ngram, window, len(exempt)) == (35, 1024, 2)
    assert report["stats1"] is report["stats2"] is mtp  # FastMTP statistics exist only when it ran
    assert report["same1"] and report["same2"]
    saved = json.loads((folder / "generation_config.json").read_text())
    assert "_from_model_config" not in saved and saved["do_sample"] is False
    assert EOS == saved["eos_token_id"] and PAD == saved["pad_token_id"]
