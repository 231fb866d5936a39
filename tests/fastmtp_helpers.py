"""Small models, prompts and a correct-draft ("oracle") head for the FastMTP tests."""

from __future__ import annotations

import itertools

import torch
from small_config import IMAGE, SMALL
from torch import nn
from transformers.generation.streamers import BaseStreamer

from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.generation import batched, fastmtp
from jina_ocr.remote_code.generation.adaptive import DraftLength
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.remote_code.processing_jina_ocr import PIXELS_PER_TOKEN

EOS, PAD = 1, 2
SPECIAL = (EOS, PAD, IMAGE)


def small_model(seed: int = 0, dtype=torch.float64, **overrides) -> JinaOCRForConditionalGeneration:
    """The small architecture with non-trivial norm weights (so pre/post-norm choices differ)."""
    torch.manual_seed(seed)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**{**SMALL, **overrides})).to(dtype).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.1)
    return model


def placeholders(side: int) -> int:
    n = side // PIXELS_PER_TOKEN
    return n * (n + 1) + 1


def page_batch(seed: int, sides: list[int], vocab: int, dtype=torch.float64) -> dict:
    """Left-padded prompts ``text <image>*count text`` (one square view each) and their pixels."""
    gen = torch.Generator().manual_seed(seed)
    text = [t for t in range(vocab) if t not in SPECIAL]
    prompts = []
    for side in sides:
        before, after = (int(torch.randint(1, 5, (1,), generator=gen)) for _ in range(2))
        pick = lambda n: [text[int(i)] for i in torch.randint(len(text), (n,), generator=gen)]  # noqa: E731
        prompts.append(pick(before) + [IMAGE] * placeholders(side) + pick(after))
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    assert len(set(sides)) == 1, "one view size per batch: views are stacked into one tensor"
    pixels = torch.randn(len(sides), 3, sides[0], sides[0], generator=gen).to(dtype)
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels}


class NullStreamer(BaseStreamer):
    """A streamer that keeps nothing: it sends a batch-1 FastMTP call to the library's loop."""

    def put(self, value):
        pass

    def end(self):
        pass


def loop_options(loop: str) -> dict:
    """The ``generate`` options that run a batch-1 FastMTP call in ``loop`` ("ours" or "library")."""
    return {"ours": {}, "library": {"streamer": NullStreamer()}}[loop]


def generate(model, inputs: dict, **options) -> torch.Tensor:
    options = {"max_new_tokens": 10, "do_sample": False, "eos_token_id": EOS, "pad_token_id": PAD, **options}
    with torch.no_grad():
        return model.generate(**inputs, **options)


class OracleHead(nn.Module):
    """A stand-in for the draft head whose drafts are the main model's own greedy continuation.

    The entry at rotary position p of row r predicts the token at column ``p + 2 + pads[r]`` of
    ``continuation`` (the head's pairing, SPEC section 6). It returns a state that the shared final
    norm and LM head map to exactly that token: ``u = pinv(lm_head) e_t`` divided by the norm weight,
    which needs ``hidden_size >= vocab_size``. It grows its KV cache like a real block so the
    drafter's bookkeeping is exercised unchanged.
    """

    def __init__(self, model, continuation: torch.Tensor, pads: list[int]):
        super().__init__()
        self.continuation = continuation
        self.pads = pads
        weight = model.lm_head.weight.detach()
        if weight.shape[1] < weight.shape[0]:
            raise ValueError("the oracle head needs hidden_size >= vocab_size")
        self.states = torch.linalg.pinv(weight).T / model.model.norm.weight.detach()  # row t -> token t

    def forward(self, embeddings, hidden, position_ids, cache=None, attention_mask=None):
        batch, length = position_ids.shape
        if cache is not None:
            empty = embeddings.new_zeros(batch, 1, length, 1)
            cache.update(empty, empty, 0)
        columns = position_ids + 2 + torch.tensor(self.pads, device=position_ids.device)[:, None]
        columns = columns.clamp(max=self.continuation.shape[1] - 1)
        tokens = self.continuation.gather(1, columns)
        return self.states[tokens].to(embeddings.dtype)


class CostedLength(DraftLength):
    """Adaptive drafting timed by a cost model instead of the wall clock: a step that drafts k tokens
    takes ``1 + per_draft * k`` seconds, so the lengths it picks do not depend on the machine."""

    def __init__(self, most: int, adaptive: bool = True, per_draft: float = 0.3):
        self.now, self.per_draft = 0.0, per_draft
        super().__init__(most, adaptive, clock=lambda: self.now)

    def update(self, drafted: int, accepted_per_depth: list[int], rows: int) -> None:
        self.now += 1.0 + self.per_draft * drafted
        super().update(drafted, accepted_per_depth, rows)


def draft_lengths_from(monkeypatch, length_class: type[DraftLength]) -> None:
    """Both FastMTP loops (ours and the library's) take their draft lengths from ``length_class``."""
    monkeypatch.setattr(batched, "DraftLength", length_class)
    monkeypatch.setattr(fastmtp, "DraftLength", length_class)


def scripted_lengths(monkeypatch, script: list[int]) -> None:
    """Both FastMTP loops draft the lengths of ``script`` in turn, cycling, whatever the head does."""
    lengths = itertools.cycle(script)

    class Scripted(DraftLength):
        def next(self) -> int:
            return next(lengths)

    draft_lengths_from(monkeypatch, Scripted)
