"""FastMTP for a batch of pages: our own speculative loop, since the library's refuses batch size > 1.

Every step drafts up to K tokens per row, verifies all rows in one main-model forward, and commits
per row the longest matching prefix plus one token, exactly as greedy decoding would produce them.
Rows accept different numbers of drafts, so the caches are kept "padded consistently":

- both KV caches (main model and head) grow by the same number of columns for every row; a row that
  accepted fewer drafts than the best row of the step leaves masked holes in its columns, and the
  2-D attention masks (from which the model also derives its position ids) skip them;
- the columns no row accepted are cropped at once, so a step that rejects everything costs no memory;
- a row that finished (EOS or its token budget) leaves the batch, caches included.

Options the loop cannot honour (sampling, beams, custom logits processors, stopping criteria,
streamers, extra outputs, ...) are refused with an error that says what to do instead.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from ..compat_jina_ocr import output_cache
from .fastmtp import FastMTPDrafter, FastMTPStats, Pairs, main_hidden, positions_and_valid

# GenerationConfig fields that change greedy decoding, with the value that leaves it unchanged.
_NEUTRAL_OPTIONS = {
    "do_sample": False,
    "num_beams": 1,
    "num_beam_groups": 1,
    "num_return_sequences": 1,
    "penalty_alpha": None,
    "dola_layers": None,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "force_words_ids": None,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "exponential_decay_length_penalty": None,
    "guidance_scale": None,
    "watermarking_config": None,
    "stop_strings": None,
    "max_time": None,
    "renormalize_logits": False,
    "output_scores": False,
    "output_logits": False,
    "output_attentions": False,
    "output_hidden_states": False,
    "return_dict_in_generate": False,
    "token_healing": False,
    "prompt_lookup_num_tokens": None,
    "assistant_early_exit": None,
}
# Model inputs the batched loop passes to the prefill forward.
_FORWARD_INPUTS = ("pixel_values", "pixel_values_local", "image_grids")


def check_batched_options(generation_config, extra_inputs: dict, **call_options) -> None:
    """Raise for what the batched loop cannot honour; ``call_options`` are generate()'s own arguments."""
    refused = [
        f"{name}={getattr(generation_config, name)!r}"
        for name, neutral in _NEUTRAL_OPTIONS.items()
        if getattr(generation_config, name, None) not in (None, neutral)
    ]
    refused += [f"{name}=..." for name, value in call_options.items() if value]
    refused += [f"{name}=..." for name in extra_inputs if name not in _FORWARD_INPUTS + ("use_cache",)]
    if extra_inputs.get("use_cache") is False:
        refused.append("use_cache=False")
    if refused:
        raise ValueError(
            "FastMTP for a batch of more than one sequence is greedy decoding with the loop guard only; "
            f"it cannot honour {', '.join(refused)}. Pass use_mtp=False for this call, or generate one "
            "sequence at a time (batch size 1 runs FastMTP inside the library's loop, which supports them)."
        )


class _Rows:
    """The generated tokens of every row, kept on the device for the loop guard's history."""

    def __init__(self, batch: int, budget: int, device):
        self.tokens = torch.zeros(batch, budget, dtype=torch.long, device=device)
        self.lengths = [0] * batch

    def history(self, row: int, window: int, extra: list[torch.Tensor] = ()) -> torch.Tensor:
        length = self.lengths[row]
        recent = self.tokens[row, max(0, length - window) : length]
        return torch.cat([recent, *extra]) if extra else recent

    def append(self, row: int, tokens: torch.Tensor) -> None:
        start = self.lengths[row]
        self.tokens[row, start : start + tokens.shape[0]] = tokens
        self.lengths[row] = start + tokens.shape[0]


@torch.no_grad()
def generate_batched(
    model,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None,
    forward_inputs: dict,
    *,
    steps: int,
    max_new_tokens: int,
    eos_token_ids: list[int],
    pad_token_id: int,
    loop_guard,
    stats: FastMTPStats,
) -> torch.LongTensor:
    """Greedy decoding of a left-padded batch with FastMTP; returns prompts plus generated tokens,
    finished rows padded with ``pad_token_id`` (the layout of the library's greedy output)."""
    batch, prompt_length = input_ids.shape
    device = input_ids.device
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    stop_ids = torch.tensor(eos_token_ids, dtype=torch.long, device=device)
    rows = _Rows(batch, max_new_tokens, device)
    window = loop_guard.window if loop_guard is not None else 0
    active = list(range(batch))  # original row of each row still in the batch

    def pick(logits: torch.Tensor, row: int, extra=()) -> torch.Tensor:
        """Greedy choice for one active row, with the loop guard applied to its own history."""
        if loop_guard is not None:
            banned = loop_guard.banned_tokens(rows.history(active[row], window, extra))
            if banned.numel():
                logits = logits.clone()
                logits[banned] = -float("inf")
        return logits.argmax(dim=-1)

    def choose_drafts(logits: torch.Tensor, drafts: list[torch.Tensor]) -> torch.Tensor:
        if loop_guard is None:
            return logits.argmax(dim=-1)
        return torch.stack([pick(logits[i], i, [d[i : i + 1] for d in drafts]) for i in range(len(active))])

    cache = DynamicCache()
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
        **forward_inputs,
    )
    cache = output_cache(out)
    first = torch.stack([pick(out.logits[i, -1], i) for i in range(batch)])
    positions, valid = positions_and_valid(mask, batch, prompt_length, device)
    pairs = Pairs(
        tokens=torch.cat([input_ids[:, 1:], first[:, None]], dim=1),
        hidden=main_hidden(model.config, out),
        positions=positions,
        valid=valid,
        last=torch.full((batch,), prompt_length - 1, device=device),
    )
    drafter = FastMTPDrafter(model)
    last_token = first
    main_mask = mask
    keep = []
    for i in range(batch):
        rows.append(i, first[i : i + 1])
        keep.append(not bool(torch.isin(first[i], stop_ids)) and max_new_tokens > 1)

    while True:
        kept = torch.tensor([i for i, k in enumerate(keep) if k], dtype=torch.long, device=device)
        if kept.numel() < len(active):
            if not kept.numel():
                break
            active = [active[i] for i in kept.tolist()]
            cache.batch_select_indices(kept)
            drafter.select(kept)
            pairs, last_token, main_mask = pairs.select(kept), last_token[kept], main_mask[kept]
        room = max(max_new_tokens - rows.lengths[r] for r in active)
        k = min(steps, room - 1)
        if k > 0:
            drafts = drafter.draft(pairs, k, choose_drafts)
            drafter.rollback()
        else:
            drafts = last_token.new_empty(len(active), 0)
        k = drafts.shape[1]
        verify_ids = torch.cat([last_token[:, None], drafts], dim=1)
        out = model(
            input_ids=verify_ids,
            attention_mask=torch.cat([main_mask, torch.ones_like(verify_ids)], dim=1),
            cache=cache,
            use_cache=True,
            logits_to_keep=k + 1,
        )
        cache = output_cache(out)
        stats.forwards += 1
        targets = torch.zeros_like(verify_ids)
        accepted = []
        for i, row in enumerate(active):
            n = 0
            while True:
                targets[i, n] = pick(out.logits[i, n], i, [drafts[i, :n]])
                if n == k or targets[i, n] != drafts[i, n]:
                    break
                n += 1
            accepted.append(n)
            commit = targets[i, : n + 1]
            stop = torch.isin(commit, stop_ids).nonzero()
            if stop.numel():
                commit = commit[: int(stop[0]) + 1]
            commit = commit[: max_new_tokens - rows.lengths[row]]
            rows.append(row, commit)
            stats.record(k, n, commit.shape[0])
            keep[i] = not stop.numel() and rows.lengths[row] < max_new_tokens
        best = max(accepted)
        if best < k:
            cache.crop(-(k - best))
        accepted_t = torch.tensor(accepted, device=device)
        valid = (torch.arange(best + 1, device=device)[None] <= accepted_t[:, None]).long()
        position = main_mask.sum(dim=1)  # the position of last_token
        main_mask = torch.cat([main_mask, valid], dim=1)
        # k == 0 only when every row had one token left, so there is no next step to draft for.
        pairs = Pairs(
            tokens=targets[:, : best + 1],
            hidden=main_hidden(model.config, out)[:, : best + 1],
            positions=position[:, None] + torch.arange(best + 1, device=device),
            valid=valid,
            last=accepted_t,
        )
        last_token = targets[torch.arange(len(active), device=device), accepted_t]
        keep = keep[: len(active)]

    width = max(rows.lengths)
    result = torch.full((batch, prompt_length + width), pad_token_id, dtype=torch.long, device=device)
    result[:, :prompt_length] = input_ids
    for row in range(batch):
        result[row, prompt_length : prompt_length + rows.lengths[row]] = rows.tokens[row, : rows.lengths[row]]
    return result
