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
``error_fingerprint`` is the failure's identity. Which tools are repeat-exempt is the run's to
say, as for the guard (``RunConfig.repeat_exempt``): ``replay(..., repeat_exempt=("poll",))``.

:func:`call_fingerprints` works out a call's fingerprints the way the guard does for the
observer (:func:`fingerprinted` fills them into a record): the importer's and the foreign path's
tool spans carry them, so the store holds one fingerprint per call whichever way it came in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .arguments import comparable_arguments
from .detectors import Detectors, Finding
from .fingerprint import call_fingerprint, error_fingerprint, result_fingerprint
from .limits import LoopLimits
from .outcomes import UNKNOWN_ERROR
from .toolspec import ToolOutcome
from .types import ToolCall

__all__ = [
    "RecordedCall",
    "RecordedStep",
    "call_fingerprints",
    "fingerprinted",
    "replay",
    "replay_peaks",
]


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One recorded loop step: its tool calls in order (none: the model answered or waited)."""

    index: int
    calls: Sequence[ToolOutcome] = field(default_factory=tuple)
    progressed: bool | None = None
    """The caller's progress signal for this step, if one was recorded."""


def RecordedCall(
    name: str,
    arguments: Any,
    result: Any,
    ok: bool = True,
    error_code: str | None = None,
    error_message: str | None = None,
    exempt: bool = False,
    error_id: str | None = None,
) -> ToolOutcome:
    """Deprecated: the older replay record (a class of its own), now a constructor of the one
    record (docs/architecture.md, "One tool call's record").

    ``RecordedCall(name, arguments, result, ok=..., error_code=..., error_message=...,
    error_id=...)`` is ``ToolOutcome(call=ToolCall("", name, arguments), ok=..., content=result,
    error_code=..., error_message=..., error_fingerprint=error_id)``. A tool's exemption is the
    run's, not the call's: ``exempt=True`` is refused, naming ``repeat_exempt`` of
    :func:`replay` and :func:`replay_peaks` (docs/runtime.md, "The detector objects").
    """
    if exempt:
        raise TypeError(
            f"RecordedCall(exempt=True) is gone: a tool's exemption is the run's, not the "
            f"call's; pass repeat_exempt=({name!r},) to replay() or replay_peaks()"
        )
    return ToolOutcome(
        call=ToolCall("", name, arguments),
        ok=ok,
        content=result,
        error_code=error_code,
        error_message=error_message,
        error_fingerprint=error_id,
    )


def call_fingerprints(
    tool: str,
    arguments: Any,
    content: str,
    error_code: str | None = None,
    error_message: str | None = None,
) -> tuple[str, str, str | None]:
    """The (call, result, failure) fingerprints of one tool call, worked out as the guard works
    them out for the observer (docs/architecture.md, "One tool call's record"): the call's from
    its arguments as the detectors compare them (:func:`comparable_arguments`: JSON object text
    parsed, blank text no arguments), the result's with volatile text normalized unless the tool
    compares exactly, the failure's (``None`` when ``error_code`` is ``None``: the call
    succeeded) from tool, code and message, the returned text when there is no message. The
    importer's and the foreign path's tool spans carry these."""
    call_fp = call_fingerprint(tool, comparable_arguments(arguments))
    if error_code is None:
        return call_fp, result_fingerprint(content, tool), None
    failure = error_fingerprint(tool, error_code, error_message or content or "")
    return call_fp, result_fingerprint(content, tool), failure


def fingerprinted(outcome: ToolOutcome) -> ToolOutcome:
    """``outcome`` with its fingerprints filled in (:func:`call_fingerprints`), as the observer
    gets it from the guard."""
    call = outcome.call
    code = None if outcome.ok else (outcome.error_code or UNKNOWN_ERROR)
    call_fp, result_fp, error_fp = call_fingerprints(
        call.name, call.arguments, outcome.content, code, outcome.error_message
    )
    return ToolOutcome(
        call=call,
        ok=outcome.ok,
        content=outcome.content,
        value=outcome.value,
        error_code=code,
        error_message=outcome.error_message,
        transient=outcome.transient,
        attempts=outcome.attempts,
        idempotency_key=outcome.idempotency_key,
        arguments=outcome.arguments,
        fingerprint=call_fp,
        result_fingerprint=result_fp,
        error_fingerprint=error_fp,
    )


def _classified(failed: ToolOutcome) -> ToolOutcome:
    # A recorded failure as the detectors read it: its code (UNKNOWN_ERROR when it has none)
    # and message (the returned text when it has none); the record's other fields as they are.
    message = failed.error_message
    if message is None and isinstance(failed.content, str):
        message = failed.content
    return ToolOutcome(
        call=failed.call,
        ok=False,
        content=failed.content,
        error_code=failed.error_code or UNKNOWN_ERROR,
        error_message=message,
        attempts=failed.attempts,
        error_fingerprint=failed.error_fingerprint,
    )


def _events(
    steps: Iterable[RecordedStep],
    detectors: Detectors,
    on_stop: Callable[[Finding], bool],
    exempt_tools: Collection[str],
) -> None:
    before_call, after_call = detectors.before_call, detectors.after_call
    for step in steps:
        n = step.index
        for c in step.calls:
            call = c.call
            name = call.name
            raw = call.arguments
            args = raw if type(raw) is dict else comparable_arguments(raw)
            exempt = name in exempt_tools if exempt_tools else False
            found = before_call(name, args, n, exempt=exempt)
            if found is not None and on_stop(found):
                return
            if not c.ok and (not c.error_code or c.error_message is None):
                c = _classified(c)
            found = after_call(c, n, args, exempt)
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
    repeat_exempt: Collection[str] = (),
) -> Finding | None:
    """Feed recorded steps to the detectors in order; the first stop, or ``None``.

    The same objects and order the guard uses: for a run the guard stopped with a detector, the
    finding has the same reason and step. Budgets and the other stops are not replayed.
    ``repeat_exempt``: the tools the repeat detectors skip, as ``RunConfig.repeat_exempt``.
    """
    d = detectors or Detectors.for_limits(limits or LoopLimits())
    first: list[Finding] = []

    def stop(found: Finding) -> bool:
        first.append(found)
        return True

    _events(steps, d, stop, frozenset(repeat_exempt))
    return first[0] if first else None


def replay_peaks(
    steps: Iterable[RecordedStep],
    *,
    count_calls_only: bool = False,
    normalize: bool = True,
    repeat_exempt: Collection[str] = (),
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
    _events(steps, d, lambda found: False, frozenset(repeat_exempt))
    return d.peaks()
