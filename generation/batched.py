"""FastMTP for a batch of pages: our own speculative loop (the library's refuses batch size > 1, and
at batch size 1 ours costs less Python per step; dispatch.py).

Every step drafts up to K tokens per row (fewer while drafts fail: adaptive.py), verifies all rows in
one main-model forward and commits per row the longest matching prefix plus one token, exactly as
greedy decoding would. All of it runs on the device; the host reads one small tensor per step. Rows
accept different numbers of drafts, so:

- both KV caches (main model and head) grow by the same columns for every row; a row that accepted
  fewer drafts than the best leaves masked holes, which the 2-D masks skip (positions are counted per
  row); until the first hole, a batch without padding needs no masks at all;
- the columns no row accepted are cropped at once; once holes add up to ``COMPACT_AFTER`` columns, and
  whenever rows leave after holes were made, both caches are compacted (``fastmtp.compact``);
- a finished row (EOS, its token budget, a ``commit_rows`` stopping criterion such as jina_ocr's
  ``RowStops``) leaves the batch, caches included.
"""

from __future__ import annotations

import torch

from ..compat_jina_ocr import output_cache
from .adaptive import DraftLength
from .fastmtp import FastMTPDrafter, FastMTPStats, Pairs, compact, main_hidden, positions_and_valid
from .growing_cache import growing_cache
from .settings import token_ids

# Hole columns (summed over steps, for the row that accepted least) after which the caches are compacted.
COMPACT_AFTER = 32

# GenerationConfig fields that change greedy decoding, with the value that leaves it unchanged
# (``cache_implementation``: the loop keeps dynamic caches, which it compacts).
# fmt: off
_NEUTRAL_OPTIONS = {
    "do_sample": False, "num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1,
    "penalty_alpha": None, "dola_layers": None, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None,
    "force_words_ids": None, "min_length": 0, "min_new_tokens": None, "forced_bos_token_id": None,
    "forced_eos_token_id": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "sequence_bias": None, "exponential_decay_length_penalty": None, "guidance_scale": None,
    "watermarking_config": None, "stop_strings": None, "max_time": None, "renormalize_logits": False,
    "output_scores": False, "output_logits": False, "output_attentions": False, "output_hidden_states": False,
    "return_dict_in_generate": False, "token_healing": False, "prompt_lookup_num_tokens": None,
    "assistant_early_exit": None, "cache_implementation": None,
}
# fmt: on
# Model inputs the batched loop passes to the prefill forward, and all it accepts.
_FORWARD_INPUTS = ("pixel_values", "pixel_values_local", "image_grids")
_MODEL_INPUTS = ("input_ids", "attention_mask", "use_cache", *_FORWARD_INPUTS)


def batched_refusals(generation_config, model_kwargs: dict, **call_options) -> list[str]:
    """What of one ``generate`` call the batched loop cannot honour, by name (empty when it can run the
    call); ``call_options`` are generate()'s own arguments, ``model_kwargs`` the model inputs."""
    refused = [
        f"{name}={getattr(generation_config, name)!r}"
        for name, neutral in _NEUTRAL_OPTIONS.items()
        if getattr(generation_config, name, None) not in (None, neutral)
    ]
    refused += [f"{name}=..." for name, value in call_options.items() if value]
    refused += [f"{name}=..." for name in model_kwargs if name not in _MODEL_INPUTS]
    if model_kwargs.get("use_cache") is False:
        refused.append("use_cache=False")
    return refused


class _Guard:
    """The loop guard over the batch: each row's last generated tokens (at most ``window``) on the device,
    right-aligned and padded with -1 on the left, as wide as the longest history."""

    def __init__(self, loop_guard, batch: int, device):
        self.rule = loop_guard
        self.recent = torch.empty(batch, 0, dtype=torch.long, device=device)

    def choose(self, logits: torch.Tensor, ahead: torch.Tensor | None = None) -> torch.Tensor:
        """Greedy tokens for (A, q, V) ``logits``: entry j continues each row's history followed by
        the tokens of ``ahead`` (A, m >= q - 1) up to column m - q + j (the tokens before it)."""
        if self.rule is None:
            return logits.argmax(dim=-1)
        q = logits.shape[1]
        ahead = self.recent[:, :0] if ahead is None else ahead
        size = min(self.rule.window, self.recent.shape[1] + ahead.shape[1])
        history = torch.cat([self.recent.new_full((self.recent.shape[0], q - 1), -1), self.recent, ahead], 1)
        windows = history.unfold(1, size, 1)[:, -q:]  # (A, q, size), the last one ends with ahead
        return logits.masked_fill(self.rule.banned_mask(windows, logits.shape[-1]), -float("inf")).argmax(-1)

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Append the first ``counts[i]`` of the (A, q) ``tokens[i]`` to row i's history."""
        if self.rule is not None:
            q, width = tokens.shape[1], self.recent.shape[1]
            size = min(self.rule.window, width + q)
            extended = torch.cat([self.recent.new_full((tokens.shape[0], q), -1), self.recent, tokens], dim=1)
            columns = counts[:, None] + (q + width - size) + torch.arange(size, device=tokens.device)
            self.recent = extended.gather(1, columns)

    def select(self, rows: torch.Tensor) -> None:
        self.recent = self.recent[rows]


@torch.no_grad()
def generate_batched(
    model, config, input_ids, model_kwargs: dict, stats: FastMTPStats, loop_guard, row_stops
):
    """Greedy decoding of a left-padded batch with FastMTP, as the GenerationConfig ``config`` says;
    returns prompts plus generated tokens, finished rows padded (the layout of the library's greedy
    output). ``row_stops`` are stopping criteria with ``commit_rows``, told every step's commits."""
    batch, prompt_length = input_ids.shape
    max_new_tokens = config.max_new_tokens
    if max_new_tokens is None:
        max_new_tokens = (config.max_length or 20) - prompt_length
    if max_new_tokens < 1:
        raise ValueError(
            f"nothing to generate: the prompt has {prompt_length} tokens and max_length is "
            f"{config.max_length}"
        )
    eos = token_ids(model.config.eos_token_id if config.eos_token_id is None else config.eos_token_id)
    pad = config.pad_token_id
    if pad is None:
        pad = eos[0] if eos else model.config.pad_token_id
    device = input_ids.device
    attention_mask = model_kwargs.get("attention_mask")
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    stop_ids = torch.tensor(eos, dtype=torch.long, device=device)
    # ``main_mask`` stays None while no row has padding or holes: the forwards then build no padding
    # mask and count no positions over it, as in the library's loop (one read of the prompt mask).
    dense = attention_mask is None or bool(mask.all())
    main_mask = None if dense else mask
    # Generated tokens of every original row; a spare last column takes the writes of masked slots.
    generated = torch.full((batch, max_new_tokens + 1), pad, dtype=torch.long, device=device)
    rows = torch.arange(batch, device=device)  # original row of each row still in the batch
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # tokens generated per row
    final_lengths = torch.zeros(batch, dtype=torch.long, device=device)  # per original row, once it leaves
    guard = _Guard(loop_guard, batch, device)
    steps = stats.num_speculative_steps
    length = DraftLength(steps, stats.adaptive)

    cache = growing_cache()
    out = model(
        input_ids=input_ids,
        attention_mask=main_mask,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
        **{key: model_kwargs[key] for key in _FORWARD_INPUTS if key in model_kwargs},
    )
    cache = output_cache(out)
    first = guard.choose(out.logits[:, -1:])[:, 0]
    positions, valid = positions_and_valid(main_mask, batch, prompt_length, device)
    # Pairs the head has not read yet, one block per step since the last step that drafted.
    tokens = torch.cat([input_ids[:, 1:], first[:, None]], dim=1)
    last = torch.full((batch,), prompt_length - 1, device=device)
    unread = [Pairs(tokens, main_hidden(model.config, out), positions, valid, last)]
    drafter = FastMTPDrafter(model)
    last_token = first
    position = mask.sum(dim=1)  # rotary position of last_token: the real tokens before it
    spans = [torch.arange(k + 1, device=device) for k in range(steps + 1)]

    def finished_rows(stops: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Rows that end with this step's commits: EOS, the token budget, or a row stopping criterion."""
        finished = stops | (lengths >= max_new_tokens)
        for criterion in row_stops:
            finished = finished | criterion.commit_rows(rows, tokens, counts)
        return finished

    generated[:, 0] = first
    lengths += 1
    guard.commit(first[:, None], torch.ones_like(first))
    finished = finished_rows(torch.isin(first, stop_ids), first[:, None], torch.ones_like(first))
    room, holes, holed = max_new_tokens - 1, 0, False

    def choose_drafts(logits: torch.Tensor, drafts: list[torch.Tensor]) -> torch.Tensor:
        return guard.choose(logits[:, None], torch.stack(drafts, dim=1) if drafts else None)[:, 0]

    done = int(finished.sum())
    while True:
        if done:
            final_lengths[rows] = lengths
            kept = (~finished).nonzero().flatten()
            if not kept.numel():
                break
            rows, lengths, last_token, position = rows[kept], lengths[kept], last_token[kept], position[kept]
            main_mask = None if main_mask is None else main_mask[kept]
            unread = [pairs.select(kept) for pairs in unread]
            cache.batch_select_indices(kept)
            drafter.select(kept)
            guard.select(kept)
            if holed:
                holes = COMPACT_AFTER
        k = min(length.next(), room - 1)
        if k > 0:
            drafts = drafter.draft(Pairs.join(unread), k, choose_drafts)
            drafter.rollback()
            unread = []
            k = drafts.shape[1]
            verify_ids = torch.cat([last_token[:, None], drafts], dim=1)
        else:
            drafts, verify_ids = None, last_token[:, None]
        span = spans[k]
        verify_mask = None if main_mask is None else torch.cat([main_mask, torch.ones_like(verify_ids)], 1)
        out = model(
            input_ids=verify_ids,
            attention_mask=verify_mask,
            position_ids=position[:, None] + span,
            cache=cache,
            use_cache=True,
            logits_to_keep=k + 1,
            step_exact=k > 0,  # drafts accepted exactly when greedy decoding would give them
        )
        cache = output_cache(out)
        stats.forwards += 1
        targets = guard.choose(out.logits, drafts)  # (A, k + 1)
        if k:
            accepted = (targets[:, :k] == drafts).long().cumprod(dim=1).sum(dim=1)
            stops = torch.isin(targets, stop_ids) & (span[None] <= accepted[:, None])
            stopped = stops.any(dim=1)
            committed = torch.minimum(
                torch.where(stopped, stops.long().argmax(dim=1) + 1, accepted + 1), max_new_tokens - lengths
            )
            columns = torch.where(span[None] < committed[:, None], lengths[:, None] + span, max_new_tokens)
            generated[rows[:, None].expand_as(columns), columns] = targets
        else:  # one token per row; every row in the batch has room for it
            accepted, committed = torch.zeros_like(lengths), torch.ones_like(lengths)
            stopped = torch.isin(targets[:, 0], stop_ids)
            generated[rows, lengths] = targets[:, 0]
        lengths = lengths + committed
        guard.commit(targets, committed)
        finished = finished_rows(stopped, targets, committed)
        ends = torch.stack([torch.where(finished, 0, max_new_tokens - lengths).max(), finished.sum()])
        if k:
            summary = torch.cat(
                [
                    (accepted[:, None] > span[None, :k]).sum(dim=0),
                    torch.bincount(committed, minlength=k + 2),
                    torch.stack([accepted.max(), accepted.min()]),
                    ends,
                ]
            ).tolist()  # the one read of the step
            per_depth, counts, (best, worst, room, done) = summary[:k], summary[k:-4], summary[-4:]
        else:  # no drafts: each row committed one token; the step's one read is just its ends
            room, done = ends.tolist()
            per_depth, counts, best, worst = [], [0, rows.numel()], 0, 0
        stats.record_rows(k, rows.numel(), per_depth, dict(enumerate(counts)))
        length.update(k, per_depth, rows.numel())
        if best < k:
            cache.crop(-(k - best))
        valid = None
        if best > worst or main_mask is not None:  # holes now (rows accepted differently) or earlier
            valid = (span[None, : best + 1] <= accepted[:, None]).long()
            if main_mask is None:
                width = cache.get_seq_length() - best - 1  # the columns before this step's
                main_mask = torch.ones(rows.numel(), width, dtype=torch.long, device=device)
            main_mask = torch.cat([main_mask, valid], dim=1)
        fresh = slice(best + 1)
        hidden = main_hidden(model.config, out)[:, fresh]
        unread.append(Pairs(targets[:, fresh], hidden, position[:, None] + span[fresh], valid, accepted))
        last_token = targets.gather(1, accepted[:, None])[:, 0]
        position = position + accepted + 1
        holes += best - worst
        holed = holed or best > worst
        if holes >= COMPACT_AFTER:
            main_mask = compact(cache, main_mask)
            drafter.compact()
            holes = 0

    return torch.cat([input_ids, generated[:, : int(final_lengths.max())]], dim=1)
