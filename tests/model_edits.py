"""Edits of an exported model's weights that make a random-weight model useful to a test."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file, save_file


def rewrite_weights(folder: Path, edit) -> None:
    path = folder / "model.safetensors"
    state = load_file(path)
    edit(state)
    save_file(state, path, metadata={"format": "pt"})


def make_lively(state) -> None:
    """Decoder and head weights scaled up, so that greedy output depends on the context and varies
    from page to page (random weights at init scale repeat one token forever)."""
    for name, tensor in state.items():
        decoder = name.startswith(("model.layers.", "mtp_module."))
        if decoder and tensor.ndim == 2 and not name.endswith("mlp.gate.weight"):
            state[name] = tensor * 6
    state["lm_head.weight"] = state["lm_head.weight"] * 4
