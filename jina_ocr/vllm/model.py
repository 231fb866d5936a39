"""jina-ocr-v1 as a vLLM model: our vision towers, vLLM's DeepSeek-V2 decoder, vLLM's DeepSeek-OCR plumbing.

Why this mix rather than vLLM's ``DeepseekOCRForCausalLM`` as it is:

- vLLM builds SAM ViT-B and CLIP-L at hard-coded sizes and reads a ``DeepseekVLV2Config``. Our config
  drives every dimension, so the vision towers here are the remote code's own modules
  (``SAMEncoder``, ``CLIPVisionEncoder``, ``Projector``): the real checkpoint and tiny test exports load
  key for key, and the visual features are the ones Transformers computes.
- The decoder is vLLM's ``DeepseekV2ForCausalLM`` (paged attention, fused MoE, tensor/expert
  parallelism) built from a DeepSeek-V2 text config with the MLA dimensions set to zero, which selects
  its plain multi-head attention: the same decoder vLLM runs for DeepSeek-OCR.
- Everything between pixels and prompt (image preprocessing, placeholder expansion, feature layout
  with newline and separator vectors, the encoder CUDA-graph hooks) is inherited from vLLM's
  DeepSeek-OCR classes, whose attribute names (``sam_model``, ``vision_model``, ``projector``,
  ``image_newline``, ``view_seperator``) are the checkpoint's as well. Only the tiling differs: our
  processor cuts a page into up to 9 tiles (SPEC section 4), vLLM's DeepSeek-OCR default stops at 6, so
  the tile grid and placeholder counts come from our processing code.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models.deepseek_ocr import (
    DeepseekOCRDummyInputsBuilder,
    DeepseekOCRForCausalLM,
    DeepseekOCRMultiModalProcessor,
    DeepseekOCRProcessingInfo,
)
from vllm.model_executor.models.utils import AutoWeightsLoader, init_vllm_registered_model, maybe_prefix
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.parse import ImageSize
from vllm.transformers_utils.configs.deepseek_vl2 import DeepseekVLV2TextConfig, MlpProjectorConfig
from vllm.transformers_utils.processors.deepseek_ocr import DeepseekOCRProcessor

from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import CLIPVisionEncoder, Projector, SAMEncoder
from jina_ocr.remote_code.processing_jina_ocr import (
    MAX_TILES,
    TILE_SIZE,
    count_image_tokens,
    select_tile_grid,
)

GLOBAL_VIEW_SIZE = 1024  # Gundam mode: the 1024-px global view plus 640-px tiles


def text_config(config: JinaOCRConfig) -> DeepseekVLV2TextConfig:
    """The decoder half of our config as the DeepSeek-V2 config vLLM's decoder classes read.

    ``qk_nope_head_dim = qk_rope_head_dim = 0`` selects vLLM's plain multi-head attention (no MLA);
    the router runs in float32 as SPEC section 3 asks; the FastMTP head is not part of this model
    (it is the draft model, see ``mtp.py``), so ``num_nextn_predict_layers`` is 0 here.
    """
    if config.head_dim not in (None, config.hidden_size // config.num_attention_heads):
        raise ValueError(
            f"vLLM's DeepSeek decoder derives the head size from hidden_size / num_attention_heads; "
            f"this config sets head_dim={config.head_dim}"
        )
    return DeepseekVLV2TextConfig(
        architectures=["DeepseekV2ForCausalLM"],
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        moe_intermediate_size=config.moe_intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        n_routed_experts=config.n_routed_experts,
        n_shared_experts=config.n_shared_experts,
        num_experts_per_tok=config.num_experts_per_tok,
        first_k_dense_replace=config.first_k_dense_replace,
        norm_topk_prob=config.norm_topk_prob,
        routed_scaling_factor=config.routed_scaling_factor,
        topk_method=config.topk_method,
        n_group=1,
        topk_group=1,
        hidden_act=config.hidden_act,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        attention_bias=config.attention_bias,
        kv_lora_rank=None,
        q_lora_rank=None,
        qk_nope_head_dim=0,
        qk_rope_head_dim=0,
        v_head_dim=0,
        num_nextn_predict_layers=0,
        moe_router_dtype="float32",
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        tie_word_embeddings=False,
    )


class JinaOCRProcessingInfo(DeepseekOCRProcessingInfo):
    """Gundam-mode preprocessing and placeholder counts of SPEC section 4 for a model whose config is ours."""

    def get_hf_config(self) -> JinaOCRConfig:
        return self.ctx.get_hf_config(JinaOCRConfig)

    def get_hf_processor(self, **kwargs: object) -> DeepseekOCRProcessor:
        # up to 9 tiles per page as in our processor (vLLM's default for DeepSeek-OCR stops at 6)
        settings = dict(image_size=TILE_SIZE, base_size=GLOBAL_VIEW_SIZE, strategy="v1", max_crops=MAX_TILES)
        return self.ctx.get_hf_processor(DeepseekOCRProcessor, **{**settings, **kwargs})

    def get_num_image_tokens(self, *, image_width: int, image_height: int, cropping: bool = True) -> int:
        grid = select_tile_grid(image_width, image_height) if cropping else None
        return count_image_tokens(GLOBAL_VIEW_SIZE, grid)

    def get_image_size_with_most_features(self) -> ImageSize:
        return ImageSize(width=TILE_SIZE, height=TILE_SIZE * MAX_TILES)  # a 1 x 9 grid: 1263 placeholders


class CLIPOverSAM(CLIPVisionEncoder):
    """Our CLIP encoder with the call signature vLLM's DeepSeek-OCR code uses (pixels, SAM features);
    the pixels are not needed: SAM's features replace CLIP's patch embeddings."""

    def forward(self, pixel_values: torch.Tensor, sam_features: torch.Tensor) -> torch.Tensor:
        return super().forward(sam_features)


@MULTIMODAL_REGISTRY.register_processor(
    DeepseekOCRMultiModalProcessor,
    info=JinaOCRProcessingInfo,
    dummy_inputs=DeepseekOCRDummyInputsBuilder,
)
class JinaOCRForVLLM(DeepseekOCRForCausalLM):
    """The target model of ``architectures: ["JinaOCRForConditionalGeneration"]`` under vLLM.

    Checkpoint keys map as DeepSeek-OCR's do (``model.layers.*`` -> ``language_model.model.layers.*``,
    ``model.sam_model.*`` -> ``sam_model.*``, ...); the FastMTP head ``mtp_module.*`` is left to the
    draft model, which reads the same checkpoint.
    """

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        nn.Module.__init__(self)
        config: JinaOCRConfig = vllm_config.model_config.hf_config
        self.config = config
        self.model_config = vllm_config.model_config
        self.multimodal_config = vllm_config.model_config.multimodal_config
        self.image_token_id = config.image_token_id
        # vLLM's drafter copies the target's `image_token_index` onto the draft config.
        config.image_token_index = config.image_token_id
        self.text_config = text_config(config)
        # Read by the inherited encoder CUDA-graph hooks (output width of the visual features).
        self.projector_config = MlpProjectorConfig(
            projector_type="linear", input_dim=config.projector_input_dim, n_embed=config.hidden_size
        )

        with self._mark_tower_model(vllm_config, "image"):
            self.sam_model = SAMEncoder(config)
            self.vision_model = CLIPOverSAM(config)
            self.projector = Projector(config)
            self.image_newline = nn.Parameter(torch.zeros(config.hidden_size))
            self.view_seperator = nn.Parameter(torch.zeros(config.hidden_size))  # sic: the checkpoint's key

        with self._mark_language_model(vllm_config):
            self.language_model = init_vllm_registered_model(
                vllm_config=vllm_config,
                hf_config=self.text_config,
                prefix=maybe_prefix(prefix, "language_model"),
            )
        self.make_empty_intermediate_tensors = self.language_model.make_empty_intermediate_tensors

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        # The FastMTP head (and the copies of shared tensors some revisions keep beside it) belongs to
        # the draft model, which reads the same checkpoint.
        loader = AutoWeightsLoader(self, ignore_unexpected_prefixes=["mtp_module."])
        return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)
