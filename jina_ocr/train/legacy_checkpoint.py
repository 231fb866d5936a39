"""Training checkpoints written while the model held one parameter per routed expert.

The model's weights in such a checkpoint load as they are (the experts module fuses per-expert keys
on ``load_state_dict``, :mod:`jina_ocr.remote_code.experts_jina_ocr`), but the optimizer's state is
a list by parameter position: there each layer's experts were 3E parameters (gate, up, down of every
expert in turn) where the model now has two fused ones. :func:`legacy_moments` rebuilds the moments of
the fused parameters from the per-expert ones, so a run goes on where it stopped instead of starting its
optimizer again. Checkpoints written since record each group's parameter names.
"""

from __future__ import annotations

from jina_ocr.errors import UserError
from jina_ocr.remote_code.experts_jina_ocr import FUSED, fused_layout

MOMENTS = ("exp_avg", "exp_avg_sq")


def per_expert_names(names: list[str], experts: int) -> list[str]:
    """The parameter names a group held before the fused layout, in their order then."""
    old = []
    for name in names:
        match = FUSED.match(name)
        if match is None:
            old.append(name)
        elif match["name"] == "gate_up_proj":  # its down_proj was interleaved with it, expert by expert
            old += [
                f"{match['experts']}.{e}.{p}_proj.weight"
                for e in range(experts)
                for p in ("gate", "up", "down")
            ]
    return old


def legacy_moments(saved: dict, groups: list[dict], experts: int) -> dict[str, dict]:
    """Each parameter's AdamW state in ``saved`` (a state dict without names, written when the groups were
    ``groups``, each with its ``names``), by the parameter's name in the fused layout."""
    if len(saved["param_groups"]) != len(groups):
        raise UserError(
            "the checkpoint's optimizer has other parameter groups than this model: start a new run"
        )
    by_name = {}
    for old, group in zip(saved["param_groups"], groups, strict=True):
        names = per_expert_names(group["names"], experts)
        if len(names) != len(old["params"]):
            raise UserError(
                "the checkpoint's optimizer holds other parameters than this model: start a new run"
            )
        by_name.update(
            {
                name: saved["state"][i]
                for name, i in zip(names, old["params"], strict=True)
                if i in saved["state"]
            }
        )
    moments = {field: fused_layout({name: s[field] for name, s in by_name.items()}) for field in MOMENTS}
    fused = {}
    for name in (name for group in groups for name in group["names"]):
        match = FUSED.match(name)
        first = name if match is None else f"{match['experts']}.0.gate_proj.weight"
        if first in by_name:
            fused[name] = {"step": by_name[first]["step"], **{f: moments[f][name] for f in MOMENTS}}
    return fused
