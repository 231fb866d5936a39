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
- ``T(k)`` is the median of the seconds that the last ``SAMPLES`` steps of length k took, from
  choosing k to recording the outcome (drafting, verification, bookkeeping and the read-back that
  ends every step). A median, because timing noise only ever adds time: one step slowed by another
  process must not decide the lengths of a whole page. The first step of a call is not timed: its
  head also reads the whole prompt, once. A length not measured yet is estimated from the nearest
  measured one, each draft costing ``DRAFT_COST`` greedy steps. That guess is corrected as soon as
  the length is tried, except for 0, which an overestimate would keep from ever being tried: while
  drafting does not look at least ``EXPLORE_MARGIN`` times faster than the cheapest a greedy step
  could be (its own T(0), or what a drafting length's T(k) implies at ``DRAFT_COST`` per draft), greedy
  steps measure it until it has ``GREEDY_SAMPLES`` timings, and again whenever its newest is
  ``REMEASURE_AFTER`` steps old. At batch 1 on a CPU, where drafting and greedy steps cost about the
  same per token, a greedy step timed too slow once would otherwise keep a page drafting at a loss.

A head that is never right drifts to length 0, plain greedy steps; as its failures decay, the prior
lifts ``a_1`` until a one-token probe pays again, so a useless head costs a probe every few dozen
steps and a head that starts agreeing is found again. Verification is unchanged, so the output is
exactly the greedy tokens whatever the lengths; only the speed depends on them (and on timing).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

DECAY = 0.98
PRIOR_WEIGHT = 0.5
DRAFT_COST = 0.3
SAMPLES = 5  # step timings per length whose median is T(k)
EXPLORE_MARGIN = 1.5
GREEDY_SAMPLES = 3
REMEASURE_AFTER = 32


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
        self.seconds: dict[int, list[float]] = {}  # the last SAMPLES timings of steps that drafted k
        self.started: float | None = None
        self.timed = False  # the first step is not
        self.steps = 0  # steps recorded
        self.greedy_timed_at = 0  # the step whose timing is the greedy step's newest

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
            return statistics.median(self.seconds[k])
        if not self.seconds:
            return 1.0 + DRAFT_COST * k
        nearest = min(self.seconds, key=lambda j: (abs(j - k), j))
        return self.cost(nearest) * (1.0 + DRAFT_COST * k) / (1.0 + DRAFT_COST * nearest)

    def _greedy_timing_wanted(self, best_speed: float) -> bool:
        """Whether a greedy step should be timed now: its timings are too few or too old, and drafting
        at ``best_speed`` does not clearly beat the cheapest a greedy step could be."""
        samples = len(self.seconds.get(0, ()))
        if samples >= GREEDY_SAMPLES and self.steps - self.greedy_timed_at < REMEASURE_AFTER:
            return False
        implied = (self.cost(k) / (1.0 + DRAFT_COST * k) for k in self.seconds)
        cheapest = min(implied, default=self.cost(0))
        return best_speed < EXPLORE_MARGIN / cheapest

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
        if self.timed and self._greedy_timing_wanted(best_speed):
            best = 0
        self.started = self.clock()
        return best

    def update(self, drafted: int, accepted_per_depth: list[int], rows: int) -> None:
        """Record a step of ``rows`` rows that drafted ``drafted`` tokens each, of which
        ``accepted_per_depth[d]`` rows accepted drafts 1..d+1."""
        if not self.adaptive:
            return
        if self.started is not None and self.timed:
            timings = self.seconds.setdefault(drafted, [])
            timings.append(self.clock() - self.started)
            del timings[:-SAMPLES]
            if drafted == 0:
                self.greedy_timed_at = self.steps
        self.started, self.timed = None, True
        self.steps += 1
        self.hits = [DECAY * hits for hits in self.hits]
        self.tries = [DECAY * tries for tries in self.tries]
        reached = rows
        for depth in range(drafted):
            self.tries[depth] += reached
            reached = accepted_per_depth[depth]
            self.hits[depth] += reached
