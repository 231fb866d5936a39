"""FastMTP drafting: one dense draft block applied recursively, with a KV cache of its own.

Pairing (EAGLE style, SPEC section 6): a head entry combines the token at position j+1 with the main
model's state at position j and predicts the token at j+2. Its rotary position is j, as in vLLM's MTP
drafters (attention is relative: this only decides which entry the "embedding zeroed at position 0"
rule hits, the sequence's first pair). One drafting step, newest committed token x_n, main states known
up to h_{n-1}:

1. the head consumes every pair (x_{j+1}, h_j) it has not seen yet; the last, (x_n, h_{n-1}), gives
   draft 1 (a step that drafts nothing, adaptive.py, leaves its pairs for the next one that does);
2. drafts 2..K are recursive: the previous draft goes with the head's own state (``mtp_feedback_hidden``);
3. after verification ``rollback`` removes the recursive entries, so the head cache holds one entry per
   committed pair built from a main-model state, never from the head's own guesses.

``FastMTPDrafter`` serves our batched loop (batched.py) and the library's assisted-decoding loop
(``FastMTPCandidateGenerator``); rows with fewer new pairs are padded, and the padding masked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache
from transformers.generation import CandidateGenerator

from .adaptive import DraftLength
from .growing_cache import growing_cache
from .settings import token_ids


@dataclass
class Pairs:
    """New head inputs, (B, q) each: ``tokens`` x_{j+1}, ``hidden`` h_j (B, q, H), ``positions`` the
    rotary position of h_j, ``valid`` 1 for a real pair and 0 for padding (None: all real); ``last``
    (B,) the index of each row's newest real pair, which yields its first draft."""

    tokens: torch.Tensor
    hidden: torch.Tensor
    positions: torch.Tensor
    valid: torch.Tensor | None
    last: torch.Tensor

    def select(self, rows: torch.Tensor) -> Pairs:
        return Pairs(
            *(None if t is None else t[rows] for t in (self.tokens, self.hidden, self.positions, self.valid)),
            last=self.last[rows],
        )

    @staticmethod
    def join(parts: list[Pairs]) -> Pairs:
        """The pairs of ``parts`` (unread since the last step that drafted) in order, in one block."""
        if len(parts) == 1:
            return parts[0]
        valid = None
        if any(part.valid is not None for part in parts):
            valid = torch.cat([real_pairs(part.tokens, part.valid) for part in parts], dim=1)
        return Pairs(
            tokens=torch.cat([part.tokens for part in parts], dim=1),
            hidden=torch.cat([part.hidden for part in parts], dim=1),
            positions=torch.cat([part.positions for part in parts], dim=1),
            valid=valid,
            last=sum(part.tokens.shape[1] for part in parts[:-1]) + parts[-1].last,
        )


def real_pairs(tokens: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """``valid`` as a (B, q) long tensor, ones when it is None."""
    return torch.ones_like(tokens) if valid is None else valid.to(tokens.dtype)


def compact(cache: Cache, mask: torch.Tensor) -> torch.Tensor:
    """Move every row's real cache columns to its right end, in order, and drop the columns that are
    then padding in every row; returns the matching 2-D mask. Positions are unaffected: they were
    applied to the cached keys, and new ones are counted over the mask's real columns."""
    width = int(mask.sum(dim=1).max())
    if width == mask.shape[1]:
        return mask
    order = mask.argsort(dim=1, stable=True)[:, -width:]  # padding first, real columns in order last
    for layer in cache.layers:
        index = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        layer.keys = layer.keys.gather(2, index)
        layer.values = layer.values.gather(2, index)
    return mask.gather(1, order)


def main_hidden(config, outputs) -> torch.Tensor:
    """The main-model state draft step 1 reads, per ``mtp_first_hidden``."""
    return (
        outputs.last_hidden_state if config.mtp_first_hidden == "post_norm" else outputs.pre_norm_hidden_state
    )


class FastMTPDrafter:
    """The FastMTP head's state across one ``generate`` call: its KV cache and the cache's 2-D mask."""

    def __init__(self, model):
        self.model = model
        self.head = model.mtp_module.heads[0]
        self.feed_back_normed = model.config.mtp_feedback_hidden == "post_norm"
        self.cache = growing_cache()
        self.mask: torch.Tensor | None = None
        self.speculative = 0  # recursive entries at the end of the cache, removed by rollback()

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    def _step(self, tokens, hidden, positions, valid) -> torch.Tensor:
        """Run the head over new entries; ``valid`` None when all are real. While every entry so far
        was real the head attends without a padding mask, as the main model does then."""
        if valid is not None and self.mask is None:
            self.mask = torch.ones(tokens.shape[0], len(self), dtype=tokens.dtype, device=tokens.device)
        if self.mask is not None:
            self.mask = torch.cat([self.mask, real_pairs(tokens, valid)], dim=1)
        embeddings = self.model.get_input_embeddings()(tokens)
        return self.head(embeddings, hidden, positions, cache=self.cache, attention_mask=self.mask)

    def draft(
        self,
        pairs: Pairs,
        steps: int,
        choose: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor],
        stop_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Consume ``pairs`` and return up to ``steps`` drafts per row, (B, <= steps), fewer once every
        row's last draft is in ``stop_ids``. ``choose(logits, drafts_so_far)`` turns (B, V) logits into
        tokens (B,) with the logits processors verification applies."""
        out = self._step(pairs.tokens, pairs.hidden, pairs.positions, pairs.valid)
        rows = torch.arange(out.shape[0], device=out.device)
        state = out[rows, pairs.last]
        position = pairs.positions[rows, pairs.last]
        drafts: list[torch.Tensor] = []
        norm = self.model.model.norm
        while True:
            normed = norm(state)
            token = choose(self.model.logits(normed), drafts)
            drafts.append(token)
            if len(drafts) == steps or (stop_ids is not None and torch.isin(token, stop_ids).all()):
                break
            feedback = normed if self.feed_back_normed else state
            position = position + 1
            out = self._step(token[:, None], feedback[:, None], position[:, None], None)
            self.speculative += 1
            state = out[:, -1]
        return torch.stack(drafts, dim=1)

    def rollback(self) -> None:
        """Drop the recursive entries: the cache keeps only pairs built from main-model states."""
        if self.speculative:
            self.cache.crop(-self.speculative)
            if self.mask is not None:
                self.mask = self.mask[:, : -self.speculative]
            self.speculative = 0

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` of the batch (finished rows leave it)."""
        self.cache.batch_select_indices(rows)
        if self.mask is not None:
            self.mask = self.mask[rows]

    def compact(self) -> None:
        """Drop the masked holes of the head cache (see ``compact``); only between steps."""
        if self.mask is not None:
            self.mask = compact(self.cache, self.mask)


@dataclass
class FastMTPStats:
    """Counts of one ``generate`` call; ``as_dict`` is what ``model.fastmtp_stats`` holds. A verification
    step is one sequence checked by one main-model forward after the prefill (B per forward of B rows).
    Depth d is drafted when a step drafted at least d tokens, accepted when the main model agreed with
    drafts 1..d. The draft-length histogram counts steps by drafts checked (0: a plain greedy step)."""

    num_speculative_steps: int
    batch_size: int
    drafted: list[int] = field(init=False)
    accepted: list[int] = field(init=False)
    adaptive: bool = True
    histogram: dict[int, int] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)
    forwards: int = 0

    def __post_init__(self):
        self.drafted = [0] * self.num_speculative_steps
        self.accepted = [0] * self.num_speculative_steps

    def record_rows(
        self, drafted: int, rows: int, accepted_per_depth: list[int], committed: dict[int, int]
    ) -> None:
        """``rows`` sequences verified at once, each with ``drafted`` drafts; ``accepted_per_depth[d]``
        of them accepted drafts 1..d+1; ``committed`` maps a committed-token count to its rows."""
        for depth in range(drafted):
            self.drafted[depth] += rows
            self.accepted[depth] += accepted_per_depth[depth]
        for count, n in committed.items():
            if n:
                self.histogram[count] = self.histogram.get(count, 0) + n
        self.lengths[drafted] = self.lengths.get(drafted, 0) + rows

    def as_dict(self) -> dict:
        steps = sum(self.histogram.values())
        committed = sum(count * n for n, count in self.histogram.items())
        drafted, accepted = sum(self.drafted), sum(self.accepted)
        return {
            "num_speculative_steps": self.num_speculative_steps,
            "batch_size": self.batch_size,
            "verification_forwards": self.forwards,
            "verification_steps": steps,
            "drafted_per_depth": list(self.drafted),
            "accepted_per_depth": list(self.accepted),
            "acceptance_per_depth": [
                a / d if d else 0.0 for a, d in zip(self.accepted, self.drafted, strict=True)
            ],
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "committed_tokens": committed,
            "committed_per_step": committed / steps if steps else 0.0,
            "committed_histogram": dict(sorted(self.histogram.items())),
            "adaptive_drafting": self.adaptive,
            "draft_length_histogram": dict(sorted(self.lengths.items())),
        }


def positions_from_mask(
    attention_mask: torch.Tensor | None,
    query_length: int,
    past_length: int | torch.Tensor,
    device: torch.device,
) -> torch.Tensor:
    """Position ids of the last ``query_length`` tokens, counted over real tokens so that left padding
    does not shift a page's positions. The decoder's rule (modeling_jina_ocr.py), kept here because the
    head's states must carry the very positions the decoder gave them, and modeling imports this package."""
    if attention_mask is None or attention_mask.ndim == 4:
        return (past_length + torch.arange(query_length, device=device))[None]
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp(min=0)[:, -query_length:]


def positions_and_valid(attention_mask: torch.Tensor | None, batch: int, length: int, device) -> tuple:
    """Rotary positions of the first ``length`` columns (:func:`positions_from_mask`), and their
    real-token mask (None: no padding)."""
    mask = None if attention_mask is None else attention_mask[:, :length]
    positions = positions_from_mask(mask, length, 0, device).expand(batch, length)
    return positions, None if mask is None else mask.long()


class FastMTPCandidateGenerator(CandidateGenerator):
    """FastMTP inside the library's assisted-decoding loop (batch-1 calls that need its features);
    ``get_candidates`` reads the states of the loop's previous main-model forward, nothing else."""

    requires_model_outputs = True
    model_kwargs_overrides: dict = {}

    def __init__(self, model, generation_config, logits_processor, stats: FastMTPStats):
        self.drafter = FastMTPDrafter(model)
        self.config = model.config
        self.length = DraftLength(stats.num_speculative_steps, stats.adaptive)
        self.max_length = generation_config.max_length
        eos = token_ids(generation_config.eos_token_id)
        self.stop_ids = torch.tensor(eos, dtype=torch.long, device=model.device)
        self.logits_processor = logits_processor
        self.stats = stats
        self.known = 0  # main-model states received so far (positions 0 .. known-1)
        self.unread: list[torch.Tensor] = []  # received states the head has not consumed yet, per step
        self.drafted = 0

    @property
    def num_drafting_tokens(self) -> int:
        """The most drafts one step proposes (``K``): from 5.25 the loop sizes the cache's record of
        past states for rollback with it before the first step."""
        return self.length.most

    def get_candidates(
        self, input_ids: torch.LongTensor, model_kwargs=None, model_outputs=None, **kwargs
    ) -> tuple[torch.LongTensor, None]:
        self.drafted = 0
        if model_outputs is None:  # before the prefill there is no main-model state to draft from
            return input_ids, None
        length = input_ids.shape[1]
        fresh = length - 1 - self.known  # states the last forward made valid: its accepted prefix
        new = main_hidden(self.config, model_outputs)[:, :fresh]
        self.unread.append(new)
        self.known = length - 1
        # No drafts when the next token is the last one allowed, or when drafting does not pay
        # (adaptive drafting): the unread states wait for the next step that drafts.
        steps = min(self.length.next(), self.max_length - length - 1)
        if steps <= 0:
            return input_ids, None
        start = len(self.drafter)
        mask = (model_kwargs or {}).get("attention_mask")
        positions, valid = positions_and_valid(mask, 1, length - 1, input_ids.device)
        pairs = Pairs(
            tokens=input_ids[:, start + 1 :],
            hidden=torch.cat(self.unread, dim=1),
            positions=positions[:, start:],
            valid=None if valid is None else valid[:, start:],
            last=torch.tensor([length - 2 - start], device=input_ids.device),
        )
        self.unread = []

        def choose(logits, drafts):
            ids = torch.cat([input_ids, *(d[:, None] for d in drafts)], dim=1)
            return self.logits_processor(ids, logits).argmax(dim=-1)

        drafts = self.drafter.draft(pairs, steps, choose, self.stop_ids)
        self.drafted = drafts.shape[1]
        return torch.cat([input_ids, drafts], dim=1), None

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores, num_matches) -> None:
        """Record the step and roll the head cache back to the pairs built from main-model states."""
        if self.known:  # the prefill commits a token but verifies nothing
            self.stats.forwards += 1
            accepted = [int(depth < num_matches) for depth in range(self.drafted)]
            self.stats.record_rows(self.drafted, 1, accepted, {int(num_matches) + 1: 1})
            self.length.update(self.drafted, accepted, 1)
        self.drafter.rollback()
