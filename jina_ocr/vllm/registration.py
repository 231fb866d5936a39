"""``register()``: what vLLM must know about jina-ocr-v1, done once per process.

vLLM runs every ``vllm.general_plugins`` entry point in each of its processes (front end, engine core,
workers), possibly several times, so each step checks whether it already happened. Three things are
registered:

1. our config class under ``model_type: "jina_ocr"`` with Transformers' AutoConfig, so vLLM reads
   ``config.json`` without ``trust_remote_code`` (and with the Transformers release vLLM pins);
2. the target architecture ``JinaOCRForConditionalGeneration`` and the draft architecture
   ``JinaOCRMTPModel`` with vLLM's model registry, as lazy ``module:class`` strings so that loading the
   plugin imports no model code (and initialises no accelerator) in processes that never build one;
3. a rule in ``SpeculativeConfig.hf_config_override``, the hook through which vLLM turns a target's
   config into its MTP draft's config for ``speculative_config={"method": "mtp"}``: vLLM keeps a list of
   model types that carry MTP heads, and ``jina_ocr`` has to be taught to it.
"""

from __future__ import annotations

import functools

TARGET_ARCHITECTURE = "JinaOCRForConditionalGeneration"
DRAFT_ARCHITECTURE = "JinaOCRMTPModel"
MODEL_TYPE = "jina_ocr"
# A model type on vLLM's list of MTP drafts; no vLLM code specialises on this generic one.
DRAFT_MODEL_TYPE = "mtp"

_MODELS = {
    TARGET_ARCHITECTURE: "jina_ocr.vllm.model:JinaOCRForVLLM",
    DRAFT_ARCHITECTURE: "jina_ocr.vllm.mtp:JinaOCRMTPModel",
}


def register() -> None:
    """Make vLLM load jina-ocr-v1 exports and use their FastMTP head as the MTP draft. Idempotent."""
    from transformers import AutoConfig
    from vllm import ModelRegistry

    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig

    AutoConfig.register(MODEL_TYPE, JinaOCRConfig, exist_ok=True)
    for architecture, location in _MODELS.items():
        if architecture not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(architecture, location)
    _teach_mtp_override()


def draft_config_override(hf_config):
    """The MTP draft's config from a jina-ocr target config (vLLM calls this on its own copy)."""
    if getattr(hf_config, "model_type", None) == MODEL_TYPE:
        hf_config.model_type = DRAFT_MODEL_TYPE
        hf_config.update(
            {"architectures": [DRAFT_ARCHITECTURE], "n_predict": hf_config.num_nextn_predict_layers}
        )
    return hf_config


def _teach_mtp_override() -> None:
    from vllm.config.speculative import SpeculativeConfig

    current = SpeculativeConfig.hf_config_override
    if getattr(current, "_jina_ocr", False):
        return

    @functools.wraps(current)
    def hf_config_override(hf_config):
        return current(draft_config_override(hf_config))

    hf_config_override._jina_ocr = True
    SpeculativeConfig.hf_config_override = staticmethod(hf_config_override)
