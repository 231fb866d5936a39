"""vLLM integration of jina-ocr-v1: serve exported folders with FastMTP as the speculative draft.

``register()`` is the ``vllm.general_plugins`` entry point (pyproject.toml), so installing this
package is enough for ``vllm serve <folder>`` and ``vllm.LLM(<folder>)``; calling it by hand does no
harm. The model classes live in ``model.py`` (target) and ``mtp.py`` (draft) and are imported by vLLM
only when it builds them. Importing this package does not import vLLM.
"""

from jina_ocr.vllm.helpers import (
    LOOP_GUARD_PROCESSOR,
    PROMPT_TOKENIZATION,
    log_speculative_stats,
    ocr_prompt,
    ocr_sampling_params,
    speculative_stats,
    speculative_stats_from_prometheus,
    vllm_llm_kwargs,
)
from jina_ocr.vllm.registration import register

__all__ = [
    "LOOP_GUARD_PROCESSOR",
    "PROMPT_TOKENIZATION",
    "log_speculative_stats",
    "ocr_prompt",
    "ocr_sampling_params",
    "register",
    "speculative_stats",
    "speculative_stats_from_prometheus",
    "vllm_llm_kwargs",
]
