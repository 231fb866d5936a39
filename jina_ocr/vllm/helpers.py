"""Arguments for ``vllm.LLM``, OCR sampling parameters and FastMTP statistics read back from vLLM.

The defaults come from the exported folder itself (``config.json`` for the FastMTP depth,
``generation_config.json`` for FastMTP on or off, the loop guard and the output budget), so vLLM decodes with the same
settings as ``model.generate`` in Transformers.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from jina_ocr import generation_defaults as defaults
from jina_ocr.remote_code.generation import settings
from jina_ocr.remote_code.processing_jina_ocr import jina_request

# vLLM's per-request no-repeat n-gram processor (shipped for DeepSeek-OCR): output tokens only, n-grams
# starting inside the window, whitelisted tokens never banned, i.e. the rule of our loop guard
# (generation/loop_guard.py). `vllm serve` takes it as --logits-processors with this name; it reads
# ngram_size / window_size / whitelist_token_ids from a request's extra_args (vllm_xargs over HTTP).
LOOP_GUARD_PROCESSOR = "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor"

# Pass as `tokenization_kwargs` to `LLM.generate` with a text prompt: the text is complete, as our
# processor takes it (the jina-ocr-v1 format has no BOS; the DeepSeek style writes its own), whereas
# vLLM's tokenizer call would add one. `LLM.chat` and the OpenAI server render the chat template and
# add nothing, so they need no such argument.
PROMPT_TOKENIZATION = {"add_special_tokens": False}

logger = logging.getLogger(__name__)


def ocr_prompt(instruction: str | None = None) -> str:
    """The jina-ocr-v1 prompt for one page, with its ``<image>`` marker (what the chat template writes)."""
    return jina_request(instruction or None)


def _read_json(folder: str | Path, name: str) -> dict[str, Any]:
    path = Path(folder) / name
    return json.loads(path.read_text()) if path.is_file() else {}


def vllm_llm_kwargs(
    model: str | Path, num_speculative_tokens: int | None = None, **overrides: Any
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` serving an exported jina-ocr folder.

    FastMTP drafting is on when the checkpoint has a head and its ``generation_config.json`` does not
    turn FastMTP off (``use_mtp``: random-weight exports do), with the config's depth K, unless
    ``num_speculative_tokens`` says otherwise (0 turns it off, K drafts K tokens). vLLM 0.32 refuses custom logits
    processors together with speculative decoding, so the loop-guard processor is installed only when
    drafting is off; it then acts on requests whose sampling parameters ask for it
    (``ocr_sampling_params``). ``overrides`` win (``tensor_parallel_size``, ``max_model_len``, ...).
    """
    config = _read_json(model, "config.json")
    kwargs: dict[str, Any] = {"model": str(model), "limit_mm_per_prompt": {"image": 1}}
    if num_speculative_tokens is not None:
        depth = num_speculative_tokens
    elif _read_json(model, "generation_config.json").get("use_mtp", True):
        depth = config.get("mtp_num_speculative_steps", 3)
    else:
        depth = 0
    if config.get("num_nextn_predict_layers", 0) and depth:
        kwargs["speculative_config"] = {"method": "mtp", "num_speculative_tokens": depth}
    else:
        kwargs["logits_processors"] = [LOOP_GUARD_PROCESSOR]
    kwargs.update(overrides)
    return kwargs


def ocr_sampling_params(model: str | Path | None = None, loop_guard: bool = True, **overrides: Any):
    """Greedy ``SamplingParams`` with the loop guard of ``generation_config.json`` (SPEC section 5).

    Without ``model`` the released model's values are used (n 35 over the last 1024 output tokens,
    ``<td>`` / ``</td>`` exempt, ``DEFAULT_MAX_NEW_TOKENS`` new tokens). The guard needs an engine built without speculative
    decoding (see ``vllm_llm_kwargs``); an engine with FastMTP ignores it.
    """
    from vllm import SamplingParams

    generation = _read_json(model, "generation_config.json") if model is not None else {}
    params: dict[str, Any] = {
        "temperature": 0.0,
        "max_tokens": generation.get("max_new_tokens", defaults.DEFAULT_MAX_NEW_TOKENS),
        "skip_special_tokens": False,
    }
    ngram = generation.get(settings.LOOP_GUARD_NGRAM_KEY, defaults.LOOP_GUARD_NGRAM_SIZE)
    if loop_guard and ngram:
        exempt = generation.get(settings.LOOP_GUARD_EXEMPT_KEY, list(defaults.REAL_EXEMPT_TOKEN_IDS))
        params["extra_args"] = {
            "ngram_size": ngram,
            "window_size": generation.get(settings.LOOP_GUARD_WINDOW_KEY, defaults.LOOP_GUARD_WINDOW),
            "whitelist_token_ids": list(exempt),
        }
    params.update(overrides)
    return SamplingParams(**params)


def _summary(drafts: float, draft_tokens: float, accepted: float, per_position: list[float]) -> dict:
    return {
        "drafts": int(drafts),
        "draft_tokens": int(draft_tokens),
        "accepted_tokens": int(accepted),
        "accepted_per_position": [int(n) for n in per_position],
        "acceptance_per_position": [n / drafts if drafts else 0.0 for n in per_position],
        "acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
        # committed tokens per verification step: the accepted drafts plus the target's own token
        "mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
    }


def speculative_stats(llm) -> dict:
    """FastMTP statistics of a ``vllm.LLM`` (built with ``disable_log_stats=False``) since it started.

    ``drafts`` counts verification steps that carried drafts, ``draft_tokens`` the drafted tokens (K
    per step), ``accepted_per_position[d]`` how often draft d+1 was accepted.
    """
    values: dict[str, Any] = {}
    for metric in llm.get_metrics():
        values[metric.name] = getattr(metric, "values", None) or getattr(metric, "value", 0)
    if "vllm:spec_decode_num_drafts" not in values:
        raise RuntimeError(
            "vLLM reported no speculative-decoding metrics: build the LLM with a speculative_config and "
            "disable_log_stats=False"
        )
    return _summary(
        values["vllm:spec_decode_num_drafts"],
        values["vllm:spec_decode_num_draft_tokens"],
        values["vllm:spec_decode_num_accepted_tokens"],
        list(values.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []),
    )


_SAMPLE = re.compile(r"^(vllm:spec_decode_\w+?)(?:_total)?(\{[^}]*\})?\s+(\S+)$")
_POSITION = re.compile(r'position="(\d+)"')


def speculative_stats_from_prometheus(text: str) -> dict:
    """The same statistics from the Prometheus text of ``vllm serve``'s ``/metrics`` endpoint."""
    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            position = int(_POSITION.search(labels).group(1))
            per_position[position] = per_position.get(position, 0.0) + value
        elif not name.endswith("_created"):
            totals[name] = totals.get(name, 0.0) + value
    if "vllm:spec_decode_num_drafts" not in totals:
        raise RuntimeError("the server reports no speculative-decoding metrics: was it started with one?")
    return _summary(
        totals["vllm:spec_decode_num_drafts"],
        totals["vllm:spec_decode_num_draft_tokens"],
        totals["vllm:spec_decode_num_accepted_tokens"],
        [per_position[p] for p in sorted(per_position)],
    )


def log_speculative_stats(stats: dict, log: logging.Logger = logger) -> None:
    """One log line with the acceptance figures (the same ones vLLM's own periodic log shows)."""
    log.info(
        "FastMTP: %d steps, %d drafts, acceptance %.1f%%, per position %s, %.2f tokens per step",
        stats["drafts"],
        stats["draft_tokens"],
        100 * stats["acceptance_rate"],
        ", ".join(f"{p:.2f}" for p in stats["acceptance_per_position"]),
        stats["mean_acceptance_length"],
    )
