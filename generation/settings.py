"""Names and defaults of the generation options this package adds, shared by ``generate`` and the export.

They live in ``generation_config.json`` next to the library's own keys (``use_mtp``, ``max_new_tokens``)
and can be passed to ``model.generate`` for one call:

- ``mtp_num_speculative_steps``: drafts per FastMTP step, 1..K where K is the config's value (3).
- ``mtp_adaptive_drafting``: True (the default) drafts, at each step, the number of tokens (down to
  none) that the head's recent acceptance and the measured cost of a step make fastest, and probes a
  failing head again later (generation/adaptive.py); False always drafts ``mtp_num_speculative_steps``.
- ``loop_guard_ngram_size``: n of the sliding-window no-repeat n-gram rule; 0 or None turns it off.
- ``loop_guard_window``: how many of the last generated tokens the rule searches.
- ``loop_guard_exempt_token_ids``: tokens the rule never bans (table cells repeat legitimately).
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

DEFAULT_MAX_NEW_TOKENS = 4096
"""jina-ocr-v1's output budget per page; a dense page is about 1,100 tokens, so this leaves room for the
densest. The export writes it into generation_config.json; jina-ocr convert and serve default to it."""
