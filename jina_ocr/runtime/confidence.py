"""How sure the model was of a page, from its own token probabilities, and how the page ended.

A page's text can look fluent and be invented (a page the model cannot read), or run into a loop; the
model's probabilities say so. Every decoding loop (the library's greedy loop, its assisted loop for
batch-1 FastMTP, our batched FastMTP loop) runs main-model forwards whose logits hold the
probability of each token it commits, so the score costs no extra forward: :class:`LogitsTap` keeps
the logits of the latest forward (a forward hook on the model, for one ``generate`` call), and the
row stops (:class:`~jina_ocr.runtime.batching.RowStops`) score each step's committed tokens with a
log-sum-exp and a max over the vocabulary, read to the host with the step's tokens. Under FastMTP every
committed token is scored from the main model's verification logits, never from the draft head's.

A token's log-probability is taken from the model's raw logits, before any logits processor: where the
loop guard bans the token the model wanted, the committed token is not the model's first choice, its
log-probability is low, and the page counts as overruled. How a page ended (``finish_reason``):

- ``stop``: it met its end token;
- ``length``: it ran to its token limit;
- ``loop``: it ran to its token limit after a logits processor (the loop guard) had overruled the
  model's first choice at least once, the mark of a repetition loop that the guard broke up;
- ``error``: it failed (see the page's ``error``).

The page's ``confidence`` (:func:`summarize`), one number in [0, 1] for a threshold: the geometric
mean of its token probabilities, ``exp(mean log-probability)``, and 0 when it ran to its token limit
(``length`` or ``loop``: its text is cut short, however sure the model was of each token). A page without ink, answered
empty without the model, has confidence 1; a page whose probabilities are unknown (an endpoint that
does not return them) has none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

STOP, LENGTH, LOOP, ERROR = "stop", "length", "loop", "error"


@dataclass
class PageScores:
    """The scores of one page's tokens so far: each committed token's log-probability (None: not
    scored), and how many tokens were not the model's first choice (a logits processor banned it)."""

    logprobs: list[float] | None = field(default_factory=list)
    overruled: int = 0

    def add(self, logprob: float, first_choice: float) -> None:
        """One committed token: its log-probability and that of the model's first choice there."""
        self.logprobs.append(logprob)
        self.overruled += first_choice > logprob


class LogitsTap:
    """The logits of the model's latest forward, kept by a forward hook while the ``with`` block runs.

    Only the model's own forward is seen (the main model); the FastMTP head is a submodule whose
    drafts never pass through it. One ``generate`` call at a time per model, as the model itself is
    not safe to call from two threads at once.
    """

    def __init__(self, model):
        self.model = model
        self.logits: torch.Tensor | None = None
        self._hook = None

    def __enter__(self) -> LogitsTap:
        self._hook = self.model.register_forward_hook(self._keep)
        return self

    def __exit__(self, *exc) -> None:
        self._hook.remove()
        self.logits = None

    def _keep(self, module, args, output) -> None:
        self.logits = output.logits

    def score(self, tokens: torch.Tensor) -> torch.Tensor:
        """(A, q) tokens chosen from the latest forward -> (A, q, 2): each token's log-probability and
        that of the model's first choice at its position.

        Token j of a row goes with column j of the forward's kept logits: every loop keeps exactly the
        positions whose predictions its step may commit, oldest first (``logits_to_keep``: 1 for a
        greedy step or a prefill, the last committed token plus the drafts for a FastMTP
        verification), and commits a prefix of them. The logits are dropped once scored, so that a
        prefill's are not kept alive into the next step.
        """
        logits, self.logits = self.logits[:, : tokens.shape[1]], None
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bfloat16 up, float64 kept
        norm = logits.logsumexp(dim=-1)
        chosen = logits.gather(-1, tokens[..., None])[..., 0]
        return torch.stack([chosen - norm, logits.amax(dim=-1) - norm], dim=-1)


def finish_reason(met_end_token: bool, overruled: bool) -> str:
    """How a page that was generated ended (see the module's docstring)."""
    if met_end_token:
        return STOP
    return LOOP if overruled else LENGTH


@dataclass(frozen=True)
class Confidence:
    """A page's summary: mean and lowest token log-probability and :func:`summarize`'s ``confidence``;
    each None when unknown."""

    confidence: float | None = None
    mean_logprob: float | None = None
    min_logprob: float | None = None


def cut_short(reason: str | None) -> bool:
    """Whether a page that ended by ``reason`` ran to its token limit (``length`` or ``loop``): its text
    is not the whole page, however sure the model was of each token."""
    return reason in (LENGTH, LOOP)


def summarize(logprobs: Sequence[float] | None, reason: str | None) -> Confidence:
    """The :class:`Confidence` of a page whose tokens had ``logprobs`` (None: unknown; empty: the model
    generated nothing, as for a page without ink) and that ended by ``reason`` (None: not known, so
    not counted against it)."""
    if logprobs is None or reason == ERROR:
        return Confidence()
    short = cut_short(reason)
    if not logprobs:
        return Confidence(0.0 if short else 1.0)
    mean = math.fsum(logprobs) / len(logprobs)
    return Confidence(0.0 if short else math.exp(mean), mean, min(logprobs))
