"""Configuration of jina-ocr-v1: DeepSeek-OCR's DeepEncoder (SAM ViT-B + CLIP-L), its DeepSeek-V2 MoE
decoder, and the FastMTP draft head. Every dimension is a field (the defaults are the 3.34 B model); a
DeepSeek-OCR ``config.json`` is accepted as it is, its nested ``vision_config`` / ``projector_config`` /
``language_config`` read as flat fields.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

# Keys of the DeepSeek-OCR config.json that describe its own code or MLA variants we do not have; they
# are consumed here (checked where they matter) so they are not saved back as meaningless attributes.
_DEEPSEEK_ONLY_KEYS = tuple(
    "candidate_resolutions global_view_pos tile_tag lm_head rm_head kv_lora_rank q_lora_rank "
    "qk_nope_head_dim qk_rope_head_dim v_head_dim n_group topk_group".split()
)

MTP_HIDDEN_CHOICES = ("post_norm", "pre_norm")
# What the FastMTP head shares with the decoder; each must be true (the code has no separate copies).
_MTP_SHARED = ("mtp_share_embedding_weights", "mtp_share_lm_head", "mtp_share_norm")

# Every field and its default (the full jina-ocr-v1 model).
DEFAULTS: dict[str, Any] = {
    # SAM ViT-B
    **dict(sam_image_size=1024, sam_patch_size=16, sam_hidden_size=768, sam_num_layers=12, sam_num_heads=12),
    **dict(sam_mlp_dim=3072, sam_window_size=14, sam_global_attn_indexes=[2, 5, 8, 11], sam_out_channels=256),
    **dict(sam_downsample_channels=[512, 1024], sam_layer_norm_eps=1e-6),
    # CLIP-L
    **dict(clip_hidden_size=1024, clip_num_layers=24, clip_num_heads=16, clip_intermediate_size=4096),
    **dict(clip_image_size=224, clip_patch_size=14, clip_layer_norm_eps=1e-5),
    # decoder
    **dict(vocab_size=129280, hidden_size=1280, intermediate_size=6848, moe_intermediate_size=896),
    **dict(num_hidden_layers=12, num_attention_heads=10, num_key_value_heads=10, head_dim=None),
    **dict(n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1),
    **dict(routed_scaling_factor=1.0, norm_topk_prob=False, topk_method="greedy", scoring_func="softmax"),
    **dict(use_mla=False, hidden_act="silu", rms_norm_eps=1e-6, rope_theta=1_000_000.0),
    **dict(max_position_embeddings=32768, attention_bias=False, initializer_range=0.02),
    **dict(image_token_id=128815, use_cache=True),
    # FastMTP
    **dict(num_nextn_predict_layers=1, mtp_num_speculative_steps=3, mtp_recursive=True),
    **dict(mtp_share_embedding_weights=True, mtp_share_lm_head=True, mtp_share_norm=True, mtp_moe=False),
    **dict(mtp_first_hidden="post_norm", mtp_feedback_hidden="post_norm"),
    # special tokens (passed on to PretrainedConfig)
    **dict(bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=False),
}
_BASE_CLASS_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings")


def pixels_per_visual_token(sam_patch_size: int, sam_downsample_channels: list[int]) -> int:
    """The side, in view pixels, of the square one visual token stands for: SAM's ``sam_patch_size`` times 2
    per stride-2 compressor convolution (one per ``sam_downsample_channels`` entry), 16 x 2 x 2 = 64."""
    return sam_patch_size * 2 ** len(sam_downsample_channels)


def _from_vision_block(vision: dict) -> dict[str, Any]:
    """DeepSeek-OCR's ``vision_config.width.{sam_vit_b, clip-l-14-224}`` in our field names."""
    widths = vision.get("width", {})
    sam, clip = widths.get("sam_vit_b", {}), widths.get("clip-l-14-224", {})
    names = {
        "sam_hidden_size": sam.get("width"),
        "sam_num_layers": sam.get("layers"),
        "sam_num_heads": sam.get("heads"),
        "sam_global_attn_indexes": sam.get("global_attn_indexes"),
        "sam_downsample_channels": sam.get("downsample_channels"),
        "sam_mlp_dim": 4 * sam["width"] if "width" in sam else None,
        "sam_image_size": vision.get("image_size"),
        "clip_hidden_size": clip.get("width"),
        "clip_num_layers": clip.get("layers"),
        "clip_num_heads": clip.get("heads"),
        "clip_image_size": clip.get("image_size"),
        "clip_patch_size": clip.get("patch_size"),
        "clip_intermediate_size": 4 * clip["width"] if "width" in clip else None,
    }
    return {key: value for key, value in names.items() if value is not None}


class JinaOCRConfig(PretrainedConfig):
    r"""Hyper-parameters of :class:`JinaOCRForConditionalGeneration`.

    SAM: ``sam_image_size / sam_patch_size`` is the learned position grid (64; other sizes interpolate
    it), ``sam_global_attn_indexes`` the blocks attending globally (the others use ``sam_window_size``
    windows), ``sam_downsample_channels`` the two stride-2 compressor convolutions, whose last width feeds
    CLIP (``clip_hidden_size``). CLIP's patch embedding is stored but unused (SAM's features replace it).
    Decoder (DeepSeek-V2 names): plain multi-head attention; layers from ``first_k_dense_replace`` on route
    each token to ``num_experts_per_tok`` of ``n_routed_experts`` plus ``n_shared_experts`` fused ones.
    FastMTP: ``num_nextn_predict_layers`` heads (0 in DeepSeek-OCR, 1 in jina-ocr-v1), applied recursively
    ``mtp_num_speculative_steps`` times. Public ports disagree on the main-model state draft step 1 reads
    (``mtp_first_hidden``) and the head state fed back for steps 2..K (``mtp_feedback_hidden``):
    ``"post_norm"`` (after the final RMSNorm, as vLLM and the released checkpoint's plugin do) or
    ``"pre_norm"`` (vLLM's DeepSeek MTP drafter feeds back the state before it).
    """

    model_type = "jina_ocr"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]

    def __init__(self, **kwargs: Any):
        original = "language_config" in kwargs or kwargs.get("model_type") == "deepseek_vl_v2"
        vision = kwargs.pop("vision_config", None) or {}
        projector = kwargs.pop("projector_config", None) or {}
        language = kwargs.pop("language_config", None) or {}
        if "image_token_index" in kwargs:  # jina-ocr-v1's released spelling
            kwargs.setdefault("image_token_id", kwargs.pop("image_token_index"))
        legacy = {key: kwargs.pop(key) for key in _DEEPSEEK_ONLY_KEYS if key in kwargs}
        for key in _DEEPSEEK_ONLY_KEYS:
            language.pop(key, None)
        if kwargs.get("model_type") not in (None, self.model_type):
            kwargs.pop("model_type")

        # Precedence: defaults < the original nested blocks < explicit (top-level) values.
        values = dict(DEFAULTS)
        if original:
            # The original layout names the reference code and leaves out DeepseekV2Config's defaults.
            kwargs.pop("auto_map", None)
            kwargs.pop("architectures", None)
            values.update(rope_theta=10000.0, num_nextn_predict_layers=0)
        values.update(_from_vision_block(vision))
        if "n_embed" in projector:
            values["hidden_size"] = projector["n_embed"]
        if projector.get("projector_type", "linear") != "linear":
            raise ValueError(f"only DeepSeek-OCR's linear projector is supported, got {projector}")
        values.update({key: value for key, value in language.items() if key in DEFAULTS})
        values.update({key: kwargs.pop(key) for key in list(kwargs) if key in DEFAULTS})
        for key in ("sam_global_attn_indexes", "sam_downsample_channels"):
            values[key] = list(values[key])
        special = {key: values.pop(key) for key in _BASE_CLASS_KEYS}
        for key, value in values.items():
            setattr(self, key, value)
        self._check(legacy)
        super().__init__(**special, **kwargs)

    def _check(self, legacy: dict) -> None:
        if self.use_mla or legacy.get("kv_lora_rank"):
            raise ValueError(
                "multi-head latent attention (use_mla) is not part of DeepSeek-OCR; this config has it"
            )
        if self.topk_method != "greedy" or self.scoring_func != "softmax":
            raise ValueError(
                f"the router supports topk_method='greedy' with scoring_func='softmax', got "
                f"{self.topk_method!r} / {self.scoring_func!r}"
            )
        if legacy.get("n_group", 1) != 1 or legacy.get("topk_group", 1) != 1:
            raise ValueError("group-limited routing (n_group / topk_group > 1) is not supported")
        if len(self.sam_downsample_channels) != 2:
            raise ValueError(
                f"sam_downsample_channels must name the widths of DeepSeek-OCR's two stride-2 compressor "
                f"convolutions, got {self.sam_downsample_channels}"
            )
        if self.sam_downsample_channels[-1] != self.clip_hidden_size:
            raise ValueError(
                f"SAM's last compressor width ({self.sam_downsample_channels[-1]}) must equal "
                f"clip_hidden_size ({self.clip_hidden_size}): SAM's features replace CLIP's patch embeddings"
            )
        if self.hidden_size % self.num_attention_heads and self.head_dim is None:
            raise ValueError("hidden_size must be divisible by num_attention_heads when head_dim is not set")
        for name in ("mtp_first_hidden", "mtp_feedback_hidden"):
            if getattr(self, name) not in MTP_HIDDEN_CHOICES:
                raise ValueError(f"{name} must be one of {MTP_HIDDEN_CHOICES}, got {getattr(self, name)!r}")
        if self.num_nextn_predict_layers not in (0, 1):
            raise ValueError("FastMTP uses one recursive head: num_nextn_predict_layers must be 0 or 1")
        if self.mtp_moe:
            raise ValueError("an MoE FastMTP block (mtp_moe) is not supported; jina-ocr-v1's head is dense")
        if self.mtp_recursive is not True:
            raise ValueError(
                f"mtp_recursive={self.mtp_recursive!r} is not supported: the FastMTP head is one block applied "
                "recursively for every draft step (SPEC section 6), as jina-ocr-v1's head was trained"
            )
        for name in _MTP_SHARED:
            if getattr(self, name) is not True:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not supported: the FastMTP head uses the decoder's "
                    "own embedding, final norm and LM head (SPEC section 6); the copies some checkpoints store "
                    "under the head are ignored on load"
                )
        if self.hidden_act != "silu":
            raise ValueError(
                f"hidden_act={self.hidden_act!r} is not supported: every MLP of DeepSeek-OCR and jina-ocr-v1 is "
                "SwiGLU, down(silu(gate x) * up x), and the model code implements only 'silu'"
            )

    @property
    def pixels_per_visual_token(self) -> int:
        """See :func:`pixels_per_visual_token` (64); views must be a multiple of it."""
        return pixels_per_visual_token(self.sam_patch_size, self.sam_downsample_channels)

    @property
    def projector_input_dim(self) -> int:
        """CLIP features and SAM features are concatenated channel-wise before the projector."""
        return self.clip_hidden_size + self.sam_downsample_channels[-1]

    @property
    def decoder_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads
