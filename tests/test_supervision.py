"""The training-only supervision: attention probes against the attention the model really computes, and
the two losses against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

import jina_ocr.remote_code.modeling_jina_ocr as modeling
from jina_ocr.train.glyphs import GLYPH_LINES, GLYPH_SLOTS
from jina_ocr.train.supervision import AttentionProbes, GlyphHead, alignment_loss, glyph_loss


@pytest.fixture
def eager_model():
    from small_config import SMALL

    torch.manual_seed(0)
    config = modeling.JinaOCRConfig(**SMALL)
    config._attn_implementation = "eager"
    return modeling.JinaOCRForConditionalGeneration(config).eval()


def test_probes_see_the_weights_eager_attention_uses(eager_model, monkeypatch):
    """The probe recomputes one head; the eager kernel's own softmax weights are recorded and compared."""
    seen = []

    def recording(module, *args, **kwargs):
        out, weights = eager(module, *args, **kwargs)
        seen.append(weights.detach())
        return out, weights

    eager = modeling.eager_attention_forward
    monkeypatch.setattr(modeling, "eager_attention_forward", recording)
    config = eager_model.config
    side = config.sam_image_size // config.pixels_per_visual_token
    visual = side * (side + 1) + 1
    ids = torch.cat(
        [
            torch.tensor([[3, 4]]),
            torch.full((1, visual), config.image_token_id),
            torch.tensor([[12, 13, 14, 15, 16]]),
        ],
        1,
    )
    ids = ids.repeat(2, 1)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0  # right padding in the second row
    pixels = torch.rand(2, 3, config.sam_image_size, config.sam_image_size) * 2 - 1
    text_start = 2 + visual + 1
    probes = AttentionProbes(eager_model, [1], head=1, text_start=text_start, visual=slice(2, 2 + visual))
    with torch.no_grad():
        eager_model(
            input_ids=ids,
            attention_mask=mask,
            pixel_values=pixels,
            image_grids=torch.zeros(2, 2, dtype=torch.long),
        )
    probes.remove()
    real = seen[1][:, 1, text_start:, 2 : 2 + visual]  # layer 1, head 1
    torch.testing.assert_close(probes.log_attention[0].exp(), real.float(), atol=1e-5, rtol=1e-4)
    assert probes.projected[side * side].shape == (2, side * side, config.hidden_size)


def test_alignment_loss_is_the_mean_negative_log_attention_on_the_right_cell():
    log_attention = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]]))
    cells = torch.tensor([[0, -1, 2]])  # the middle token has no glyph
    loss, stats = alignment_loss([log_attention, log_attention], cells)
    assert loss.item() == pytest.approx(-(math.log(0.5) + math.log(0.6)) / 2)
    assert stats["align_mass"] == pytest.approx((0.5 + 0.6) / 2)


def test_glyph_loss_weighs_blank_cells_a_tenth_and_counts_filled_slots():
    head = GlyphHead(hidden_size=4, vocab_size=3)
    logits = torch.zeros(1, 2, GLYPH_LINES, GLYPH_SLOTS, 4)
    targets = torch.full((1, 2, GLYPH_LINES, GLYPH_SLOTS), -1)
    targets[0, 0, 0, 0] = 2  # one glyph in cell 0; cell 1 is blank
    logits[0, 0, 0, 0, 2] = 5.0  # right
    logits[0, 1, :, :, head.empty] = 5.0  # blank cell predicted blank
    loss, stats = glyph_loss(logits, targets, head.empty)
    slots = GLYPH_LINES * GLYPH_SLOTS
    easy = -torch.log_softmax(torch.tensor([0.0, 0, 5, 0]), 0)[2].item()  # a confident right slot
    flat = math.log(4)  # an empty slot of cell 0 at uniform logits
    expected = (easy + (slots - 1) * flat + 0.1 * slots * easy) / (slots + 0.1 * slots)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert stats == {"glyph_correct": 1, "glyph_slots": 1}
