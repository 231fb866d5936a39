"""Names and defaults of the generation options this package adds, shared by ``generate`` and the export.

They live in ``generation_config.json`` and can be passed to ``model.generate`` for one call:

- ``mtp_num_speculative_steps``: drafts per FastMTP step, 1..K where K is the config's value (3).
- ``mtp_adaptive_drafting``: True (default) picks each step's draft count for speed (generation/adaptive.py).
- ``loop_guard_ngram_size``: n of the sliding-window no-repeat n-gram rule; 0 or None turns it off.
- ``loop_guard_window``: how many of the last generated tokens the rule searches.
- ``loop_guard_exempt_token_ids``: tokens the rule never bans (table cells repeat legitimately).

:func:`token_ids` reads the library's own token options (EOS, padding) for every caller, here and in jina_ocr.
"""

from __future__ import annotations

STEPS_KEY = "mtp_num_speculative_steps"
ADAPTIVE_KEY = "mtp_adaptive_drafting"
LOOP_GUARD_NGRAM_KEY = "loop_guard_ngram_size"
LOOP_GUARD_WINDOW_KEY = "loop_guard_window"
LOOP_GUARD_EXEMPT_KEY = "loop_guard_exempt_token_ids"
CALL_KEYS = (STEPS_KEY, ADAPTIVE_KEY, LOOP_GUARD_NGRAM_KEY, LOOP_GUARD_WINDOW_KEY, LOOP_GUARD_EXEMPT_KEY)

# SPEC section 5: n = 35 over the last 1024 generated tokens, <td> and </td> exempt.
LOOP_GUARD_NGRAM_SIZE = 35
LOOP_GUARD_WINDOW = 1024
EXEMPT_TOKENS = ("<td>", "</td>")
# Their ids in the real jina-ocr-v1 / DeepSeek-OCR vocabulary, for exports that ship no tokenizer.
REAL_VOCAB_SIZE = 129280
REAL_EXEMPT_TOKEN_IDS = (128821, 128822)

# The output budget per page: a dense page is about 1,100 tokens, so this leaves room for the densest.
DEFAULT_MAX_NEW_TOKENS = 4096


def token_ids(value) -> list[int]:
    """``eos_token_id`` or ``pad_token_id`` as a list of ids: configs hold one id, a list of ids, or None."""
    return [] if value is None else [value] if isinstance(value, int) else list(value)
