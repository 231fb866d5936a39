"""The sliding-window no-repeat n-gram guard (SPEC section 5) against a brute-force reading of the rule,
and inside generate."""

from __future__ import annotations

import pytest
import torch
from fastmtp_helpers import generate, page_batch, small_model
from hypothesis import given, settings
from hypothesis import strategies as st

from jina_ocr.remote_code.generation.loop_guard import SlidingWindowNoRepeatNGram


def brute_force_banned(history: list[int], n: int, window: int, exempt: set[int]) -> set[int]:
    """Every n-gram that starts among the last ``window`` tokens and whose first n-1 tokens equal the
    last n-1 tokens bans its last token, unless that token is exempt."""
    banned = set()
    if len(history) < n:
        return banned
    suffix = history[len(history) - n + 1 :]
    for start in range(max(0, len(history) - window), len(history) - n + 1):
        if history[start : start + n - 1] == suffix:
            banned.add(history[start + n - 1])
    return banned - exempt


def banned_tokens(guard: SlidingWindowNoRepeatNGram, history: list[int]) -> list[int]:
    """Token ids ``guard`` bans as the next token after the generated ``history``, ascending."""
    generated = torch.tensor(history, dtype=torch.long)
    vocab_size = int(generated.max()) + 1 if generated.numel() else 0
    return guard.banned_mask(generated[None, -guard.window :], vocab_size)[0].nonzero().flatten().tolist()


@settings(max_examples=150, deadline=None)
@given(
    history=st.lists(st.integers(0, 4), max_size=40),
    n=st.integers(2, 5),
    extra=st.integers(0, 12),
    exempt=st.sets(st.integers(0, 4), max_size=2),
)
def test_banned_tokens_match_the_rule(history, n, extra, exempt):
    guard = SlidingWindowNoRepeatNGram(n, n + extra, prompt_length=0, exempt_token_ids=exempt)
    banned = banned_tokens(guard, history)
    assert set(banned) == brute_force_banned(history, n, n + extra, exempt)


def test_prompt_is_ignored_and_scores_of_banned_tokens_drop():
    guard = SlidingWindowNoRepeatNGram(3, 10, prompt_length=4, exempt_token_ids=[9])
    ids = torch.tensor([[9, 9, 9, 9, 1, 2, 3, 1, 2], [9, 9, 9, 9, 7, 8, 9, 7, 8]])
    scores = torch.zeros(2, 10)
    out = guard(ids, scores)
    assert out[0, 3] == -float("inf") and torch.isfinite(out[0, torch.arange(10) != 3]).all()
    assert torch.isfinite(out[1]).all()  # "7 8" was followed by 9, which is exempt
    assert torch.isfinite(scores).all()  # the input is not modified in place
    # "5 6 7" is in the prompt only: after generating "5 6", 7 stays allowed.
    assert torch.isfinite(guard(torch.tensor([[5, 6, 7, 3, 5, 6]]), torch.zeros(1, 10))).all()


def test_exempt_cell_tags_may_repeat():
    td, end_td = 7, 8
    guard = SlidingWindowNoRepeatNGram(2, 16, prompt_length=0, exempt_token_ids=[td, end_td])
    assert banned_tokens(guard, [3, td, 3]) == []
    assert banned_tokens(guard, [3, 4, 3]) == [4]


def test_window_limits_the_search():
    guard = SlidingWindowNoRepeatNGram(2, 4, prompt_length=0)
    assert banned_tokens(guard, [1, 2, 9, 9, 1]) == []  # "1 2" starts outside
    assert banned_tokens(guard, [9, 1, 2, 9, 1]) == [2]


@pytest.mark.parametrize("bad", [{"ngram_size": 1, "window": 4}, {"ngram_size": 5, "window": 4}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError, match="loop_guard"):
        SlidingWindowNoRepeatNGram(prompt_length=0, **bad)


def test_generate_never_repeats_an_ngram_inside_the_window():
    model = small_model(seed=0)
    inputs = page_batch(7, [128, 128], model.config.vocab_size)
    width = inputs["input_ids"].shape[1]
    free = generate(model, inputs, use_mtp=False, max_new_tokens=12, eos_token_id=39, loop_guard_ngram_size=0)
    guarded = generate(
        model,
        inputs,
        use_mtp=False,
        max_new_tokens=12,
        eos_token_id=39,
        loop_guard_ngram_size=3,
        loop_guard_window=12,
    )
    assert free.tolist() != guarded.tolist()
    for row in guarded[:, width:].tolist():
        for end in range(3, len(row) + 1):
            assert not brute_force_banned(row[: end - 1], 3, 12, set()) & {row[end - 1]}
