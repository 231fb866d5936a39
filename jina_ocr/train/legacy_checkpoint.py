"""Training checkpoints written while the model held one parameter per routed expert.

The model's weights in such a checkpoint load as they are (the experts module fuses per-expert keys
on ``load_state_dict``, :mod:`jina_ocr.remote_code.experts_jina_ocr`), but the optimizer's state is
a list by parameter position: there each layer's experts were 3E parameters (gate, up, down of every
expert in turn) where the model now has two fused ones. :func:`fused_optimizer_state` rebuilds the
moments of the fused parameters from the per-expert ones, so a run goes on where it stopped instead of
starting its optimizer again. Checkpoints written since record each group's parameter names.
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


def fused_optimizer_state(saved: dict, groups: list[dict], experts: int) -> dict:
    """``saved`` (an AdamW state dict) for parameter groups ``groups`` (each with its ``names``).

    A state that records names is already in the current layout and comes back as it is.
    """
    if all("names" in group for group in saved["param_groups"]):
        return saved
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
    state, param_groups, index = {}, [], 0
    for old, group in zip(saved["param_groups"], groups, strict=True):
        params = []
        for name in group["names"]:
            match = FUSED.match(name)
            first = name if match is None else f"{match['experts']}.0.gate_proj.weight"
            if first in by_name:
                state[index] = {"step": by_name[first]["step"], **{f: moments[f][name] for f in MOMENTS}}
            params.append(index)
            index += 1
        param_groups.append({**old, "params": params, "names": list(group["names"])})
    return {"state": state, "param_groups": param_groups}
