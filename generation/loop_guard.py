"""The loop guard of SPEC section 5: a sliding-window no-repeat n-gram rule over the generated tokens.

Repetition loops are the most reported failure of this model family. The rule bans the token that
would complete an n-gram already present among the recent output: if the last n-1 generated tokens
also occur earlier, starting within the last ``window`` generated tokens, the token that followed
them there is banned (unless exempt). Only generated tokens count: the prompt holds hundreds of
identical image placeholders and must not trigger bans. This is the rule of DeepSeek-OCR's vLLM
recipe (output tokens only, n-grams starting inside the window) with jina-ocr-v1's n and window.

The rule is a pure function of the history, so it gives the same answer whether the history was
produced one token at a time (greedy) or verified several at a time (FastMTP): that is what keeps
speculative decoding identical to greedy decoding with the guard on.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers.generation import LogitsProcessor


class SlidingWindowNoRepeatNGram(LogitsProcessor):
    """Bans n-gram repeats within the last ``window`` generated tokens; ``prompt_length`` columns of
    ``input_ids`` are the prompt (left-padded batches share one prompt width)."""

    def __init__(
        self,
        ngram_size: int,
        window: int,
        prompt_length: int,
        exempt_token_ids: Iterable[int] = (),
    ):
        if ngram_size < 2:
            raise ValueError(
                f"loop_guard_ngram_size must be at least 2 (0 turns the guard off), got {ngram_size}"
            )
        if window < ngram_size:
            raise ValueError(
                f"loop_guard_window ({window}) must be at least loop_guard_ngram_size ({ngram_size})"
            )
        self.ngram_size = ngram_size
        self.window = window
        self.prompt_length = prompt_length
        self.exempt = torch.tensor(sorted(set(exempt_token_ids)), dtype=torch.long)

    def banned_tokens(self, generated: torch.Tensor) -> torch.Tensor:
        """Token ids banned as the next token after the 1-D ``generated`` history."""
        n = self.ngram_size
        length = generated.shape[0]
        region = generated[max(0, length - self.window) :]
        if region.shape[0] < n:
            return generated.new_empty(0)
        grams = region.unfold(0, n, 1)  # every n-gram starting inside the window, oldest first
        hits = (grams[:, :-1] == generated[length - n + 1 :]).all(dim=1)
        banned = grams[hits, -1]
        if banned.numel() and self.exempt.numel():
            banned = banned[~torch.isin(banned, self.exempt.to(banned.device))]
        return banned

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        processed = scores
        for row in range(input_ids.shape[0]):
            banned = self.banned_tokens(input_ids[row, self.prompt_length :])
            if banned.numel():
                if processed is scores:
                    processed = scores.clone()
                processed[row, banned] = -float("inf")
        return processed
