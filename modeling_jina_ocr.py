"""jina-ocr-v1: DeepSeek-OCR's DeepEncoder and DeepSeek-V2 MoE decoder, plus the FastMTP draft head.

One page (SPEC: vision, fusion, visual sequence, decoder):

    global view (S x S) and 640-px tiles
      -> SAM ViT-B (windowed + global attention with decomposed relative positions), its neck and two
         stride-2 convolutions (16x fewer tokens: 64 x 64 patches -> 16 x 16)
      -> CLIP-L, whose patch embeddings are replaced by SAM's features
      -> [CLIP without class token | SAM] (2048 channels) -> linear projector (decoder width)
      -> visual sequence in place of the prompt's ``<image>`` placeholders: the tiles as one grid, then
         the global view, each with a newline vector per row, then one separator
      -> decoder: pre-norm, rotary MHA, layer 0 dense SwiGLU, the others MoE (top-k of softmax router
         probabilities, not renormalised, plus shared experts)

Names mirror the checkpoint keys, except the routed experts, held fused (:mod:`experts_jina_ocr`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.integrations.moe import use_experts_implementation
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .compat_jina_ocr import (
    check_transformers_version,
    output_cache,
    resolve_cache,
    static_cache_length,
    with_cache,
)
from .configuration_jina_ocr import JinaOCRConfig
from .experts_jina_ocr import fuse_on_load, register_conversion
from .generation.dispatch import generate as fastmtp_generate
from .generation.fastmtp import positions_from_mask
from .generation.hooks import install as install_generation_hooks

check_transformers_version()
logger = logging.get_logger(__name__)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32: norms, routing and logits are computed in float32, float64 stays float64."""
    return torch.promote_types(dtype, torch.float32)


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of each pixel of a (B, C, H, W) map."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class SAMPatchEmbed(nn.Module):
    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        p = config.sam_patch_size
        self.proj = nn.Conv2d(3, config.sam_hidden_size, kernel_size=p, stride=p)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.proj(pixel_values).permute(0, 2, 3, 1)  # (B, H, W, C)


def relative_position_table(q_size: int, k_size: int, rel_pos: torch.Tensor) -> torch.Tensor:
    """Rows of a relative-position table for every (query, key) pair along one axis; a table learned
    for another size (2 * size - 1 rows) is interpolated linearly, as SAM does."""
    max_rel_dist = 2 * max(q_size, k_size) - 1
    if rel_pos.shape[0] != max_rel_dist:
        dtype = rel_pos.dtype
        table = rel_pos.to(_compute_dtype(dtype)).T.unsqueeze(0)  # (1, C, L)
        rel_pos = F.interpolate(table, size=max_rel_dist, mode="linear").squeeze(0).T.to(dtype)
    q_coords = torch.arange(q_size, device=rel_pos.device)[:, None] * max(k_size / q_size, 1.0)
    k_coords = torch.arange(k_size, device=rel_pos.device)[None, :] * max(q_size / k_size, 1.0)
    relative = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)
    return rel_pos[relative.long()]


class SAMAttention(nn.Module):
    """Multi-head attention over a (B, H, W, C) map with SAM's decomposed relative-position bias (rows
    from ``rel_pos_h`` plus columns from ``rel_pos_w``), passed to sdpa as an additive mask."""

    def __init__(self, config: JinaOCRConfig, input_size: int):
        super().__init__()
        dim = config.sam_hidden_size
        self.num_heads = config.sam_num_heads
        self.head_dim = dim // self.num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * input_size - 1, self.head_dim))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * input_size - 1, self.head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, height, width, dim = x.shape
        hw = height * width
        qkv = self.qkv(x).reshape(batch, hw, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, HW, d)
        r_q = q.reshape(batch * self.num_heads, height, width, self.head_dim)
        rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, relative_position_table(height, height, self.rel_pos_h))
        rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, relative_position_table(width, width, self.rel_pos_w))
        bias = (rel_h.unsqueeze(-1) + rel_w.unsqueeze(-2)).reshape(batch, self.num_heads, hw, hw)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        out = out.transpose(1, 2).reshape(batch, height, width, dim)
        return self.proj(out)


class SAMMLP(nn.Module):
    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.lin1 = nn.Linear(config.sam_hidden_size, config.sam_mlp_dim)
        self.lin2 = nn.Linear(config.sam_mlp_dim, config.sam_hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(F.gelu(self.lin1(x)))


class SAMBlock(GradientCheckpointingLayer):
    """Pre-norm ViT block; windowed blocks attend inside zero-padded windows (padding not masked)."""

    def __init__(self, config: JinaOCRConfig, window_size: int):
        super().__init__()
        global_size = config.sam_image_size // config.sam_patch_size
        self.window_size = window_size
        self.norm1 = nn.LayerNorm(config.sam_hidden_size, eps=config.sam_layer_norm_eps)
        self.attn = SAMAttention(config, input_size=window_size or global_size)
        self.norm2 = nn.LayerNorm(config.sam_hidden_size, eps=config.sam_layer_norm_eps)
        self.mlp = SAMMLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.norm1(x)
        if self.window_size:
            batch, height, width, dim = x.shape
            ws = self.window_size
            pad_h, pad_w = (-height) % ws, (-width) % ws
            x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
            hp, wp = height + pad_h, width + pad_w
            x = x.view(batch, hp // ws, ws, wp // ws, ws, dim).transpose(2, 3).reshape(-1, ws, ws, dim)
            x = self.attn(x).view(batch, hp // ws, wp // ws, ws, ws, dim).transpose(2, 3)
            x = x.reshape(batch, hp, wp, dim)[:, :height, :width]
        else:
            x = self.attn(x)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class SAMEncoder(nn.Module):
    """SAM ViT-B image encoder with its neck and the 16x compressor (``net_2``, ``net_3``)."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        grid = config.sam_image_size // config.sam_patch_size
        self.patch_embed = SAMPatchEmbed(config)
        self.pos_embed = nn.Parameter(torch.zeros(1, grid, grid, config.sam_hidden_size))
        global_blocks = set(config.sam_global_attn_indexes)
        self.blocks = nn.ModuleList(
            SAMBlock(config, window_size=0 if i in global_blocks else config.sam_window_size)
            for i in range(config.sam_num_layers)
        )
        out = config.sam_out_channels
        self.neck = nn.Sequential(
            nn.Conv2d(config.sam_hidden_size, out, kernel_size=1, bias=False),
            LayerNorm2d(out, eps=config.sam_layer_norm_eps),
            nn.Conv2d(out, out, kernel_size=3, padding=1, bias=False),
            LayerNorm2d(out, eps=config.sam_layer_norm_eps),
        )
        mid, last = config.sam_downsample_channels
        self.net_2 = nn.Conv2d(out, mid, kernel_size=3, stride=2, padding=1, bias=False)
        self.net_3 = nn.Conv2d(mid, last, kernel_size=3, stride=2, padding=1, bias=False)

    def position_embedding(self, height: int, width: int) -> torch.Tensor:
        """The learned grid, resized bicubic with antialias in float32 (as the reference does, whatever
        the model's dtype) when the input grid differs."""
        pos = self.pos_embed
        if pos.shape[1:3] == (height, width):
            return pos
        grid = pos.permute(0, 3, 1, 2).float()
        grid = F.interpolate(grid, size=(height, width), mode="bicubic", antialias=True, align_corners=False)
        return grid.permute(0, 2, 3, 1).to(pos.dtype)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixel_values)
        x = x + self.position_embedding(x.shape[1], x.shape[2])
        for block in self.blocks:
            x = block(x)
        x = self.neck(x.permute(0, 3, 1, 2))
        return self.net_3(self.net_2(x))  # (B, C, S/p, S/p), p = config.pixels_per_visual_token


class CLIPEmbeddings(nn.Module):
    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        dim, p = config.clip_hidden_size, config.clip_patch_size
        self.grid = config.clip_image_size // p
        self.class_embedding = nn.Parameter(torch.zeros(dim))
        # Stored in the checkpoint but unused: SAM's features take the place of these patches.
        self.patch_embedding = nn.Conv2d(3, dim, kernel_size=p, stride=p, bias=False)
        self.position_embedding = nn.Embedding(self.grid * self.grid + 1, dim)

    def forward(self, patch_embeds: torch.Tensor) -> torch.Tensor:
        """``patch_embeds``: SAM's output (B, C, h, w)."""
        batch, _, height, width = patch_embeds.shape
        tokens = patch_embeds.flatten(2).transpose(1, 2)
        cls = self.class_embedding.to(tokens.dtype).expand(batch, 1, -1)
        return torch.cat([cls, tokens], dim=1) + self.positions(height, width)

    def positions(self, height: int, width: int) -> torch.Tensor:
        table = self.position_embedding.weight
        if (height, width) == (self.grid, self.grid):
            return table
        dtype = table.dtype
        grid = table[1:].T.reshape(1, -1, self.grid, self.grid).float()
        grid = F.interpolate(grid, size=(height, width), mode="bicubic", antialias=True, align_corners=False)
        return torch.cat([table[:1], grid.flatten(2)[0].T.to(dtype)], dim=0)


class CLIPAttention(nn.Module):
    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        dim = config.clip_hidden_size
        self.num_heads = config.clip_num_heads
        self.qkv_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv_proj(x).view(batch, length, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, dim))


class CLIPMLP(nn.Module):
    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.clip_hidden_size, config.clip_intermediate_size)
        self.fc2 = nn.Linear(config.clip_intermediate_size, config.clip_hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc1(x)
        return self.fc2(x * torch.sigmoid(1.702 * x))  # quick-GELU


class CLIPLayer(GradientCheckpointingLayer):
    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(config.clip_hidden_size, eps=config.clip_layer_norm_eps)
        self.self_attn = CLIPAttention(config)
        self.layer_norm2 = nn.LayerNorm(config.clip_hidden_size, eps=config.clip_layer_norm_eps)
        self.mlp = CLIPMLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class CLIPVisionEncoder(nn.Module):
    """CLIP-L over SAM's features; no final layer norm (DeepSeek-OCR uses the last layer's output)."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.embeddings = CLIPEmbeddings(config)
        self.pre_layrnorm = nn.LayerNorm(config.clip_hidden_size, eps=config.clip_layer_norm_eps)
        layers = nn.ModuleList(CLIPLayer(config) for _ in range(config.clip_num_layers))
        self.transformer = nn.ModuleDict({"layers": layers})

    def forward(self, sam_features: torch.Tensor) -> torch.Tensor:
        x = self.pre_layrnorm(self.embeddings(sam_features))
        for layer in self.transformer.layers:
            x = layer(x)
        return x


class Projector(nn.Module):
    """One linear layer from [CLIP | SAM] channels to the decoder width (``projector.layers``)."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.layers = nn.Linear(config.projector_input_dim, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class JinaOCRRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(_compute_dtype(dtype))
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotary_embedding(position_ids: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos and sin of shape (B, 1, L, head_dim) for the rotate-half convention over the full head."""
    compute = _compute_dtype(dtype)
    exponent = torch.arange(0, head_dim, 2, device=position_ids.device, dtype=compute) / head_dim
    inv_freq = 1.0 / (theta**exponent)
    freqs = position_ids[..., None].to(compute) * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Plain softmax attention; the registry's sdpa/flash functions are used when configured."""
    groups = module.num_key_value_groups
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = weights.softmax(dim=-1, dtype=_compute_dtype(query.dtype)).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def attention_function(implementation: str | None) -> Callable:
    if implementation in (None, "eager"):
        return eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[implementation]


class JinaOCRAttention(nn.Module):
    """Plain multi-head attention (DeepSeek-OCR does not use MLA) with rotary positions. ``step_exact``
    (FastMTP's verification) computes each new position as a one-token step would, so verified tokens are
    greedy decoding's bit for bit: CPU kernels round a query beside others differently than alone, and
    one ulp can flip a near-tie of the logits."""

    def __init__(self, config: JinaOCRConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.decoder_head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = True
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)

    def forward(self, x, position_embeddings, attention_mask, cache=None, step_exact=False, **kwargs):
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        attend = attention_function(self.config._attn_implementation)
        options = {"scaling": self.scaling, "dropout": 0.0, **kwargs}
        if not step_exact:
            out = attend(self, q, k, v, attention_mask, **options)[0]
        else:  # each new position attends as a one-token step would: its own query, the keys up to it
            steps = (
                attend(self, *_one_step(q, k, v, attention_mask, j), **options)[0] for j in range(length)
            )
            out = torch.cat(list(steps), dim=1)
        return self.o_proj(out.reshape(batch, length, -1))


def _one_step(q, k, v, mask, j: int) -> tuple:
    """Query ``j`` of the new positions with the keys, values and mask a one-token step at it would see
    (a dynamic cache's keys end with the new positions; a 2D mask is flash attention's padding mask)."""
    keys = k.shape[2] - q.shape[2] + j + 1
    if mask is not None:
        mask = mask[:, :keys] if mask.ndim == 2 else mask[:, :, j : j + 1, :keys]
    return q[:, :, j : j + 1], k[:, :, :keys], v[:, :, :keys], mask


class JinaOCRMLP(nn.Module):
    """SwiGLU: ``down(silu(gate x) * up x)``."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class JinaOCRRouter(nn.Module):
    """Softmax over all routed experts in float32, greedy top-k; weights are the probabilities as
    they are (``norm_topk_prob`` false in DeepSeek-OCR), times ``routed_scaling_factor``."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.scaling = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.zeros(config.n_routed_experts, config.hidden_size))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        compute = _compute_dtype(x.dtype)
        probs = F.linear(x.to(compute), self.weight.to(compute)).softmax(dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * self.scaling, experts


@use_experts_implementation
class JinaOCRExperts(nn.Module):
    """The routed SwiGLU experts of one MoE layer, fused: ``gate_up_proj`` (E, 2I, H), ``down_proj``
    (E, H, I). ``config.experts_implementation`` picks the forward: grouped_mm (the default: no host
    read), batched_mm or eager (``grouped_dispatch``). Per-expert checkpoints are fused on load."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        experts, size = config.n_routed_experts, config.moe_intermediate_size
        self.num_experts, self.intermediate_size = experts, size
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * size, config.hidden_size))
        self.down_proj = nn.Parameter(torch.empty(experts, config.hidden_size, size))
        # The draws ``nn.Linear`` made in the per-expert layout, in its order, so that a seeded model
        # (``_init_weights`` draws after them) is the same in either layout.
        for block in self._per_expert_blocks():
            nn.init.kaiming_uniform_(block, a=math.sqrt(5))
        self.act_fn = F.silu
        self.register_load_state_dict_pre_hook(fuse_on_load)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        return grouped_dispatch(self, hidden_states, top_k_index, top_k_weights)

    def _per_expert_blocks(self) -> list[torch.Tensor]:
        """Views of each expert's gate, up and down weights, in the per-expert modules' order."""
        gate_up, down, size = self.gate_up_proj.data, self.down_proj.data, self.intermediate_size
        return [b for e in range(self.num_experts) for b in (gate_up[e, :size], gate_up[e, size:], down[e])]

    def expert(self, index: int, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.gate_up_proj[index]).chunk(2, dim=-1)
        return F.linear(self.act_fn(gate) * up, self.down_proj[index])


@torch.compiler.disable
def grouped_dispatch(
    experts_module: JinaOCRExperts, x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """The eager forward: token slots sorted by expert, each expert run once on its group, with one host
    read per layer (the per-expert counts). Also serves dtypes grouped_mm lacks (float64). Kept out of
    ``torch.compile``: tracing this data-dependent loop recompiles the layers until the compiler gives up."""
    tokens, top_k = experts.shape
    if tokens == 1:  # a decode step of one sequence: its k experts in slot order, nothing to sort
        outputs = torch.cat([experts_module.expert(expert, x) for expert in experts[0].tolist()])
        return _combine(outputs, weights)
    flat = experts.reshape(-1)
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=experts_module.num_experts).tolist()
    grouped = x[order // top_k]
    outputs = torch.empty_like(grouped)
    start = 0
    for expert, count in enumerate(counts):
        if count:
            outputs[start : start + count] = experts_module.expert(expert, grouped[start : start + count])
            start += count
    per_slot = torch.empty_like(outputs)
    per_slot[order] = outputs
    return _combine(per_slot, weights)


def _combine(per_slot: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(tokens * k, hidden) expert outputs in slot order -> their weighted sum per token."""
    tokens, top_k = weights.shape
    weighted = per_slot.view(tokens, top_k, -1).to(weights.dtype) * weights.unsqueeze(-1)
    return weighted.sum(dim=1).to(per_slot.dtype)


GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class JinaOCRMoE(nn.Module):
    """Routed experts plus the shared experts (one MLP of ``n_shared_experts`` times the width)."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.gate = JinaOCRRouter(config)
        self.experts = JinaOCRExperts(config)
        self.shared_experts = JinaOCRMLP(
            config.hidden_size, config.moe_intermediate_size * config.n_shared_experts
        )

    def forward(self, x: torch.Tensor, step_exact: bool = False) -> torch.Tensor:
        """``step_exact`` routes each position of (B, q, H) ``x`` as a one-token step would (the float32
        router's matmul rounds a row differently beside others than alone; see ``JinaOCRAttention``)."""
        shape = x.shape
        if step_exact:
            routes = zip(*(self.gate(x[:, j].contiguous()) for j in range(shape[1])), strict=True)
            weights, experts = (torch.stack(parts, dim=1).flatten(0, 1) for parts in routes)
        else:
            weights, experts = self.gate(x.reshape(-1, shape[-1]))
        x = x.reshape(-1, shape[-1])
        kernel = self.experts.config._experts_implementation
        if kernel == "grouped_mm" and self.experts.gate_up_proj.dtype not in GROUPED_MM_DTYPES:
            routed = grouped_dispatch(self.experts, x, experts, weights)
        else:
            routed = self.experts(x, experts, weights)
        return (routed + self.shared_experts(x)).view(shape)


class JinaOCRDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: JinaOCRConfig, layer_idx: int, moe: bool):
        super().__init__()
        self.input_layernorm = JinaOCRRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = JinaOCRAttention(config, layer_idx)
        self.post_attention_layernorm = JinaOCRRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = JinaOCRMoE(config) if moe else JinaOCRMLP(config.hidden_size, config.intermediate_size)

    def forward(self, x, position_embeddings, attention_mask=None, cache=None, step_exact=False, **kwargs):
        """``kwargs`` reach the attention function (as in Transformers' models), e.g. flash attention's
        sequence-packing inputs; ``step_exact``: see ``JinaOCRAttention``."""
        x = x + self.self_attn(
            self.input_layernorm(x), position_embeddings, attention_mask, cache, step_exact, **kwargs
        )
        x_norm = self.post_attention_layernorm(x)
        return x + (self.mlp(x_norm, step_exact) if isinstance(self.mlp, JinaOCRMoE) else self.mlp(x_norm))


def decoder_attention_mask(
    attention_mask: torch.Tensor | None,
    query_length: int,
    past_length: int | torch.Tensor,
    dtype: torch.dtype,
    device: torch.device,
    implementation: str | None,
    cache_length: int | None = None,
) -> torch.Tensor | None:
    """The mask the attention function expects: causal plus key padding; eager and sdpa take an additive
    (B, 1, q, kv) mask, flash attention the 2D padding mask (it applies causality itself). None only when
    nothing can need masking (one query, no 2D mask): whether a 2D mask holds padding is never read back
    from the device, which would stall every GPU decode step. A static cache returns keys for all
    ``cache_length`` slots, which the causal rule masks (``past_length`` may then be a device tensor);
    a 4D mask (what ``generate`` builds for static caches) is used as given."""
    if attention_mask is not None and attention_mask.ndim == 4:
        if attention_mask.dtype != torch.bool:
            return attention_mask.to(dtype)
        return torch.zeros(attention_mask.shape, dtype=dtype, device=device).masked_fill(
            ~attention_mask, torch.finfo(dtype).min
        )
    if implementation is not None and "flash" in implementation:
        return attention_mask
    if attention_mask is None and query_length == 1 and cache_length is None:
        return None
    kv_length = past_length + query_length if cache_length is None else cache_length
    key_pos = torch.arange(kv_length, device=device)
    query_pos = past_length + torch.arange(query_length, device=device)
    allowed = (key_pos[None, :] <= query_pos[:, None])[None, None]
    if attention_mask is not None:
        if cache_length is not None:  # the 2D mask covers the written slots only
            attention_mask = F.pad(attention_mask, (0, max(0, kv_length - attention_mask.shape[1])))
        allowed = allowed & attention_mask[:, None, None, -kv_length:].bool()
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


class JinaOCRMTPHead(nn.Module):
    """One FastMTP draft step: ``x = block(eh_proj([enorm(e(x_{j+1})) ; hnorm(h_j)]))`` predicts x_{j+2};
    the block is one dense decoder layer with a KV cache of its own. Embedding, final norm and LM head
    are the main model's (the caller embeds x_{j+1} and applies them). ``position_ids`` are those of h_j
    and the entry at position 0 has its embedding zeroed, as in vLLM (heads stay portable)."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__()
        self.enorm = JinaOCRRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hnorm = JinaOCRRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.mtp_block = JinaOCRDecoderLayer(config, layer_idx=0, moe=False)
        self.config = config

    def forward(
        self,
        embeddings: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Returns the block's output before the shared final norm, shape (B, q, hidden)."""
        embeddings = embeddings.masked_fill((position_ids == 0)[..., None], 0.0)
        x = self.eh_proj(torch.cat([self.enorm(embeddings), self.hnorm(hidden)], dim=-1))
        past = cache.get_seq_length() if cache is not None else 0
        mask = decoder_attention_mask(
            attention_mask, x.shape[1], past, x.dtype, x.device, self.config._attn_implementation
        )
        rope = rotary_embedding(position_ids, self.config.decoder_head_dim, self.config.rope_theta, x.dtype)
        return self.mtp_block(x, rope, mask, cache)


@dataclass
class JinaOCRModelOutput(BaseModelOutputWithPast):
    """Adds the decoder state before the final norm, which FastMTP may read (``mtp_first_hidden``)."""

    pre_norm_hidden_state: torch.Tensor | None = None


@dataclass
class JinaOCRCausalLMOutput(CausalLMOutputWithPast):
    """Adds the last decoder states after and before the final norm, for FastMTP drafting."""

    last_hidden_state: torch.Tensor | None = None
    pre_norm_hidden_state: torch.Tensor | None = None


class JinaOCRPreTrainedModel(PreTrainedModel):
    config_class = JinaOCRConfig
    config: JinaOCRConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["JinaOCRDecoderLayer", "SAMBlock", "CLIPLayer", "JinaOCRMTPHead"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    # Some jina-ocr-v1 revisions store exact copies of the shared embedding, norm and LM head
    # inside the FastMTP module; the shared tensors are used, the copies are accepted and dropped.
    _keys_to_ignore_on_load_unexpected = [r"mtp_module\..*(mtp_embed_tokens|shared_head)"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Conv2d, nn.Embedding)):
            module.weight.normal_(0.0, std)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif isinstance(module, (nn.LayerNorm, LayerNorm2d)):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, JinaOCRRMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, JinaOCRExperts):
            for block in module._per_expert_blocks():  # the per-expert modules' draws, in their order
                block.normal_(0.0, std)
        elif isinstance(module, (JinaOCRRouter, SAMAttention, SAMEncoder, CLIPEmbeddings)):
            for param in module.parameters(recurse=False):  # their own tensors, not their submodules'
                param.normal_(0.0, std)
        elif isinstance(module, JinaOCRModel):
            module.image_newline.normal_(0.0, std)
            module.view_seperator.normal_(0.0, std)


class JinaOCRModel(JinaOCRPreTrainedModel):
    """Vision encoders, projector and decoder; returns decoder states (no LM head)."""

    def __init__(self, config: JinaOCRConfig):
        super().__init__(config)
        self.sam_model = SAMEncoder(config)
        self.vision_model = CLIPVisionEncoder(config)
        self.projector = Projector(config)
        self.image_newline = nn.Parameter(torch.zeros(config.hidden_size))
        self.view_seperator = nn.Parameter(torch.zeros(config.hidden_size))  # sic: the checkpoint's key
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            JinaOCRDecoderLayer(config, i, moe=i >= config.first_k_dense_replace)
            for i in range(config.num_hidden_layers)
        )
        self.norm = JinaOCRRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gradient_checkpointing = False
        self.post_init()

    def view_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(N, 3, S, S) views -> (N, (S/p)^2, CLIP + SAM channels): the projector's input."""
        sam = self.sam_model(pixel_values)
        clip = self.vision_model(sam)
        return torch.cat([clip[:, 1:], sam.flatten(2).transpose(1, 2)], dim=-1)

    def encode_views(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(N, 3, S, S) views -> (N, (S/p)^2, hidden): CLIP (no class token) and SAM, projected."""
        return self.projector(self.view_features(pixel_values))

    def get_image_features(
        self,
        pixel_values: torch.Tensor,
        pixel_values_local: torch.Tensor | None = None,
        image_grids: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """The visual sequence of every image: tiles grid, global view, separator. ``image_grids[k]`` is
        image k's tile grid (columns, rows), (0, 0) without tiles; ``pixel_values_local`` holds all tiles,
        image after image, each image's row-major."""
        token_pixels = self.config.pixels_per_visual_token
        pixel_values = _check_pixels(pixel_values, "pixel_values", self.dtype, token_pixels)
        num_images = pixel_values.shape[0]
        if image_grids is None:
            image_grids = torch.zeros(num_images, 2, dtype=torch.long)
        grids = [tuple(g) for g in image_grids.tolist()]
        if len(grids) != num_images:
            raise ValueError(f"image_grids has {len(grids)} rows for {num_images} images in pixel_values")
        tiles_needed = sum(i * j for i, j in grids)
        tiles_given = 0 if pixel_values_local is None else pixel_values_local.shape[0]
        if tiles_needed != tiles_given:
            raise ValueError(
                f"image_grids asks for {tiles_needed} tiles but pixel_values_local holds {tiles_given}"
            )
        global_features = self.encode_views(pixel_values)
        if tiles_needed:
            local = _check_pixels(pixel_values_local, "pixel_values_local", self.dtype, token_pixels)
            local_features = self.encode_views(local)
        sequences, first_tile = [], 0
        for k, (cols, rows) in enumerate(grids):
            parts = []
            if cols * rows:
                tiles = local_features[first_tile : first_tile + cols * rows]
                first_tile += cols * rows
                parts.append(self._grid_with_newlines(tiles, cols, rows))
            parts.append(self._grid_with_newlines(global_features[k : k + 1], 1, 1))
            parts.append(self.view_seperator[None].to(global_features.dtype))
            sequences.append(torch.cat(parts, dim=0))
        return sequences

    def _grid_with_newlines(self, views: torch.Tensor, cols: int, rows: int) -> torch.Tensor:
        """Arrange ``rows x cols`` square feature maps as one big grid, a newline vector after each row."""
        side = int(round(views.shape[1] ** 0.5))
        dim = views.shape[-1]
        grid = views.view(rows, cols, side, side, dim).transpose(1, 2).reshape(rows * side, cols * side, dim)
        newline = self.image_newline.to(grid.dtype).expand(rows * side, 1, dim)
        return torch.cat([grid, newline], dim=1).reshape(-1, dim)

    def merge_image_features(
        self, input_ids: torch.Tensor, inputs_embeds: torch.Tensor, features: list[torch.Tensor]
    ) -> torch.Tensor:
        placeholder = input_ids == self.config.image_token_id
        expected = sum(f.shape[0] for f in features)
        found = int(placeholder.sum())
        if found != expected:
            raise ValueError(
                f"the prompt holds {found} image placeholder tokens but the images give {expected} visual "
                "vectors; build inputs with the processor so that each <image> is expanded to its count"
            )
        visual = torch.cat(features, dim=0).to(inputs_embeds.dtype)
        return inputs_embeds.masked_scatter(placeholder[..., None], visual)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        pixel_values_local: torch.Tensor | None = None,
        image_grids: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> JinaOCRModelOutput:
        cache = resolve_cache(cache, past_key_values)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = DynamicCache()
        # Images are encoded on the first forward only (older releases pass them on every step); a
        # static cache counts its tokens on the device, so that is read only when there are pixels.
        past_length = cache.get_seq_length() if cache is not None else 0
        cache_length = static_cache_length(cache)
        if pixel_values is not None and int(past_length) == 0:
            if input_ids is None:
                raise ValueError("images need input_ids to find their <image> placeholders")
            features = self.get_image_features(pixel_values, pixel_values_local, image_grids)
            inputs_embeds = self.merge_image_features(input_ids, inputs_embeds, features)

        query_length, dtype, device = inputs_embeds.shape[1], inputs_embeds.dtype, inputs_embeds.device
        if position_ids is None:
            position_ids = positions_from_mask(attention_mask, query_length, past_length, device)
        implementation = self.config._attn_implementation
        mask = decoder_attention_mask(
            attention_mask, query_length, past_length, dtype, device, implementation, cache_length
        )
        rope = rotary_embedding(position_ids, self.config.decoder_head_dim, self.config.rope_theta, dtype)
        hidden = inputs_embeds
        for layer in self.layers:
            hidden = layer(hidden, rope, mask, cache, **kwargs)
        return with_cache(
            JinaOCRModelOutput,
            cache if use_cache else None,
            last_hidden_state=self.norm(hidden),
            pre_norm_hidden_state=hidden,
        )


def _check_pixels(pixels: torch.Tensor, name: str, dtype: torch.dtype, token_pixels: int) -> torch.Tensor:
    """Views must be float (B, 3, S, S) with S a multiple of ``token_pixels`` (the config's
    ``pixels_per_visual_token``, 64); other float dtypes are cast."""
    if not isinstance(pixels, torch.Tensor) or pixels.ndim != 4 or pixels.shape[1] != 3:
        shape = tuple(pixels.shape) if isinstance(pixels, torch.Tensor) else type(pixels).__name__
        raise ValueError(f"{name} must be a (N, 3, S, S) tensor of normalised views, got {shape}")
    if not pixels.is_floating_point():
        raise TypeError(
            f"{name} has dtype {pixels.dtype}; the model takes normalised floating-point pixels "
            "(use the processor, which scales uint8 images to [-1, 1])"
        )
    if pixels.shape[2] != pixels.shape[3] or pixels.shape[2] % token_pixels:
        raise ValueError(
            f"{name} views must be square with a side divisible by {token_pixels} (pixels per visual "
            f"token), got {tuple(pixels.shape[2:])}"
        )
    return pixels.to(dtype)


@install_generation_hooks
class JinaOCRForConditionalGeneration(JinaOCRPreTrainedModel, GenerationMixin):
    """The OCR model with its LM head and, when the config has one, the FastMTP head."""

    # Statistics of the last generate() call that used FastMTP (see generation/fastmtp.py); None otherwise.
    fastmtp_stats: dict | None = None

    def __init__(self, config: JinaOCRConfig):
        super().__init__(config)
        self.model = JinaOCRModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.num_nextn_predict_layers:  # ``mtp_module.heads.N``; jina-ocr-v1 has one, used recursively
            heads = nn.ModuleList(JinaOCRMTPHead(config) for _ in range(config.num_nextn_predict_layers))
            self.mtp_module = nn.ModuleDict({"heads": heads})
        else:
            logger.warning_once(
                "this checkpoint has no FastMTP head (num_nextn_predict_layers is 0, as in DeepSeek-OCR): "
                "generate() decodes with plain greedy"
            )
        self.post_init()

    def ocr_pipeline(self, processor=None, **kwargs):
        """This model as its OCR pipeline (``pipeline("image-to-text", trust_remote_code=True)``);
        ``processor`` defaults to the one saved beside the weights. Importing the pipeline module here
        makes ``save_pretrained``/``push_to_hub`` ship it with the code."""
        from .pipeline_jina_ocr import JinaOCRPipeline

        if processor is None:
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(self.name_or_path, trust_remote_code=True)
        return JinaOCRPipeline(model=self, processor=processor, **kwargs)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM-head logits in at least float32 (shared by the main model and the FastMTP head)."""
        return self.lm_head(hidden).to(_compute_dtype(hidden.dtype))

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        pixel_values_local: torch.Tensor | None = None,
        image_grids: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> JinaOCRCausalLMOutput:
        """``labels`` follow the causal-LM convention (shifted inside; -100 is ignored)."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=resolve_cache(cache, past_key_values),
            inputs_embeds=inputs_embeds,
            pixel_values=pixel_values,
            pixel_values_local=pixel_values_local,
            image_grids=image_grids,
            use_cache=use_cache,
            **kwargs,
        )
        hidden = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.logits(hidden[:, keep])
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten().to(logits.device))
        return with_cache(
            JinaOCRCausalLMOutput,
            output_cache(outputs),
            loss=loss,
            logits=logits,
            last_hidden_state=hidden,
            pre_norm_hidden_state=outputs.pre_norm_hidden_state,
        )

    def generate(self, *args, **kwargs):
        """``GenerationMixin.generate`` (positional: ``inputs``, ``generation_config``, ``logits_processor``,
        ``stopping_criteria``, ``streamer``) plus FastMTP and the loop guard (generation/dispatch.py). Extra
        options, defaulting to ``generation_config.json``: ``use_mtp``, ``mtp_num_speculative_steps`` (1..K
        drafts per step, at most), ``mtp_adaptive_drafting`` (pick each step's draft count for speed),
        ``loop_guard_ngram_size`` (n; 0: no guard), ``loop_guard_window`` (last generated tokens searched),
        ``loop_guard_exempt_token_ids`` (never banned: table cells repeat). ``self.fastmtp_stats`` then
        holds a FastMTP call's drafting and acceptance counts."""
        return fastmtp_generate(self, super().generate, *args, **kwargs)


register_conversion(("JinaOCRForConditionalGeneration", "JinaOCRModel"))
