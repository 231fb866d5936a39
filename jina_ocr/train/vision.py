"""How the vision side of a from-scratch model starts: a standardising projector and a frozen start.

Measured on jina-ocr-tiny (random init, one 56 pt word per page, 50 possible words): a linear probe
reads the word perfectly from the randomly initialised visual tokens, yet after 200 training steps
the decoder's loss did not depend on the image at all, and when the towers were trained from the
first step their output collapsed to one vector for every page. Two causes:

- the visual tokens are a large constant plus a small page-dependent part, and the decoder's
  RMSNorm keeps the constant, so the part that tells pages apart is too faint to learn from;
- before the decoder uses the image, the only gradient that reaches the towers asks for less noise,
  which the towers deliver by making every page look the same.

So the projector starts standardising: its bias removes the mean of its input features and its
weights are divided by their spread, both measured on a few training pages, which makes the
page-dependent part of the visual tokens the large part (the probe's view). And the towers (SAM,
CLIP, projector) stay frozen at that init for the first steps of the run, while the decoder learns
to read their random but informative features; after that they train at a reduced learning rate.
With both, the loss gap between a page's own image and another page's opened within 60 steps.
"""

from __future__ import annotations

import torch

VISION_MODULES = ("sam_model", "vision_model", "projector")
# The two towers: most of a CPU training step's time, and the same shapes on every page of a run.
TOWERS = ("sam_model", "vision_model")


def vision_parameters(model) -> list[torch.nn.Parameter]:
    """The parameters of SAM, CLIP and the projector."""
    return [p for name in VISION_MODULES for p in getattr(model.model, name).parameters()]


def compile_towers(model, backend: str = "inductor") -> None:
    """Compile SAM and CLIP in place for training (``--compile-towers``).

    Every training page has views of the same sizes (its global view and, in a tiled mode, tiles of one
    grid), so static graphs (``dynamic=False``, one per view size) serve the whole run. ``nn.Module.compile`` compiles each tower where it sits, so parameter names, saved
    files and checkpoints are those of the eager model and a run may switch it on or off on a rerun.
    """
    for name in TOWERS:
        getattr(model.model, name).compile(backend=backend, dynamic=False)


def set_vision_trainable(model, trainable: bool) -> None:
    for parameter in vision_parameters(model):
        parameter.requires_grad_(trainable)


@torch.no_grad()
def standardize_projector(model, pixel_values: torch.Tensor) -> None:
    """Make the projector map ``(x - mean) / std`` of its input features (measured on these views)."""
    features = model.model.view_features(pixel_values).flatten(0, 1)
    mean, std = features.mean(0), features.std(0) + 1e-3
    layer = model.model.projector.layers
    layer.weight.div_(std[None, :])
    layer.bias.copy_(-layer.weight @ mean)
