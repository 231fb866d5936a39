"""The loop guard of SPEC section 5: a sliding-window no-repeat n-gram rule over the generated tokens.

Repetition loops are this model family's most reported failure. If the last n-1 generated tokens also occur
earlier, starting within the last ``window`` generated tokens, the token that followed them there is banned
(unless exempt); this is DeepSeek-OCR's vLLM recipe with jina-ocr-v1's n and window. Only generated tokens
count: the prompt's hundreds of identical image placeholders must not trigger bans. The rule is a pure
function of the history, which keeps FastMTP's verified output identical to greedy decoding with it on.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers.generation import LogitsProcessor


class SlidingWindowNoRepeatNGram(LogitsProcessor):
    """Bans n-gram repeats within the last ``window`` generated tokens; ``prompt_length`` columns of
    ``input_ids`` are the prompt (left-padded batches share one prompt width)."""

    def __init__(
        self, ngram_size: int, window: int, prompt_length: int, exempt_token_ids: Iterable[int] = ()
    ):
        if ngram_size < 2:
            raise ValueError(
                f"loop_guard_ngram_size must be at least 2 (0 turns the guard off), got {ngram_size}"
            )
        if window < ngram_size:
            raise ValueError(
                f"loop_guard_window ({window}) must be at least loop_guard_ngram_size ({ngram_size})"
            )
        self.ngram_size, self.window, self.prompt_length = ngram_size, window, prompt_length
        self.exempt = torch.tensor(sorted(set(exempt_token_ids)), dtype=torch.long)

    def banned_mask(self, recent: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """(..., w) histories, w <= ``window``, right-aligned and left-padded with -1 (matches no token) ->
        (..., vocab_size) bool, True for a banned next token. All rows at once, with no read-back to host."""
        n = self.ngram_size
        banned = torch.zeros(*recent.shape[:-1], vocab_size + 1, dtype=torch.bool, device=recent.device)
        grams = recent.shape[-1] - n + 1  # n-grams starting inside the window, oldest first
        if grams < 1:
            return banned[..., :vocab_size]
        suffix = recent[..., -(n - 1) :]
        # Gram j is a hit when its first n-1 tokens equal the suffix; comparing one offset at a time
        # over contiguous slices is several times faster than comparing an unfolded (..., j, n) view.
        hits = suffix[..., :1] >= 0  # padding is on the left: a full suffix starts with a real token
        for offset in range(n - 1):
            hits = hits & (recent[..., offset : offset + grams] == suffix[..., offset : offset + 1])
        following = recent[..., n - 1 :]  # the token after each gram's first n-1
        banned.scatter_(-1, torch.where(hits, following, vocab_size), True)  # misses: the spare column
        banned = banned[..., :vocab_size]
        exempt = self.exempt[self.exempt < vocab_size]  # a host tensor: no device read
        if exempt.numel():
            banned[..., exempt.to(recent.device)] = False
        return banned

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        recent = input_ids[:, self.prompt_length :][:, -self.window :]  # all the rule reads
        banned = self.banned_mask(recent, scores.shape[-1])
        return scores.masked_fill(banned, -float("inf"))
