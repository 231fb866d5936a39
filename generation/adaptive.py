"""Adaptive drafting: how many tokens the next FastMTP step drafts, chosen for speed.

Whether drafting pays depends on the head's accuracy and on what a draft costs for this model, batch and
device (a third of a greedy step for a small model on CPU, nearly nothing on a GPU), so each step drafts
the k in 0..``most`` with the most expected committed tokens per second::

    E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 a_2 ... a_k          rate(k) = E(k) / T(k)

``a_d``, the chance draft d is accepted once 1..d-1 were, counts recent rows decayed by ``DECAY`` per step,
with a prior of ``PRIOR_WEIGHT`` tries at the estimate one depth up (1 at depth 1): a head is trusted until
seen to fail. ``T(k)`` averages the measured seconds of steps of length k (not a call's first step, whose
head also reads the prompt); an unmeasured length is scaled from the nearest measured one at ``DRAFT_COST``
greedy steps per draft, and since an overestimate would keep length 0 untried, one greedy step measures it
unless drafting looks ``EXPLORE_MARGIN`` times faster. A useless head drifts to 0, and its decaying
failures let the prior lift ``a_1`` until a probe pays again. The output is greedy whatever the lengths.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DECAY = 0.98
PRIOR_WEIGHT = 0.5
DRAFT_COST = 0.3
COST_SMOOTHING = 0.25  # weight of the newest step in the running average of T(k)
EXPLORE_MARGIN = 1.5


class DraftLength:
    """The draft length of the next step (``adaptive=False``: always ``most``); ``next`` starts a step,
    ``update`` ends it, and ``clock`` (seconds) times it."""

    def __init__(self, most: int, adaptive: bool = True, clock: Callable[[], float] = time.perf_counter):
        self.most = most
        self.adaptive = adaptive
        self.clock = clock
        self.hits = [0.0] * most  # rows whose draft d was accepted (decayed)
        self.tries = [0.0] * most  # rows that drafted d after accepting 1..d-1 (decayed)
        self.seconds: dict[int, float] = {}  # running average of T(k) over the steps that drafted k
        self.started: float | None = None
        self.timed = False  # the first step is not

    def acceptance(self) -> list[float]:
        """Estimated a_1 .. a_most."""
        rates, prior = [], 1.0
        for hits, tries in zip(self.hits, self.tries, strict=True):
            prior = (hits + PRIOR_WEIGHT * prior) / (tries + PRIOR_WEIGHT)
            rates.append(prior)
        return rates

    def cost(self, k: int) -> float:
        """Estimated T(k): measured, else scaled from the nearest measured length (any unit before
        the first measurement, as only ratios between lengths decide)."""
        if k in self.seconds:
            return self.seconds[k]
        if not self.seconds:
            return 1.0 + DRAFT_COST * k
        nearest = min(self.seconds, key=lambda j: (abs(j - k), j))
        return self.seconds[nearest] * (1.0 + DRAFT_COST * k) / (1.0 + DRAFT_COST * nearest)

    def next(self) -> int:
        """Drafts for the coming step (before any cap for the remaining token budget)."""
        if not self.adaptive:
            return self.most
        best, best_speed = 0, 1.0 / self.cost(0)
        expected, reach = 1.0, 1.0
        for k, accepted in enumerate(self.acceptance(), start=1):
            reach *= accepted
            expected += reach
            speed = expected / self.cost(k)
            if speed > best_speed:
                best, best_speed = k, speed
        if self.timed and 0 not in self.seconds and best_speed < EXPLORE_MARGIN / self.cost(0):
            best = 0
        self.started = self.clock()
        return best

    def update(self, drafted: int, accepted_per_depth: list[int], rows: int) -> None:
        """Record a step of ``rows`` rows that drafted ``drafted`` tokens each, of which
        ``accepted_per_depth[d]`` rows accepted drafts 1..d+1."""
        if not self.adaptive:
            return
        if self.started is not None and self.timed:
            elapsed = self.clock() - self.started
            old = self.seconds.get(drafted)
            self.seconds[drafted] = elapsed if old is None else old + COST_SMOOTHING * (elapsed - old)
        self.started, self.timed = None, True
        self.hits = [DECAY * hits for hits in self.hits]
        self.tries = [DECAY * tries for tries in self.tries]
        reached = rows
        for depth in range(drafted):
            self.tries[depth] += reached
            reached = accepted_per_depth[depth]
            self.hits[depth] += reached
