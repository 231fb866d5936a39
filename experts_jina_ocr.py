"""The routed experts' two weight layouts, and the conversions between them.

Checkpoints keep one module per expert: ``<layer>.mlp.experts.<e>.{gate,up}_proj.weight`` (I, H) and
``...down_proj.weight`` (H, I). The model holds each layer's experts fused, as Transformers' expert kernels
(grouped_mm, batched_mm) read them: ``mlp.experts.gate_up_proj`` (E, 2I, H), each expert's gate rows before
its up rows, and ``mlp.experts.down_proj`` (E, H, I). Fused, dispatch needs no value from the device
(grouped_mm takes its offsets as a tensor; per-expert modules need token counts on the host).
``from_pretrained`` / ``save_pretrained`` convert with :func:`register_conversion`, ``load_state_dict``
with :func:`fuse_on_load`.
"""

from __future__ import annotations

import re
from collections import defaultdict

import torch

PER_EXPERT = re.compile(
    r"^(?P<experts>(?:.*\.)?mlp\.experts)\.(?P<index>\d+)\.(?P<proj>gate|up|down)_proj\.weight$"
)


def fused_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert keys -> the fused tensors of each layer; every other key as it is. A missing projection
    raises ValueError naming it, so a truncated checkpoint fails here, not as a shape error in the model."""
    layers: dict[str, dict[tuple[int, str], torch.Tensor]] = defaultdict(dict)
    out = {}
    for key, tensor in state.items():
        if match := PER_EXPERT.match(key):
            layers[match["experts"]][int(match["index"]), match["proj"]] = tensor
        else:
            out[key] = tensor
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


def fuse_on_load(module, state_dict, prefix, *args) -> None:
    """``load_state_dict`` pre-hook of an experts module: fuse its per-expert keys in place."""
    if own := [key for key in state_dict if key.startswith(prefix) and PER_EXPERT.match(key)]:
        state_dict.update(fused_layout({key: state_dict.pop(key) for key in own}))


def register_conversion(class_names: tuple[str, ...]) -> None:
    """Teach ``from_pretrained``/``save_pretrained`` the conversion for these model classes (remote-code
    classes get converters only when registered by class name; registering again replaces the entry)."""
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
