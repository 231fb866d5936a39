"""Weight-only int8 and int4 storage, and the modules that compute with it: linear layers and fused experts.

The decode step of jina-ocr-v1 is bound by the bytes of weight it reads, so storing weights in 8 or 4 bits
is what can make it faster, provided the matrix-vector products read the small integers directly
instead of widening a copy of the weight first. On the CPU, PyTorch ships such kernels:
``torch._weight_int8pack_mm`` (int8 values, one scale per output row) and
``torch._weight_int4pack_mm_for_cpu`` (4-bit values packed two to a byte, a scale and a zero point per
group of 64 inputs of a row). Both read each weight once per call, so they win at decode (one to a few
rows of activations) and lose to a bfloat16 matmul on a long prefill, where the weight is read once
for many rows anyway. Both are fast with bfloat16 (or float16) activations and an order of magnitude
slower with float32 ones, hence quantised models compute in bfloat16 unless told otherwise. On other
devices the weight is widened per call (``dequantize``): it saves the memory, not the time.

The formats:

- int8: ``values`` int8 (N, K), symmetric; ``scales`` (N,): ``w = values * scales``.
- int4: ``values`` uint8 (N', K / 2) in the CPU kernel's layout (:func:`pack_int4`), N' = N rounded up
  to a multiple of 64 (the padding rows are zero and their outputs dropped); ``scales`` (K / 64, N', 2)
  holds each group's scale and zero point: ``w = (q - 8) * scale + zero`` for q in 0..15. The kernel's
  layout depends on the CPU it runs on (:func:`int4_rows`: blocks of 64 rows with AVX-512, of 32 with
  AVX2), so saved values say which layout they are in and are repacked when a machine with the other
  loads them (:func:`repack_int4`).

Fused experts hold the same formats with a leading expert dimension, one scale per expert and row.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from jina_ocr.remote_code.modeling_jina_ocr import grouped_dispatch

SCHEMES = ("int8", "int4")
INT4_GROUP = 64
"""Inputs per int4 scale and zero point: divides every input width of jina-ocr-v1 (1280, 896, 6848, 2560)."""
INT4_PADDING = 64
"""int4 rows are padded to a multiple of 64, which every layout of the CPU kernel divides."""


def storage_shapes(out_features: int, in_features: int, scheme: str) -> tuple[tuple, torch.dtype, tuple]:
    """(values shape, values dtype, scales shape) of an (out_features, in_features) weight."""
    if scheme == "int8":
        return (out_features, in_features), torch.int8, (out_features,)
    if in_features % INT4_GROUP:
        raise ValueError(f"int4 needs input widths that are multiples of {INT4_GROUP}, not {in_features}")
    rows = -(-out_features // INT4_PADDING) * INT4_PADDING
    return (rows, in_features // 2), torch.uint8, (in_features // INT4_GROUP, rows, 2)


def quantize_weight(
    weight: torch.Tensor, scheme: str, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, scales) of a 2-D weight, scales in ``dtype``. The scales are rounded to ``dtype`` before
    the values are chosen, so that the stored pair reproduces the weight as closely as it can."""
    w = weight.detach().float()
    if scheme == "int8":
        scales = (w.abs().amax(dim=1) / 127).clamp(min=torch.finfo(dtype).tiny).to(dtype)
        values = (w / scales.float()[:, None]).round().clamp(-127, 127).to(torch.int8)
        return values, scales
    (rows, _), _, _ = storage_shapes(*w.shape, scheme)
    groups = F.pad(w, (0, 0, 0, rows - w.shape[0])).view(rows, -1, INT4_GROUP)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scale = ((high - low) / 15).clamp(min=torch.finfo(dtype).tiny).to(dtype).float()
    zero = (low + 8 * scale).to(dtype).float()
    q = ((groups - zero[..., None]) / scale[..., None] + 8).round().clamp(0, 15).to(torch.uint8)
    scales = torch.stack([scale.t(), zero.t()], dim=-1).to(dtype).contiguous()
    return pack_int4(q.view(rows, -1)), scales


@functools.cache
def int4_rows() -> int:
    """The rows per block of this machine's int4 CPU kernel: PyTorch picks the layout from the
    instructions the CPU has (64 with AVX-512, 32 with AVX2), so it is read off the kernel's own
    packing of a probe once per process."""
    probe = torch.randint(0, 16, (128, 16), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    packed = torch._convert_weight_to_int4pack_for_cpu(probe, 1)
    for rows in (64, 32, 16, 128):
        if torch.equal(pack_int4(probe.to(torch.uint8), rows), packed):
            return rows
    raise RuntimeError("this PyTorch packs int4 weights in a layout jina-ocr does not know")


def pack_int4(q: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """(N, K) values 0..15, N a multiple of ``rows`` -> the (N, K / 2) bytes ``_weight_int4pack_mm_for_cpu``
    reads: per block of ``rows`` rows (default: :func:`int4_rows`), K runs of ``rows / 2`` bytes, byte j
    of run k holding row j (low nibble) and row j + rows / 2 (high nibble) of input k. (What
    ``torch._convert_weight_to_int4pack_for_cpu`` writes, done with plain tensor operations so that it
    also runs on the meta device; a test compares the two.)"""
    rows = rows or int4_rows()
    count, inputs = q.shape
    blocks = q.view(count // rows, rows, inputs).transpose(1, 2)
    half = rows // 2
    return (blocks[..., :half] | (blocks[..., half:] << 4)).reshape(count, inputs // 2).contiguous()


def unpack_int4(values: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """The inverse of :func:`pack_int4`: (N, K / 2) bytes -> (N, K) values 0..15 as uint8."""
    rows = rows or int4_rows()
    count, half_inputs = values.shape
    blocks = values.view(count // rows, 2 * half_inputs, rows // 2)
    return torch.cat([blocks & 15, blocks >> 4], dim=-1).transpose(1, 2).reshape(count, 2 * half_inputs)


def repack_int4(values: torch.Tensor, rows: int) -> torch.Tensor:
    """int4 ``values`` (any leading dimensions) packed in blocks of ``rows``, in this machine's layout."""
    if rows == int4_rows():
        return values
    flat = values.reshape(-1, values.shape[-1])
    return pack_int4(unpack_int4(flat, rows)).view(values.shape)


def dequantize(
    values: torch.Tensor, scales: torch.Tensor, scheme: str, out_features: int, dtype
) -> torch.Tensor:
    """The (out_features, K) weight in ``dtype`` that ``values`` and ``scales`` stand for."""
    if scheme == "int8":
        return values.to(dtype) * scales.to(dtype)[:, None]
    q = unpack_int4(values).view(values.shape[0], -1, INT4_GROUP).float()
    scale, zero = (scales[..., i].t().float()[..., None] for i in (0, 1))
    return ((q - 8) * scale + zero).reshape(values.shape[0], -1)[:out_features].to(dtype)


def quantized_linear(
    x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor, scheme: str, out_features: int
) -> torch.Tensor:
    """``x @ w.T`` for the weight that ``values`` and ``scales`` store, computed in ``x``'s dtype."""
    if x.device.type != "cpu":
        return F.linear(x, dequantize(values, scales, scheme, out_features, x.dtype))
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    scales = scales.to(x.dtype)
    if scheme == "int8":
        out = torch._weight_int8pack_mm(rows, values, scales)
    else:
        out = torch._weight_int4pack_mm_for_cpu(rows, values, INT4_GROUP, scales)[:, :out_features]
    return out.reshape(*x.shape[:-1], out_features)


class QuantizedLinear(nn.Module):
    """A bias-free ``nn.Linear`` whose weight is stored as int8 or int4: buffers ``weight`` (the integer
    values, under the name the checkpoint gives the weight) and ``weight_scale``."""

    def __init__(self, in_features: int, out_features: int, scheme: str, dtype, device=None):
        super().__init__()
        self.in_features, self.out_features, self.scheme = in_features, out_features, scheme
        shape, kind, scale_shape = storage_shapes(out_features, in_features, scheme)
        self.register_buffer("weight", torch.empty(shape, dtype=kind, device=device))
        self.register_buffer("weight_scale", torch.empty(scale_shape, dtype=dtype, device=device))

    @classmethod
    def from_linear(cls, linear: nn.Linear, scheme: str) -> QuantizedLinear:
        if linear.bias is not None:
            raise ValueError("quantised linear layers here have no bias, as every decoder layer")
        module = cls(
            linear.in_features, linear.out_features, scheme, linear.weight.dtype, linear.weight.device
        )
        module.weight, module.weight_scale = quantize_weight(linear.weight, scheme, linear.weight.dtype)
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantized_linear(x, self.weight, self.weight_scale, self.scheme, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, scheme={self.scheme}"


class QuantizedExperts(nn.Module):
    """The routed experts of one MoE layer, fused as in ``JinaOCRExperts`` (``gate_up_proj`` (E, 2I, H),
    ``down_proj`` (E, H, I)) but stored as int8 or int4, each expert's rows with their own scales.

    It has what the MoE layer and ``grouped_dispatch`` read from an experts module (``config``,
    ``num_experts``, ``expert``, a ``gate_up_proj`` whose dtype the grouped_mm kernel does not take, so
    the MoE layer dispatches through ``grouped_dispatch``), and its forward is that dispatch whichever
    expert kernel the config names: the library's kernels would read the integers as weights."""

    def __init__(self, config, scheme: str, dtype, device=None):
        super().__init__()
        self.config, self.scheme = config, scheme
        self.num_experts, self.intermediate_size = config.n_routed_experts, config.moe_intermediate_size
        self.hidden_size, self.act_fn = config.hidden_size, F.silu
        for name, (out_features, in_features) in self._projections().items():
            shape, kind, scale_shape = storage_shapes(out_features, in_features, scheme)
            self.register_buffer(name, torch.empty(self.num_experts, *shape, dtype=kind, device=device))
            self.register_buffer(
                f"{name}_scale", torch.empty(self.num_experts, *scale_shape, dtype=dtype, device=device)
            )

    def _projections(self) -> dict[str, tuple[int, int]]:
        """Each fused weight's (out_features, in_features) per expert."""
        return {
            "gate_up_proj": (2 * self.intermediate_size, self.hidden_size),
            "down_proj": (self.hidden_size, self.intermediate_size),
        }

    @classmethod
    def from_experts(cls, experts: nn.Module, scheme: str) -> QuantizedExperts:
        """Quantised copies of the fused float experts, one expert at a time (the temporaries stay small)."""
        dtype, device = experts.gate_up_proj.dtype, experts.gate_up_proj.device
        module = cls(experts.config, scheme, dtype, device)
        for name in module._projections():
            values, scales = getattr(module, name), getattr(module, f"{name}_scale")
            for index, weight in enumerate(getattr(experts, name)):
                values[index], scales[index] = quantize_weight(weight, scheme, dtype)
        return module

    def expert(self, index: int, x: torch.Tensor) -> torch.Tensor:
        (gate_up, gate_up_scale), (down, down_scale) = (
            (getattr(self, name)[index], getattr(self, f"{name}_scale")[index])
            for name in self._projections()
        )
        gate, up = quantized_linear(x, gate_up, gate_up_scale, self.scheme, 2 * self.intermediate_size).chunk(
            2, dim=-1
        )
        return quantized_linear(self.act_fn(gate) * up, down, down_scale, self.scheme, self.hidden_size)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        return grouped_dispatch(self, hidden_states, top_k_index, top_k_weights)

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, scheme={self.scheme}"


class QuantizedEmbedding(nn.Module):
    """An ``nn.Embedding`` stored in int8 with one scale per token (whatever the scheme: a lookup reads
    single rows, no matrix kernel is involved, so int8 costs no time and keeps the rows close): buffers
    ``weight`` and ``weight_scale``. jina-ocr-v1's table of 129,280 tokens x 1,280 takes 166 MB instead
    of 331 MB in bfloat16, most of what stands between an int4 model and 3 GB."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype, device=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.register_buffer(
            "weight", torch.empty(num_embeddings, embedding_dim, dtype=torch.int8, device=device)
        )
        self.register_buffer("weight_scale", torch.empty(num_embeddings, dtype=dtype, device=device))

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> QuantizedEmbedding:
        weight = embedding.weight
        module = cls(embedding.num_embeddings, embedding.embedding_dim, weight.dtype, weight.device)
        module.weight, module.weight_scale = quantize_weight(weight, "int8", weight.dtype)
        return module

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids].to(self.weight_scale.dtype) * self.weight_scale[ids][..., None]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int8"
