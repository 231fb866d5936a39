"""Weight-only int8 / int4 quantisation of the decoder of a jina-ocr model, fused routed experts included.

What is quantised: every linear layer of the decoder layers (attention, the dense MLP, the shared
experts), the fused routed experts of every MoE layer (most of the weights: 2.4 of 3.4 billion), and,
unless told otherwise, the LM head, the FastMTP head and the token embedding (int8 whatever the
scheme). What is not: the vision towers (SAM, CLIP), the projector, the routers and the norms, which
keep their dtype.

Quantisers that replace ``nn.Linear`` modules (bitsandbytes, most of torchao's configs) do not see
the experts' 3-D tensors and would leave them in bfloat16; here the experts have a quantised module of
their own (:mod:`jina_ocr.quantized_weights`), and :func:`quantize_model` fails if any decoder weight
is left in floating point afterwards. FastMTP needs nothing special: its drafts are verified by the
quantised model and its head is quantised like the rest, so decoding stays the quantised model's own
greedy output.

A quantised model is saved as model files (:func:`jina_ocr.model_files.save_model_files`) with the
integer tensors as they are and the settings under ``"quantization"``; loading such a folder builds
the quantised modules empty on the meta device and takes the stored tensors, never the float weights.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch
from torch import nn

from jina_ocr.errors import UserError
from jina_ocr.quantized_weights import (
    SCHEMES,
    QuantizedEmbedding,
    QuantizedExperts,
    QuantizedLinear,
    int4_rows,
    repack_int4,
)


@dataclass(frozen=True)
class Quantization:
    """How a model is quantised: ``scheme`` (int8 or int4) for the decoder, and whether the LM head, the
    FastMTP head and the token embedding (int8) are quantised too (keeping them in their dtype costs
    memory and time, not much)."""

    scheme: str
    lm_head: bool = True
    mtp_head: bool = True
    embedding: bool = True

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise UserError(f"unknown quantisation {self.scheme!r}: choose one of {', '.join(SCHEMES)}")

    def settings(self) -> dict:
        """What model files record, read back by :meth:`from_settings`: with int4, also the layout its
        values are saved in (this machine's, :func:`int4_rows`)."""
        return {**asdict(self), **({"int4_rows": int4_rows()} if self.scheme == "int4" else {})}

    @classmethod
    def from_settings(cls, settings: dict) -> Quantization:
        """Models saved before the embedding was quantised say nothing of it: theirs is in its dtype."""
        return cls(
            **{"embedding": False, **{key: value for key, value in settings.items() if key != "int4_rows"}}
        )


def parse(value) -> Quantization | None:
    """``quantize=`` of the loader: None, a :class:`Quantization`, or a scheme name ("int8", "int4")."""
    if value is None or isinstance(value, Quantization):
        return value
    if not isinstance(value, str):
        raise UserError(f"quantize must be one of {', '.join(SCHEMES)} or None, not {value!r}")
    return Quantization(value)


def _targets(model, quantization: Quantization):
    """(parent module, attribute, module) of everything to quantise, in order."""
    roots = list(model.model.layers)
    if quantization.mtp_head and getattr(model, "mtp_module", None) is not None:
        roots.append(model.mtp_module)
    for root in roots:
        for parent in root.modules():
            for attribute, child in parent.named_children():
                if isinstance(child, nn.Linear) or _is_float_experts(child):
                    yield parent, attribute, child
    if quantization.lm_head:
        yield model, "lm_head", model.lm_head
    if quantization.embedding:
        yield model.model, "embed_tokens", model.model.embed_tokens


def _is_float_experts(module: nn.Module) -> bool:
    """The fused experts in floating point (``JinaOCRExperts``), told by their 3-D ``gate_up_proj``."""
    weight = getattr(module, "gate_up_proj", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 3 and weight.is_floating_point()


def quantize_model(model, quantization: Quantization):
    """Quantise ``model`` in place, module by module (each float weight freed as its copy is made), and
    check that no decoder weight was left out. Returns the model."""
    for parent, attribute, module in list(_targets(model, quantization)):
        if isinstance(module, nn.Embedding):
            quantized = QuantizedEmbedding.from_embedding(module)
        elif isinstance(module, nn.Linear):
            quantized = QuantizedLinear.from_linear(module, quantization.scheme)
        else:
            quantized = QuantizedExperts.from_experts(module, quantization.scheme)
        setattr(parent, attribute, quantized)
    _mark(model, quantization)
    return model


def quantized_skeleton(model, quantization: Quantization):
    """Replace the modules :func:`quantize_model` would quantise by empty quantised ones on their device
    (meta, when loading): the shape of a quantised model, ready to take its stored tensors."""
    for parent, attribute, module in list(_targets(model, quantization)):
        if isinstance(module, nn.Embedding):
            weight = module.weight
            quantized = QuantizedEmbedding(*weight.shape, weight.dtype, weight.device)
        elif isinstance(module, nn.Linear):
            weight = module.weight
            quantized = QuantizedLinear(
                module.in_features, module.out_features, quantization.scheme, weight.dtype, weight.device
            )
        else:
            weight = module.gate_up_proj
            quantized = QuantizedExperts(module.config, quantization.scheme, weight.dtype, weight.device)
        setattr(parent, attribute, quantized)
    _mark(model, quantization)
    return model


def _mark(model, quantization: Quantization) -> None:
    """Record the quantisation on the model (saving and the loader read it) after checking it is whole."""
    if left := unquantized_weights(model):
        raise RuntimeError(
            f"{quantization.scheme}: decoder weights left in floating point: {', '.join(left[:5])}"
        )
    model.quantization = quantization


KEPT_IN_DTYPE = ("gate.weight", "layernorm.weight", "norm.weight")
"""Decoder tensors that stay in the model's dtype: routers and norms (vectors or small matrices read whole
at every step, where rounding would move the routing or the scale of every activation)."""


def unquantized_weights(model) -> list[str]:
    """Names of the floating-point tensors of the decoder layers that should have been quantised (any not
    in :data:`KEPT_IN_DTYPE`, scales aside): empty for a wholly quantised decoder."""
    left = []
    for index, layer in enumerate(model.model.layers):
        for name, tensor in [*layer.named_parameters(), *layer.named_buffers()]:
            if tensor.is_floating_point() and not name.endswith(("_scale", *KEPT_IN_DTYPE)):
                left.append(f"model.layers.{index}.{name}")
    return left


def quantization_of(model) -> Quantization | None:
    """The quantisation of a model made by :func:`quantize_model` or loaded quantised, else None."""
    return getattr(model, "quantization", None)


def load_quantized(config, path, quantization: Quantization, int4_rows: int = 64):
    """A model of ``config`` holding the quantised tensors saved in the safetensors file ``path``, built on
    the meta device so that no float copy of the quantised weights is ever made. int4 values saved in
    blocks of ``int4_rows`` (files from before the layout was recorded: 64) are repacked where this
    machine's kernel reads another layout."""
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(config)
    quantized_skeleton(model, quantization)
    state = read_aligned(path)
    if quantization.scheme == "int4":
        for name in _int4_values(model):
            state[name] = repack_int4(state[name], int4_rows)
    model.load_state_dict(state, strict=True, assign=True)
    if left := [
        name for name, tensor in [*model.named_parameters(), *model.named_buffers()] if tensor.is_meta
    ]:
        raise UserError(f"the quantised weights lack {', '.join(left[:5])}")
    return model


def _int4_values(model) -> list[str]:
    """The names of the int4 values tensors of a quantised model (not their scales)."""
    names = []
    for prefix, module in model.named_modules():
        if isinstance(module, QuantizedLinear) and module.scheme == "int4":
            names.append(f"{prefix}.weight")
        elif isinstance(module, QuantizedExperts) and module.scheme == "int4":
            names += [f"{prefix}.{name}" for name in module._projections()]
    return names


SAFETENSORS_DTYPES = {
    "I8": torch.int8,
    "U8": torch.uint8,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
}


def read_aligned(path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, each read into memory of its own.

    Not ``safetensors``' loader: its tensors map the file, at whatever byte offset the file gives them,
    and the CPU's int8 / int4 kernels crash on operands that are not aligned; copying them out of the
    mapping would hold the file twice (once mapped, once copied) at the peak. Read with plain file
    reads, the peak is the model's size."""
    with open(path, "rb") as handle:
        header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
        start = handle.tell()
        state = {}
        for name, entry in sorted(header.items(), key=lambda item: item[1].get("data_offsets", [0])[0]):
            if name == "__metadata__":
                continue
            if entry["dtype"] not in SAFETENSORS_DTYPES:
                raise UserError(
                    f"{path}: tensor {name} has dtype {entry['dtype']}, not one a quantised model holds"
                )
            tensor = torch.empty(entry["shape"], dtype=SAFETENSORS_DTYPES[entry["dtype"]])
            begin, end = entry["data_offsets"]
            handle.seek(start + begin)
            if handle.readinto(tensor.view(-1).view(torch.uint8).numpy()) != end - begin:
                raise UserError(f"{path}: tensor {name} is cut short")
            state[name] = tensor
    return state
