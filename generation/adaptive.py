"""Adaptive drafting: how many tokens the next FastMTP step drafts, chosen for speed.

A step that drafts k tokens costs k head steps, an LM-head product per draft and a verification k + 1
tokens wide, and commits one token plus the drafts the main model agrees with. Whether drafting pays,
and how far, depends on how often the head is right and on what drafting costs for this model, batch
and device: on a small CPU model at batch 1 a draft costs about a third of a greedy step, so a head
right half the time gains with one draft and loses with three, while on a GPU a draft is nearly free.
So every step drafts the length k in 0..``most`` (the call's ``mtp_num_speculative_steps``) with the
most expected committed tokens per second::

    E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 a_2 ... a_k          rate(k) = E(k) / T(k)

- ``a_d`` is the chance that draft d is accepted once drafts 1..d-1 were, counted over the rows of
  recent steps. Every count decays by ``DECAY`` per step, so the estimate follows the page, and leans
  on a prior of ``PRIOR_WEIGHT`` tries at the estimate one depth up (at depth 1, certainty): a head is
  trusted until it is seen to fail, so the first step drafts ``most``, and a depth no step has reached
  yet is taken to be as good as the one above it.
- ``T(k)`` is the running average of the seconds that steps of length k took, from choosing k to
  recording the outcome (drafting, verification, bookkeeping and the read-back that ends every
  step). The first step of a call is not timed: its head also reads the whole prompt, once. A length
  not measured yet is estimated from the nearest measured one, each draft costing ``DRAFT_COST``
  greedy steps. That guess is corrected as soon as the length is tried, except for 0, which an
  overestimate would keep from ever being tried: while the greedy step is unmeasured and drafting
  does not look at least ``EXPLORE_MARGIN`` times faster, one greedy step measures it.

A head that is never right drifts to length 0, plain greedy steps; as its failures decay, the prior
lifts ``a_1`` until a one-token probe pays again, so a useless head costs a probe every few dozen
steps and a head that starts agreeing is found again. Verification is unchanged, so the output is
exactly the greedy tokens whatever the lengths; only the speed depends on them (and on timing).
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
    """The draft length of the next step; ``adaptive=False`` always drafts ``most``.

    ``next`` starts a step and ``update`` ends it; ``clock`` (seconds) times the steps in between.
    """

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
