"""The stuck-loop detectors (docs/runtime.md, "The detectors"), as objects fed one run's tool
calls and steps in order.

The :class:`LoopGuard` feeds them as a run goes; a replay of recorded steps (the store's tool
spans, an imported chat log, a test's script) feeds the same objects the same events
(:mod:`~loopwatch.instrumentation.runtime.replay`: ``replay``, ``replay_peaks``, ``RecordedStep``,
also importable from here), so a rule is written once and history is judged by the rule that
runs live.

Events, in order: :meth:`Detectors.before_call` (a call is about to run: the A,B,A,B cycle is
refused here), :meth:`Detectors.after_call` (its result is in: the one tool-call record,
``ToolOutcome``, with the step), :meth:`Detectors.end_step`.
Calls are compared by name and arguments with ``==`` and results as text, so a replay may pass
fingerprints in their place (equal fingerprints, equal calls). Each detector also keeps its
``peak`` — the highest evidence count it saw — which is what a replay over thresholds reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .arguments import comparable_arguments
from .detectorrules import (
    Detector,
    Finding,
    NoProgress,
    RepeatedAction,
    RepeatedError,
    RepeatedToolCall,
    ToolFailures,
)
from .fingerprint import (
    EXACT_TEXT_TOOLS,
    error_key,
    normalize_arguments,
    normalize_error,
    normalize_volatile,
)
from .limits import LoopLimits
from .reasons import StopReason
from .tally import NEW_RESULT, UNSET, CallEntry, CallTally, ToolEvent, arguments_key
from .toolspec import ToolOutcome

if TYPE_CHECKING:
    from .replay import RecordedCall, RecordedStep, replay, replay_peaks

__all__ = [
    "DETECTORS",
    "UNSET",
    "CallEntry",
    "CallTally",
    "Detector",
    "Detectors",
    "Finding",
    "NoProgress",
    "RecordedCall",
    "RecordedStep",
    "RepeatedAction",
    "RepeatedError",
    "RepeatedToolCall",
    "ToolEvent",
    "ToolFailures",
    "arguments_key",
    "comparable_arguments",
    "error_key",
    "normalize_error",
    "parse_arguments",
    "replay",
    "replay_peaks",
]

DETECTORS: tuple[StopReason, ...] = (
    StopReason.REPEATED_ACTION,
    StopReason.REPEATED_TOOL_CALL,
    StopReason.REPEATED_ERROR,
    StopReason.TOOL_FAILURES,
    StopReason.NO_PROGRESS,
)
"""The detectors' stop reasons, in the order they are asked about one result."""


# --- the five, in order -----------------------------------------------------------------------


def _arguments_key(name: str, arguments: Any) -> Any:
    return arguments if name in EXACT_TEXT_TOOLS else normalize_arguments(arguments)


class Detectors:
    """The five detectors of one run, asked in docs/runtime.md's order, sharing one (call, result)
    tally. ``None`` thresholds switch a detector off (its ``peak`` still counts)."""

    __slots__ = (
        "_normalize",
        "last_entry",
        "no_progress",
        "repeated_action",
        "repeated_error",
        "repeated_tool_call",
        "tally",
        "tool_failures",
    )

    def __init__(
        self,
        *,
        max_same_call: int | None = 3,
        max_same_error: int | None = 3,
        max_consecutive_failures: int | None = 3,
        max_idle_turns: int | None = 5,
        count_calls_only: bool = False,
        normalize: bool = True,
    ) -> None:
        # Volatile text (counters, times, temp paths) normalized in calls and results, except for
        # the tools compared exactly (runtime/fingerprint.py; docs/runtime.md).
        self._normalize = normalize
        self.tally = CallTally(normalize=normalize)
        self.last_entry: CallEntry | None = None
        """The (call, result) entry of the call last heard (``after_call``)."""
        self.repeated_action = RepeatedAction()
        if normalize:
            self.repeated_action.arguments_key = _arguments_key
        self.repeated_tool_call = RepeatedToolCall(
            max_same_call, count_calls_only=count_calls_only, normalize=normalize
        )
        self.repeated_error = RepeatedError(max_same_error)
        self.tool_failures = ToolFailures(max_consecutive_failures)
        self.no_progress = NoProgress(max_idle_turns)

    @classmethod
    def for_limits(cls, limits: LoopLimits) -> Detectors:
        """The detectors with ``limits``' thresholds."""
        return cls(
            max_same_call=limits.max_same_call,
            max_same_error=limits.max_same_error,
            max_consecutive_failures=limits.max_consecutive_failures,
            max_idle_turns=limits.max_idle_turns,
            count_calls_only=limits.count_calls_only,
        )

    @property
    def all(self) -> tuple[Detector, ...]:
        """The five detectors, in the order they are asked."""
        return (
            self.repeated_action,
            self.repeated_tool_call,
            self.repeated_error,
            self.tool_failures,
            self.no_progress,
        )

    def peaks(self) -> dict[str, int]:
        """Each detector's peak evidence count, by stop reason."""
        return {d.reason.value: d.peak for d in self.all}

    def before_call(
        self, name: str, arguments: Any, step: int, *, exempt: bool = False
    ) -> Finding | None:
        """A call is about to run: the cycle rule may refuse it."""
        if exempt:
            return None
        return self.repeated_action.before_call(name, arguments, step)

    def after_call(
        self,
        outcome: ToolOutcome,
        step: int,
        arguments: Any = UNSET,
        exempt: bool = False,
    ) -> Finding | None:
        """A call ran and its outcome is classified: the first detector that fires, if any.

        ``outcome`` is the call's record, classified as the guard classifies it (a failure has
        its ``error_code`` and message; a recorded ``error_fingerprint`` is the failure's
        identity), ``step`` the loop step, ``arguments`` the call's arguments as compared
        (default: ``comparable_arguments`` of ``outcome.call.arguments``), ``exempt``: the tool
        is repeat-exempt. Its (call, result) entry is :attr:`last_entry` afterwards."""
        call = outcome.call
        name = call.name
        if arguments is UNSET:
            arguments = comparable_arguments(call.arguments)
        # Results compared with their volatile text normalized (each new text once; the
        # arguments only when the result was seen before: CallTally). The record keeps the text.
        result = outcome.content
        if self._normalize and type(result) is str and name not in EXACT_TEXT_TOOLS:
            result = normalize_volatile(result)
        entry = self.last_entry = self.tally.add(name, arguments, result, step)
        if entry.count == 1:  # inlined NoProgress.after_call: this runs on every call
            novelty = entry.novelty
            if novelty == NEW_RESULT:
                self.no_progress.new_results += 1
            elif novelty:
                self.no_progress.new_calls += 1
        ra = self.repeated_action
        if entry.count == 1 and not exempt:
            # inlined RepeatedAction.after_call: a first occurrence repeats nothing
            ra.history.append(entry)
            ra.streak = 1
            a = None
        else:
            a = ra.after_call(outcome, step, arguments, entry, exempt)
        rtc = self.repeated_tool_call
        # A first occurrence cannot repeat: skip the call unless it could change the peak.
        if rtc.count_calls_only or entry.count > 1 or not rtc.peak:
            found = rtc.after_call(outcome, step, arguments, entry, exempt)
        else:
            found = None
        if a is not None:
            found = a
        if outcome.ok:
            if self.tool_failures.streak:
                self.tool_failures.after_call(outcome, step, arguments, entry, exempt)
            return found
        # Every detector hears the failure (so peaks stay right); the first finding wins.
        e = self.repeated_error.after_call(outcome, step, arguments, entry, exempt)
        f = self.tool_failures.after_call(outcome, step, arguments, entry, exempt)
        return found or e or f

    def end_step(self, step: int, progressed: bool | None = None) -> Finding | None:
        """The step is over: the idle-turn rule (``progressed``: the caller's signal)."""
        return self.no_progress.end_step(step, progressed)


parse_arguments = comparable_arguments
"""Deprecated: the old name of :func:`comparable_arguments`, kept importable (it was easy to
mistake for the one parser, ``runtime.arguments.parse_arguments``)."""


def __getattr__(name: str) -> Any:
    # The replay's names, kept importable from here: runtime/replay.py imports this module, so
    # they are looked up on first use.
    if name in ("RecordedCall", "RecordedStep", "replay", "replay_peaks"):
        from . import replay as replay_module

        return getattr(replay_module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
