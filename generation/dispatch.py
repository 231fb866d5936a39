"""``model.generate`` with FastMTP and the loop guard: resolves the options of one call and picks the loop.

- ``use_mtp`` defaults from ``generation_config.json`` (on when the checkpoint has a head);
  ``mtp_num_speculative_steps`` sets K for a call (1..the config's K).
- FastMTP runs our batched loop (batched.py), at batch size 1 too: about 10 % faster than the library's
  assisted-decoding loop on the tiny preset (benchmarks/fastmtp.py). A batch-1 call that asks for what
  only the library's loop honours (a streamer, logits processors, stopping criteria other than
  ``RowStops``, a static cache, scores, ...) runs inside that loop; a larger batch is refused.
- FastMTP is greedy: a call asking for sampling or beams decodes without it (an error with ``use_mtp=True``).
- The loop guard is a logits processor appended to the call's, so every loop applies it identically.
- Row stopping criteria work in every loop; with FastMTP they get the call's running statistics.
- A library-loop call without a cache of its own, a ``cache_implementation`` or beams gets a growing
  KV cache (growing_cache.py): ``DynamicCache`` appends copy every layer's cache at every step (a tenth
  of a full-size float32 decode step at a 512-token prompt, more as the page grows).
"""

from __future__ import annotations

import copy

import torch
from transformers.generation import LogitsProcessorList

from ..compat_jina_ocr import CACHE_FIELD
from .batched import batched_refusals, generate_batched
from .fastmtp import FastMTPStats
from .growing_cache import growing_cache
from .loop_guard import SlidingWindowNoRepeatNGram
from .settings import (
    ADAPTIVE_KEY,
    CALL_KEYS,
    LOOP_GUARD_EXEMPT_KEY,
    LOOP_GUARD_NGRAM_KEY,
    LOOP_GUARD_WINDOW_KEY,
    STEPS_KEY,
)


def _option(call: dict, config, key: str):
    return call[key] if key in call else getattr(config, key, None)


def _resolve_steps(model, requested) -> int:
    most = model.config.mtp_num_speculative_steps
    steps = most if requested is None else requested
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= most:
        raise ValueError(
            f"mtp_num_speculative_steps must be an integer from 1 to {most} (the head was trained for "
            f"{most} recursive steps), got {requested!r}"
        )
    return steps


def _resolve_adaptive(requested) -> bool:
    if requested is None:
        return True
    if not isinstance(requested, bool):
        raise ValueError(f"{ADAPTIVE_KEY} must be True or False, got {requested!r}")
    return requested


def build_loop_guard(call: dict, config, prompt_length: int) -> SlidingWindowNoRepeatNGram | None:
    """The loop guard of this call, or None when ``loop_guard_ngram_size`` is 0 or unset."""
    ngram = _option(call, config, LOOP_GUARD_NGRAM_KEY)
    if not ngram:
        return None
    window = _option(call, config, LOOP_GUARD_WINDOW_KEY)
    if window is None:
        raise ValueError(f"{LOOP_GUARD_NGRAM_KEY} is set but {LOOP_GUARD_WINDOW_KEY} is not")
    exempt = _option(call, config, LOOP_GUARD_EXEMPT_KEY) or ()
    return SlidingWindowNoRepeatNGram(ngram, window, prompt_length, exempt)


def generate(
    model,
    library_generate,
    inputs: torch.Tensor | None = None,
    generation_config=None,
    logits_processor=None,
    stopping_criteria=None,
    streamer=None,
    **kwargs,
):
    """Run one ``generate`` call; ``library_generate`` is GenerationMixin.generate bound to ``model``."""
    model.fastmtp_stats = None
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    if generation_config is not None:  # unset values fall back to the model's file, as in the library
        config.update(**model.generation_config.to_dict(), defaults_only=True, allow_custom_entries=True)
    call = {key: kwargs.pop(key) for key in CALL_KEYS if key in kwargs}
    explicit_mtp = kwargs.pop("use_mtp", None)
    model_kwargs = config.update(**kwargs)

    greedy = not config.do_sample and (config.num_beams or 1) == 1
    use_mtp = bool(config.use_mtp) if explicit_mtp is None else bool(explicit_mtp)
    if use_mtp and not greedy:
        if explicit_mtp:
            raise ValueError(
                "use_mtp=True is greedy speculative decoding; it cannot be combined with do_sample=True or "
                "num_beams > 1"
            )
        use_mtp = False
    if use_mtp and not getattr(model.config, "num_nextn_predict_layers", 0):
        raise ValueError(
            "use_mtp=True needs a checkpoint with a FastMTP head (num_nextn_predict_layers = 1); this model "
            "has none, so generate with use_mtp=False"
        )
    steps = _resolve_steps(model, _option(call, config, STEPS_KEY)) if use_mtp else None
    adaptive = _resolve_adaptive(_option(call, config, ADAPTIVE_KEY))
    config.use_mtp = use_mtp

    input_ids = inputs if inputs is not None else model_kwargs.get("input_ids")
    prompt_length = input_ids.shape[1] if input_ids is not None else 0
    processors = LogitsProcessorList(logits_processor or [])
    guard = build_loop_guard(call, config, prompt_length)
    if guard is not None:
        processors.append(guard)

    batch = input_ids.shape[0] if input_ids is not None else 1
    row_stops = [c for c in stopping_criteria or () if callable(getattr(c, "commit_rows", None))]
    call_options = {
        "logits_processor": logits_processor,
        "stopping_criteria": [c for c in stopping_criteria or () if c not in row_stops],
        "streamer": streamer,
    }
    refused = batched_refusals(config, model_kwargs, **call_options) if use_mtp else []
    ours = use_mtp and input_ids is not None and (batch > 1 or not refused)
    if ours and refused:
        raise ValueError(
            "FastMTP for a batch of more than one sequence is greedy decoding with the loop guard only; "
            f"it cannot honour {', '.join(refused)}. Pass use_mtp=False for this call, or generate one "
            "sequence at a time (batch size 1 runs FastMTP inside the library's loop, which supports them)."
        )
    stats = FastMTPStats(steps, batch, adaptive) if use_mtp else None  # the library's loop: batch 1
    for criterion in row_stops:
        criterion.fastmtp = stats
    if ours:
        output = generate_batched(model, config, input_ids, model_kwargs, stats, guard, row_stops)
    else:
        if _default_cache_wanted(config, model_kwargs):
            model_kwargs[CACHE_FIELD] = growing_cache()
        model._fastmtp_call = stats  # for the candidate-generator hook
        try:
            output = library_generate(
                inputs,
                generation_config=config,
                logits_processor=processors,
                stopping_criteria=stopping_criteria,
                streamer=streamer,
                **model_kwargs,
            )
        finally:
            model._fastmtp_call = None
    if stats is not None:
        model.fastmtp_stats = stats.as_dict()
    return output


def _default_cache_wanted(config, model_kwargs: dict) -> bool:
    """Whether the library would make its default ``DynamicCache`` (beams excepted: reordering them
    replaces every layer's tensors, so a growing cache would copy them anyway)."""
    return (
        config.use_cache is not False
        and config.cache_implementation is None
        and (config.num_beams or 1) == 1
        and model_kwargs.get("cache") is None
        and model_kwargs.get("past_key_values") is None
    )
