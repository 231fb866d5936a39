"""The FastMTP head of jina-ocr-v1 as a vLLM draft model (``speculative_config={"method": "mtp"}``).

vLLM's own DeepSeek MTP draft expects MLA attention weights; our head is one dense decoder layer with
plain multi-head attention, so it gets this class. Its semantics are those of ``JinaOCRMTPHead`` and
``generation/fastmtp.py`` in the remote code, entry for entry:

- vLLM's drafter hands it, for every position j, the token x_{j+1} (``input_ids``), the target's state
  h_j after the final norm (``hidden_states``; ``mtp_first_hidden="post_norm"``) and the rotary position
  j of that state (``positions``). The embedding of the entry at position 0 is zeroed.
- ``x = block(eh_proj([enorm(e) ; hnorm(h)]))`` with the block's own paged KV cache; logits are
  ``lm_head(norm(x))`` with the target's final norm and LM head.
- For drafts 2..K vLLM feeds back what ``forward`` returned, at position + 1. ``forward`` therefore
  returns ``norm(x)`` when ``mtp_feedback_hidden="post_norm"`` and ``x`` when it is ``"pre_norm"``;
  ``compute_logits`` applies the final norm only in the second case, so logits are the same either way.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.deepseek_v2 import DeepseekV2DecoderLayer
from vllm.model_executor.models.utils import maybe_prefix
from vllm.sequence import IntermediateTensors

from jina_ocr.vllm.model import text_config

HEAD_PREFIX = "mtp_module.heads.0."

# Checkpoint projections that vLLM fuses into one parameter: (fused name, checkpoint name, shard).
_STACKED = (
    ("qkv_proj", "q_proj", "q"),
    ("qkv_proj", "k_proj", "k"),
    ("qkv_proj", "v_proj", "v"),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)


class JinaOCRMTPLayer(nn.Module):
    """``mtp_module.heads.0``: enorm, hnorm, eh_proj and the dense decoder layer ``mtp_block``."""

    def __init__(self, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.enorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hnorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        # The prefix ends in layer index num_hidden_layers (as DeepSeek's MTP layers do): below
        # first_k_dense_replace it would be dense anyway, but the index also names the block's KV
        # cache, which must not collide with the target's layers.
        block_config = text_config(config)
        block_config.first_k_dense_replace = config.num_hidden_layers + 1
        self.mtp_block = DeepseekV2DecoderLayer(vllm_config, prefix, config=block_config)

    def forward(
        self, embeddings: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """The block's output before the shared final norm."""
        embeddings = torch.where(positions.unsqueeze(-1) == 0, 0, embeddings)
        x = self.eh_proj(torch.cat([self.enorm(embeddings), self.hnorm(hidden)], dim=-1))
        x, residual = self.mtp_block(positions=positions, hidden_states=x, residual=None)
        return x + residual


class JinaOCRMTPPredictor(nn.Module):
    """The shared embedding, the head and a copy of the target's final norm (``model.norm``)."""

    def __init__(self, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.embed_tokens = VocabParallelEmbedding(
            config.vocab_size, config.hidden_size, prefix=maybe_prefix(prefix, "embed_tokens")
        )
        self.head = JinaOCRMTPLayer(vllm_config, prefix=f"{prefix}.layers.{config.num_hidden_layers}")
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)


@support_torch_compile(
    dynamic_arg_dims={"input_ids": 0, "positions": -1, "hidden_states": 0, "inputs_embeds": 0}
)
class JinaOCRMTPModel(nn.Module):
    """Draft model registered as ``JinaOCRMTPModel``; one head applied recursively for K drafts.

    vLLM replaces ``model.embed_tokens`` and ``lm_head`` by the target's after loading (MTP drafts
    share them), so the copies read here only serve until then.
    """

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        if config.num_nextn_predict_layers != 1:
            raise ValueError(
                "this checkpoint has no FastMTP head (num_nextn_predict_layers is "
                f"{config.num_nextn_predict_layers}); serve it without a speculative_config"
            )
        if config.mtp_first_hidden != "post_norm":
            raise ValueError(
                "vLLM hands its draft models the target's states after the final norm, so FastMTP under "
                f"vLLM needs mtp_first_hidden='post_norm'; this checkpoint says {config.mtp_first_hidden!r}"
            )
        self.config = config
        self.feed_back_normed = config.mtp_feedback_hidden == "post_norm"
        self.model = JinaOCRMTPPredictor(vllm_config, prefix=maybe_prefix(prefix, "model"))
        self.lm_head = ParallelLMHead(
            config.vocab_size, config.hidden_size, prefix=maybe_prefix(prefix, "lm_head")
        )
        self.logits_processor = LogitsProcessor(config.vocab_size)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
        spec_step_idx: int = 0,
    ) -> torch.Tensor:
        """The state vLLM samples from and feeds back as ``hidden_states`` for the next draft."""
        if inputs_embeds is None:
            inputs_embeds = self.embed_input_ids(input_ids)
        x = self.model.head(inputs_embeds, hidden_states, positions)
        return self.model.norm(x) if self.feed_back_normed else x

    def compute_logits(self, hidden_states: torch.Tensor, spec_step_idx: int = 0) -> torch.Tensor | None:
        normed = hidden_states if self.feed_back_normed else self.model.norm(hidden_states)
        return self.logits_processor(self.lm_head, normed)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Reads ``mtp_module.heads.0.*``, ``model.embed_tokens``, ``model.norm`` and ``lm_head`` from the
        target checkpoint and ignores the rest (including the exact copies of the shared tensors that
        some revisions keep under ``mtp_module``)."""
        params = dict(self.named_parameters())
        shared = {
            "model.embed_tokens.weight": "model.embed_tokens.weight",
            "model.norm.weight": "model.norm.weight",
            "lm_head.weight": "lm_head.weight",
        }
        loaded: set[str] = set()
        for name, tensor in weights:
            if name in shared:
                target = shared[name]
            elif name.startswith(HEAD_PREFIX) and not any(
                part in name for part in ("mtp_embed_tokens", "shared_head")
            ):
                target = "model.head." + name[len(HEAD_PREFIX) :]
            else:
                continue
            for fused, part, shard in _STACKED:
                if f".{part}." in target:
                    target = target.replace(f".{part}.", f".{fused}.")
                    param = params[target]
                    param.weight_loader(param, tensor, shard)
                    break
            else:
                param = params[target]
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
            loaded.add(target)
        return loaded
