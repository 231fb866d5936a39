"""The routed experts' two weight layouts, and the conversions between them.

Checkpoints (DeepSeek-OCR's, jina-ocr-v1's and every file this package writes) keep one module per
expert: ``<layer>.mlp.experts.<e>.gate_proj.weight`` (I, H), ``...up_proj.weight`` (I, H) and
``...down_proj.weight`` (H, I). The model holds each layer's experts fused, the layout Transformers'
expert kernels (``experts_implementation``: grouped_mm, batched_mm) read: ``<layer>.mlp.experts.gate_up_proj``
(E, 2I, H), every expert's gate rows before its up rows, and ``<layer>.mlp.experts.down_proj`` (E, H, I).
Fused, a step's dispatch needs no value from the device: grouped_mm takes its per-expert offsets as a
tensor, where one module per expert needs the token counts on the host to choose the modules to run.

Three paths meet the checkpoint layout, and each converts with the same rule:

- ``from_pretrained`` and ``save_pretrained``: Transformers' own weight converter, registered for the
  model classes by :func:`register_conversion` (merge the experts' list, concatenate gate and up);
- ``load_state_dict`` (training checkpoints, files written before the fused layout): the experts
  module's load hook, :func:`fuse_on_load`, through :func:`fused_layout`;
- files this package writes without ``save_pretrained`` (training's model files): :func:`checkpoint_layout`.
"""

from __future__ import annotations

import re
from collections import defaultdict

import torch

PER_EXPERT = re.compile(
    r"^(?P<experts>(?:.*\.)?mlp\.experts)\.(?P<index>\d+)\.(?P<proj>gate|up|down)_proj\.weight$"
)
FUSED = re.compile(r"^(?P<experts>(?:.*\.)?mlp\.experts)\.(?P<name>gate_up_proj|down_proj)$")


def fused_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert keys -> the fused tensors of each layer; every other key as it is.

    Raises ValueError naming the layer and expert when a projection is missing, so a truncated
    checkpoint fails here and not as a shape error inside the model.
    """
    layers: dict[str, dict[tuple[int, str], torch.Tensor]] = defaultdict(dict)
    out = {}
    for key, tensor in state.items():
        match = PER_EXPERT.match(key)
        if match is None:
            out[key] = tensor
        else:
            layers[match["experts"]][int(match["index"]), match["proj"]] = tensor
    for experts, parts in layers.items():
        count = 1 + max(index for index, _ in parts)
        missing = [
            f"{e}.{p}_proj" for e in range(count) for p in ("gate", "up", "down") if (e, p) not in parts
        ]
        if missing:
            raise ValueError(f"{experts}: the checkpoint has no weight for expert {', '.join(missing[:4])}")
        out[f"{experts}.gate_up_proj"] = torch.stack(
            [torch.cat([parts[e, "gate"], parts[e, "up"]]) for e in range(count)]
        )
        out[f"{experts}.down_proj"] = torch.stack([parts[e, "down"] for e in range(count)])
    return out


def checkpoint_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fused tensors -> one contiguous tensor per expert and projection (no storage shared with the
    model, as safetensors requires); every other key as it is."""
    out = {}
    for key, tensor in state.items():
        match = FUSED.match(key)
        if match is None:
            out[key] = tensor
            continue
        experts = match["experts"]
        if match["name"] == "down_proj":
            for e in range(tensor.shape[0]):
                out[f"{experts}.{e}.down_proj.weight"] = tensor[e].clone(
                    memory_format=torch.contiguous_format
                )
        else:
            gate, up = tensor.chunk(2, dim=1)
            for e in range(tensor.shape[0]):
                out[f"{experts}.{e}.gate_proj.weight"] = gate[e].clone(memory_format=torch.contiguous_format)
                out[f"{experts}.{e}.up_proj.weight"] = up[e].clone(memory_format=torch.contiguous_format)
    return out


def fuse_on_load(module, state_dict, prefix, *args) -> None:
    """``load_state_dict`` pre-hook of an experts module: fuse its per-expert keys in place."""
    own = [key for key in state_dict if key.startswith(prefix) and PER_EXPERT.match(key)]
    if own:
        state_dict.update(fused_layout({key: state_dict.pop(key) for key in own}))


def register_conversion(class_names: tuple[str, ...]) -> None:
    """Teach ``from_pretrained``/``save_pretrained`` the conversion for these model classes.

    Transformers applies registered converters to remote-code classes only when they are registered
    by class name. Registering again (the module imported under another name) replaces the entry.
    """
    from transformers.conversion_mapping import register_checkpoint_conversion_mapping
    from transformers.core_model_loading import Concatenate, MergeModulelist, WeightConverter

    for name in class_names:
        mapping = [
            WeightConverter(
                source_patterns=["mlp.experts.*.gate_proj.weight", "mlp.experts.*.up_proj.weight"],
                target_patterns="mlp.experts.gate_up_proj",
                operations=[MergeModulelist(dim=0), Concatenate(dim=1)],
            ),
            WeightConverter(
                source_patterns="mlp.experts.*.down_proj.weight",
                target_patterns="mlp.experts.down_proj",
                operations=[MergeModulelist(dim=0)],
            ),
        ]
        register_checkpoint_conversion_mapping(name, mapping, overwrite=True)
