"""Detectors that warn before they stop: the nudge a detector's first trip may hand the model.

With ``on_stuck = "nudge"`` in the limits (for every detector, or per detector in a table), a
detector's trip does not stop the run at once: the guard hands the loop a corrective message
naming the evidence, delivered as the next step's ``feedback``, and the run stops only when the
detector trips again after ``max_nudges`` nudges (docs/runtime.md, "Nudges").
"""

from __future__ import annotations

from dataclasses import dataclass

from .detectors import Finding
from .limits import LoopLimits

__all__ = ["NUDGE_ADVICE", "Escalation", "Nudge", "nudge_text"]

NUDGE_ADVICE = "This is not getting anywhere: try something else, or answer with what you have."
"""The advice every nudge ends with."""


@dataclass(frozen=True, slots=True)
class Nudge:
    """One nudge: which detector tripped, in which step, and the message the model gets."""

    detector: str
    """The detector's stop reason (``repeated_tool_call`` ...)."""
    step: int
    message: str


def nudge_text(finding: Finding) -> str:
    """The message for the model: the evidence in the detector's words, then the advice."""
    return f"Loop check at step {finding.step}: {finding.evidence} {NUDGE_ADVICE}"


class Escalation:
    """Whether a detector's finding stops the run or nudges it, and the nudges given."""

    __slots__ = ("_counts", "_limits", "active", "given")

    def __init__(self, limits: LoopLimits) -> None:
        self._limits = limits
        self.active = limits.on_stuck != "stop"
        """Some detector nudges (else every finding stops, as before nudges existed)."""
        self._counts: dict[str, int] = {}
        self.given: list[Nudge] = []
        """The run's nudges, in order."""

    def nudge(self, finding: Finding) -> Nudge | None:
        """A nudge for ``finding``, or ``None`` when it stops the run (the detector stops, or
        it has given its ``max_nudges`` already)."""
        if not self.active:
            return None
        detector = finding.reason.value
        if self._limits.on_stuck_for(detector) != "nudge":
            return None
        given = self._counts.get(detector, 0)
        if given >= self._limits.max_nudges:
            return None
        self._counts[detector] = given + 1
        nudge = Nudge(detector, finding.step, nudge_text(finding))
        self.given.append(nudge)
        return nudge

    def after_nudges(self, finding: Finding) -> str:
        """A note for the stop's explanation when the detector had nudged the run before."""
        steps = [n.step for n in self.given if n.detector == finding.reason.value]
        if not steps:
            return ""
        which = ", ".join(str(s) for s in steps)
        return f" The model was nudged at step {which} and did not change course."
