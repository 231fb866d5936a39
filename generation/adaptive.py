"""Adaptive drafting: how many tokens the next FastMTP step drafts, from how the last drafts fared.

A draft that is rejected costs a head step, an LM-head product and a wider verification, and saves
nothing. So the draft length follows the head's recent record, between 0 and ``most`` (the call's
``mtp_num_speculative_steps``):

- every draft of a step accepted (in every row of the batch): one more next time, up to ``most``;
- some accepted: the same length again;
- none accepted: half as many (3 -> 1 -> 0).

At length 0 the steps are plain greedy steps; after ``wait`` of them one draft probes the head again.
A probe that fails doubles the wait (up to ``MAX_WAIT``), so a head that never agrees costs one
draft every few dozen tokens; a probe that succeeds restores the short wait and the length grows
again. Verification is unchanged, so the output stays exactly the greedy tokens.
"""

from __future__ import annotations

FIRST_WAIT = 4
MAX_WAIT = 64


class DraftLength:
    """The draft length of the next step; ``adaptive=False`` always drafts ``most``."""

    def __init__(self, most: int, adaptive: bool = True):
        self.most = most
        self.adaptive = adaptive
        self.length = most
        self.wait = FIRST_WAIT
        self.idle = 0  # greedy steps since the length reached 0

    def next(self) -> int:
        """Drafts for the coming step (before any cap for the remaining token budget)."""
        if not self.adaptive:
            return self.most
        if self.length:
            return self.length
        if self.idle < self.wait:
            self.idle += 1
            return 0
        return 1  # probe

    def update(self, drafted: int, accepted: int, rows: int) -> None:
        """Record a step that drafted ``drafted`` tokens per row and accepted ``accepted`` in all."""
        if not self.adaptive or not drafted:
            return
        if accepted == drafted * rows:
            self.length = min(self.most, drafted + 1)
            self.wait = FIRST_WAIT
        elif accepted == 0:
            probe = self.length == 0
            self.length = drafted // 2
            if not self.length:
                self.idle = 0
                if probe:
                    self.wait = min(2 * self.wait, MAX_WAIT)
        else:
            self.length = drafted
