"""Training-only supervision from the glyph boxes of every training page (:mod:`jina_ocr.train.glyphs`).

Teacher forcing alone gives a model trained from scratch one weak signal: a next-token loss that it can
lower for thousands of steps by learning the language of the pages and never reading them. Two dense
signals tell it where the glyphs are from the first step on:

- a per-glyph loss on the visual tokens: a linear :class:`GlyphHead` reads, from each token, the glyphs
  of its cell (``GLYPH_LINES`` lines of ``GLYPH_SLOTS`` slots, in reading order; blank cells weigh 0.1),
  so the vision towers learn glyph shapes instead of waiting for the decoder's gradient;
- an attention-alignment loss: in the chosen decoder layers, one head is pushed to attend, from the
  position that predicts a character, to the visual token that holds that character's glyph (a
  supervised-attention prior, as in FAN or supervised alignment in translation), which is the copy
  skill a decoder otherwise finds only after a long plateau.

Neither part is saved with the model: the head lives beside it and the probes are forward hooks that
read the projector's output and recompute one head's attention weights from the layer's own inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from jina_ocr.remote_code.modeling_jina_ocr import apply_rotary
from jina_ocr.train.glyphs import GLYPH_LINES, GLYPH_SLOTS

BLANK_CELL_WEIGHT = 0.1


class GlyphHead(nn.Module):
    """Linear map from a visual token to the glyph classes of each slot of its cell (vocabulary + empty)."""

    def __init__(self, hidden_size: int, vocab_size: int):
        super().__init__()
        self.empty = vocab_size
        self.proj = nn.Linear(hidden_size, GLYPH_LINES * GLYPH_SLOTS * (vocab_size + 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, cells, hidden) -> (N, cells, GLYPH_LINES, GLYPH_SLOTS, vocab + 1) logits."""
        return self.proj(tokens.float()).view(*tokens.shape[:2], GLYPH_LINES, GLYPH_SLOTS, self.empty + 1)


def glyph_loss(logits: torch.Tensor, cell_glyphs: torch.Tensor, empty: int) -> tuple[torch.Tensor, dict]:
    """Cross-entropy over every slot (weight 1 in inked cells, 0.1 in blank ones) and the slot accuracy.

    ``cell_glyphs`` holds the token id of each slot's glyph, -1 where the slot is empty.
    """
    targets = cell_glyphs.masked_fill(cell_glyphs < 0, empty)
    per_slot = F.cross_entropy(logits.flatten(0, -2), targets.flatten(), reduction="none").view_as(targets)
    inked = (cell_glyphs >= 0).flatten(2).any(-1)
    weights = torch.where(inked, 1.0, BLANK_CELL_WEIGHT)[..., None, None].expand_as(per_slot)
    loss = (per_slot * weights).sum() / weights.sum()
    filled = cell_glyphs >= 0
    correct = (logits.argmax(-1) == targets) & filled
    return loss, {"glyph_correct": int(correct.sum()), "glyph_slots": int(filled.sum())}


class AttentionProbes:
    """Forward hooks that keep the projector's outputs and one head's attention over the visual tokens.

    The projector runs once per kind of view (the global views, then in a tiled mode the tiles);
    ``projected`` keeps each output by its tokens per view, from which the glyph loss takes the views its
    cells belong to (:meth:`~jina_ocr.train.glyphs.ViewGrid.cell_tokens`).

    ``layers`` are decoder layer indices; in each, head ``head`` is probed. A probe recomputes that
    head's scores from the attention module's own inputs (hidden states, rotary tables, mask), so the
    model runs with any attention implementation and is left unchanged. Only the rows of the text
    positions (from ``text_start``) and the columns of the visual tokens (``visual`` slice) are kept.
    With ``detach_visual`` the decoder gets the visual tokens cut from the towers' graph: only what
    reads the kept tokens (the glyph head) then sends a gradient into the towers.
    """

    def __init__(
        self, model, layers: list[int], head: int, text_start: int, visual: slice, detach_visual: bool = False
    ):
        self.text_start, self.visual, self.head = text_start, visual, head
        self.detach_visual = detach_visual
        self.active = True
        self.projected: dict[int, torch.Tensor] = {}
        self.log_attention: list[torch.Tensor] = []
        core = model.model
        self.handles = [core.projector.register_forward_hook(self._keep_projection)]
        for index in layers:
            attention = core.layers[index].self_attn
            self.handles.append(attention.register_forward_pre_hook(self._probe(attention)))

    def _keep_projection(self, module, inputs, output) -> torch.Tensor | None:
        if self.active:
            self.projected[output.shape[1]] = output
            if self.detach_visual:
                return output.detach()
        return None

    def _probe(self, attention):
        def hook(module, args) -> None:
            if not self.active:
                return
            x, (cos, sin), mask = args[0], args[1], args[2]
            dim, head = attention.head_dim, self.head
            kv_head = head // attention.num_key_value_groups
            q = F.linear(
                x[:, self.text_start :],
                attention.q_proj.weight[head * dim : (head + 1) * dim],
                None
                if attention.q_proj.bias is None
                else attention.q_proj.bias[head * dim : (head + 1) * dim],
            )
            k = F.linear(
                x,
                attention.k_proj.weight[kv_head * dim : (kv_head + 1) * dim],
                None
                if attention.k_proj.bias is None
                else attention.k_proj.bias[kv_head * dim : (kv_head + 1) * dim],
            )
            q = apply_rotary(q, cos[:, 0, self.text_start :], sin[:, 0, self.text_start :])
            k = apply_rotary(k, cos[:, 0], sin[:, 0])
            scores = (q @ k.transpose(1, 2)).float() * attention.scaling
            if mask is not None:
                scores = scores + mask[:, 0, self.text_start :].float()
            self.log_attention.append(scores.log_softmax(-1)[..., self.visual])

        return hook

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Probe nothing inside the block (generation, for instance)."""
        self.active = False
        try:
            yield
        finally:
            self.active = True

    def clear(self) -> None:
        self.projected, self.log_attention = {}, []

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def alignment_loss(log_attention: list[torch.Tensor], token_cells: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Mean of ``-log attention`` on the right cell over every probed head and every printed target token.

    ``log_attention[l]`` is (B, text rows, visual tokens), row ``r`` the position that predicts target
    token ``r``; ``token_cells`` (B, T) is each target token's visual index, -1 where it has none.
    """
    rows = min(token_cells.shape[1], log_attention[0].shape[1])
    cells = token_cells[:, :rows]
    known = cells >= 0
    index = cells.clamp(min=0)[..., None]
    picked = torch.stack([la[:, :rows].gather(-1, index)[..., 0] for la in log_attention])
    count = max(1, int(known.sum()))
    loss = -(picked * known).sum() / (count * len(log_attention))
    mass = float((picked.detach().exp() * known).sum()) / (count * len(log_attention))
    return loss, {"align_mass": mass}
