"""A replay of recorded steps through the detectors the guard runs live (docs/runtime.md, "The
detectors").

The store's tool spans, an imported chat log or a test's script are fed to the same
:class:`~loopwatch.instrumentation.runtime.detectors.Detectors`, in the guard's order, so a rule
is written once and history is judged by the rule that runs live. A recorded call is the one
tool-call record, :class:`~loopwatch.instrumentation.runtime.toolspec.ToolOutcome`, as the
registry returns it and the observer gets it (docs/architecture.md, "One tool call's record")::

    from loopwatch.instrumentation.runtime.replay import RecordedStep, replay
    from loopwatch.instrumentation.runtime.toolspec import ToolOutcome
    from loopwatch.instrumentation.runtime.types import ToolCall

    steps = [
        RecordedStep(1, [ToolOutcome(call=ToolCall("", "read_file", {"path": "a"}), ok=False,
                                     content="NOT_FOUND", error_code="NOT_FOUND",
                                     error_message="no such file")]),
        ...
    ]
    finding = replay(steps, LoopLimits())      # the first stop, or None
    finding.reason, finding.step, finding.explanation

A call's arguments and content may be fingerprints (equal fingerprints, equal calls); a recorded
``error_fingerprint`` is the failure's identity. :class:`RecordedCall` is the older record,
still replayed: it also says whether the tool is repeat-exempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .arguments import comparable_arguments
from .detectors import Detectors, Finding, ToolEvent
from .limits import LoopLimits
from .outcomes import UNKNOWN_ERROR
from .toolspec import ToolOutcome

__all__ = ["RecordedCall", "RecordedStep", "replay", "replay_peaks"]


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One recorded tool call by name (the older replay record; a ``ToolOutcome`` is the one
    record): what was called, what came back, and whether it failed."""

    name: str
    arguments: Any
    """Parsed arguments, a JSON string (parsed here), or a call fingerprint."""
    result: Any
    """The text returned to the model, or a result fingerprint."""
    ok: bool = True
    error_code: str | None = None
    error_message: str | None = None
    """The failure's message; default: the result text, when it is text."""
    exempt: bool = False
    """The tool is repeat-exempt."""
    error_id: str | None = None
    """The failure's identity when already known (e.g. a recorded error fingerprint)."""


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One recorded loop step: its tool calls in order (none: the model answered or waited)."""

    index: int
    calls: Sequence[ToolOutcome | RecordedCall] = field(default_factory=tuple)
    progressed: bool | None = None
    """The caller's progress signal for this step, if one was recorded."""


def _fields(c: ToolOutcome | RecordedCall) -> tuple[str, Any, Any, bool, str | None]:
    # name, arguments as sent, result, repeat-exempt, failure identity
    if type(c) is ToolOutcome:
        return c.call.name, c.call.arguments, c.content, False, c.error_fingerprint
    assert isinstance(c, RecordedCall)
    return c.name, c.arguments, c.result, c.exempt, c.error_id


def _events(
    steps: Iterable[RecordedStep], detectors: Detectors, on_stop: Callable[[Finding], bool]
) -> None:
    for step in steps:
        n = step.index
        for c in step.calls:
            name, raw, result, exempt, error_id = _fields(c)
            args = comparable_arguments(raw)
            found = detectors.before_call(name, args, n, exempt=exempt)
            if found is not None and on_stop(found):
                return
            # classified as the guard classifies a result
            message = c.error_message
            if message is None and not c.ok and isinstance(result, str):
                message = result
            code = None if c.ok else (c.error_code or UNKNOWN_ERROR)
            event = ToolEvent(n, name, args, result, c.ok, code, message, exempt, error_id)
            found = detectors.after_call(event)
            if found is not None and on_stop(found):
                return
        found = detectors.end_step(n, step.progressed)
        if found is not None and on_stop(found):
            return


def replay(
    steps: Iterable[RecordedStep],
    limits: LoopLimits | None = None,
    *,
    detectors: Detectors | None = None,
) -> Finding | None:
    """Feed recorded steps to the detectors in order; the first stop, or ``None``.

    The same objects and order the guard uses: for a run the guard stopped with a detector, the
    finding has the same reason and step. Budgets and the other stops are not replayed.
    """
    d = detectors or Detectors.for_limits(limits or LoopLimits())
    first: list[Finding] = []

    def stop(found: Finding) -> bool:
        first.append(found)
        return True

    _events(steps, d, stop)
    return first[0] if first else None


def replay_peaks(
    steps: Iterable[RecordedStep], *, count_calls_only: bool = False, normalize: bool = True
) -> dict[str, int]:
    """Each detector's peak evidence over a whole recorded run, no detector switched on.

    A detector with threshold N would have stopped the run iff its peak ≥ N (``repeated_action``
    has no threshold: its peak is the longest streak of one (call, result) in a row, 2 when a
    cycle was seen; the guard stops at 2).
    """
    d = Detectors(
        max_same_call=None,
        max_same_error=None,
        max_consecutive_failures=None,
        max_idle_turns=None,
        count_calls_only=count_calls_only,
        normalize=normalize,
    )
    _events(steps, d, lambda found: False)
    return d.peaks()
