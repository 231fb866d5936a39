"""Names of the generation options this package adds, for ``generate`` and the tools: they live in
``generation_config.json`` or are passed for one call (see ``JinaOCRForConditionalGeneration.generate``).
"""

from __future__ import annotations

STEPS_KEY = "mtp_num_speculative_steps"
ADAPTIVE_KEY = "mtp_adaptive_drafting"
LOOP_GUARD_NGRAM_KEY = "loop_guard_ngram_size"
LOOP_GUARD_WINDOW_KEY = "loop_guard_window"
LOOP_GUARD_EXEMPT_KEY = "loop_guard_exempt_token_ids"
CALL_KEYS = (STEPS_KEY, ADAPTIVE_KEY, LOOP_GUARD_NGRAM_KEY, LOOP_GUARD_WINDOW_KEY, LOOP_GUARD_EXEMPT_KEY)


def token_ids(value) -> list[int]:
    """``eos_token_id`` or ``pad_token_id`` as a list of ids: configs hold one id, a list of ids, or None."""
    return [] if value is None else [value] if isinstance(value, int) else list(value)
