"""The stuck-loop detectors (docs/runtime.md, "The detectors"), as objects fed one run's tool
calls and steps in order.

The :class:`LoopGuard` feeds them as a run goes; a replay of recorded steps (the store's tool
spans, an imported chat log, a test's script) feeds the same objects the same events
(:mod:`~loopwatch.instrumentation.runtime.replay`: ``replay``, ``replay_peaks``, ``RecordedStep``,
also importable from here), so a rule is written once and history is judged by the rule that
runs live.

Events, in order: :meth:`Detectors.before_call` (a call is about to run: the A,B,A,B cycle is
refused here), :meth:`Detectors.after_call` (its result is in), :meth:`Detectors.end_step`.
Calls are compared by name and arguments with ``==`` and results as text, so a replay may pass
fingerprints in their place (equal fingerprints, equal calls). Each detector also keeps its
``peak`` — the highest evidence count it saw — which is what a replay over thresholds reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .arguments import comparable_arguments
from .explain import advice, describe, preview, step_list
from .fingerprint import (
    EXACT_TEXT_TOOLS,
    error_key,
    normalize_arguments,
    normalize_error,
    normalize_volatile,
)
from .limits import LoopLimits
from .reasons import StopReason
from .tally import UNSET, CallEntry, CallTally, ToolEvent, arguments_key

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


# --- findings ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """A detector's stop: the reason, the step, and the evidence in words."""

    reason: StopReason
    step: int
    """The step the stop happened in."""
    evidence: str
    """What the detector saw, without the ``Stopped at step N:`` lead."""
    code: str | None = None
    """The error code involved, if any (picks the advice)."""
    before_call: bool = False
    """The call named was refused before it ran."""

    @property
    def explanation(self) -> str:
        """``Stopped at step N: <evidence> <advice>``."""
        tip = advice(self.reason, self.code)
        return f"Stopped at step {self.step}: {self.evidence}" + (f" {tip}" if tip else "")


# --- the detectors ----------------------------------------------------------------------------


class Detector(Protocol):
    """One detector: told of every call and step of a run, in order; says when to stop."""

    reason: StopReason
    """The stop reason it stops with."""
    peak: int
    """The highest evidence count seen so far (compared with a threshold by a replay)."""

    def after_call(self, event: ToolEvent) -> Finding | None: ...


class RepeatedAction:
    """``repeated_action``: a call that repeats the one just before it with the same result,
    or a short cycle A,B,A,B whose repeat of A brought the same result as before.

    The adjacent repeat is judged on its result (after it ran): ``cd('..')`` twice climbs two
    folders and is not a loop. The cycle is refused before the second B runs.
    """

    reason = StopReason.REPEATED_ACTION
    __slots__ = ("_history", "_last", "arguments_key", "peak", "streak")

    def __init__(self) -> None:
        self.arguments_key: Callable[[str, Any], Any] | None = None
        """How arguments are compared (set by :class:`Detectors`: volatile text normalized)."""
        self._last: CallEntry | None = None  # of the last call run (None: it was exempt)
        self._history: deque[CallEntry | None] = deque((None, None, None), maxlen=3)
        self.streak = 0
        """How many times in a row the last (call, result) occurred."""
        self.peak = 0
        """The longest such streak (2 = the rule's stop), or 2 once a cycle was seen."""

    def before_call(self, name: str, arguments: Any, step: int) -> Finding | None:
        """A,B,A then B: a cycle, when the repeat of A brought the same result as before."""
        h = self._history
        a = h[0]
        b = h[1]
        if (
            a is not None
            and a is h[2]
            and b is not None
            and b.name == name
            and (b.arguments == arguments or self._same_arguments(b, name, arguments))
        ):
            if self.peak < 2:
                self.peak = 2
            return Finding(
                self.reason,
                step,
                f"{describe(name, arguments)} would complete a cycle A,B,A,B with "
                f"A = {describe(a.name, a.arguments)}; the repeat of A returned the same "
                f"result as before ({_result_text(a.result)}, steps "
                f"{step_list(a.steps[-2:])}), so the cycle makes no progress.",
                before_call=True,
            )
        return None

    def _same_arguments(self, b: CallEntry, name: str, arguments: Any) -> bool:
        norm = self.arguments_key
        return norm is not None and bool(arguments_key(b) == norm(name, arguments))

    def after_call(self, event: ToolEvent) -> Finding | None:
        entry = event.entry
        if event.exempt or entry is None:
            self._history.append(None)
            self._last = None
            self.streak = 0
            return None
        self._history.append(entry)
        if entry is self._last:
            self.streak += 1
        else:
            self._last = entry
            self.streak = 1
            return None
        if self.streak > self.peak:
            self.peak = self.streak
        return Finding(
            self.reason,
            event.step,
            f"{describe(event.name, event.arguments)} repeated the call just before it and "
            f"returned the same result both times ({_result_text(entry.result)}; steps "
            f"{step_list(entry.steps[-2:])}).",
        )


class RepeatedToolCall:
    """``repeated_tool_call``: one (call, result) occurred ``limit`` times in the run.

    With ``count_calls_only`` the call alone is counted, whatever it returned.
    """

    reason = StopReason.REPEATED_TOOL_CALL
    __slots__ = ("_calls", "count_calls_only", "limit", "peak")

    def __init__(
        self, limit: int | None, *, count_calls_only: bool = False, normalize: bool = False
    ) -> None:
        self.limit = limit
        self.count_calls_only = count_calls_only
        self._calls = CallTally(normalize=normalize)  # count_calls_only: results left out
        self.peak = 0

    def after_call(self, event: ToolEvent) -> Finding | None:
        entry = event.entry
        if self.count_calls_only:
            counted = ToolEvent(event.step, event.name, event.arguments, event.name, key=event.key)
            entry = self._calls.add(counted)
            event.key = counted.key
        if event.exempt or entry is None:
            return None
        same = entry.count
        if same > self.peak:
            self.peak = same
        limit = self.limit
        if limit is None or same < limit:
            return None
        if self.count_calls_only:
            what = f"was called {same} times"
        elif event.ok:
            what = f"returned the same result {same} times ({_result_text(entry.result)})"
        else:
            what = f"returned {event.error_code} {same} times"
        return Finding(
            self.reason,
            event.step,
            f"{describe(event.name, event.arguments)} {what} (steps {step_list(entry.steps)}).",
            code=None if event.ok else event.error_code,
        )


class RepeatedError:
    """``repeated_error``: one error — tool, code and normalized message — ``limit`` times.

    Three different errors from one tool, each fixed in turn, are three errors, not one.
    """

    reason = StopReason.REPEATED_ERROR
    __slots__ = ("_counts", "limit", "peak")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._counts: dict[str, list[int]] = {}  # error id -> its steps
        self.peak = 0

    def after_call(self, event: ToolEvent) -> Finding | None:
        if event.ok:
            return None
        key = event.error_id
        if key is None:
            key = event.error_id = error_key(event.name, event.error_code, event.error_message)
        steps = self._counts.get(key)
        if steps is None:
            steps = self._counts[key] = []
        steps.append(event.step)
        n = len(steps)
        if n > self.peak:
            self.peak = n
        limit = self.limit
        if limit is None or n < limit:
            return None
        message = event.error_message
        said = f": {preview(message, 100)}" if message else ""
        return Finding(
            self.reason,
            event.step,
            f"{event.name} failed {n} times with the same error, {event.error_code}{said} "
            f"(steps {step_list(steps)}), last for {describe(event.name, event.arguments)}.",
            code=event.error_code,
        )


class ToolFailures:
    """``tool_failures``: ``limit`` tool results in a row were failures; a success resets it."""

    reason = StopReason.TOOL_FAILURES
    __slots__ = ("_steps", "limit", "peak", "streak")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.streak = 0
        self._steps: list[int] = []
        self.peak = 0

    def after_call(self, event: ToolEvent) -> Finding | None:
        if event.ok:
            if self.streak:
                self.streak = 0
                self._steps = []
            return None
        self.streak += 1
        self._steps.append(event.step)
        if self.streak > self.peak:
            self.peak = self.streak
        limit = self.limit
        if limit is None or self.streak < limit:
            return None
        message = event.error_message
        said = f": {preview(message, 100)}" if message else ""
        return Finding(
            self.reason,
            event.step,
            f"{self.streak} tool calls in a row failed (steps {step_list(self._steps)}), the "
            f"last {describe(event.name, event.arguments)} with {event.error_code}{said}.",
            code=event.error_code,
        )


class NoProgress:
    """``no_progress``: ``limit`` steps in a row brought nothing new.

    A step makes progress when it makes a call not made before in the run or gets a result not
    seen before (seven writes of seven files acknowledged ``ok`` are progress); a step without
    tool calls makes none. A caller's progress signal overrides both.
    """

    reason = StopReason.NO_PROGRESS
    __slots__ = ("_idle_steps", "limit", "new_calls", "new_results", "peak", "streak")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.new_results = 0
        """Results new to the run in the current step."""
        self.new_calls = 0
        """Calls new to the run in the current step."""
        self.streak = 0
        self._idle_steps: list[int] = []
        self.peak = 0

    def after_call(self, event: ToolEvent) -> Finding | None:
        if event.new_result:
            self.new_results += 1
        if event.new_call:
            self.new_calls += 1
        return None

    def end_step(self, step: int, progressed: bool | None = None) -> Finding | None:
        """Close ``step``; ``progressed`` is the caller's signal (``None``: the default rule)."""
        custom = progressed is not None
        if self.new_results or self.new_calls:
            if not custom:
                progressed = True
            self.new_results = self.new_calls = 0
        if progressed:
            if self.streak:
                self.streak = 0
                self._idle_steps = []
            return None
        self.streak += 1
        self._idle_steps.append(step)
        if self.streak > self.peak:
            self.peak = self.streak
        limit = self.limit
        if limit is None or self.streak < limit:
            return None
        what = (
            "made no progress by the run's progress signal"
            if custom
            else "made no call not made before and got no result not seen before"
        )
        return Finding(
            self.reason,
            step,
            f"{self.streak} steps in a row (steps {step_list(self._idle_steps)}) {what} "
            f"(max_idle_turns={limit}).",
        )


def _result_text(result: Any) -> str:
    return preview(result) if isinstance(result, str) else repr(result)


# --- the five, in order -----------------------------------------------------------------------


def _arguments_key(name: str, arguments: Any) -> Any:
    return arguments if name in EXACT_TEXT_TOOLS else normalize_arguments(arguments)


class Detectors:
    """The five detectors of one run, asked in docs/runtime.md's order, sharing one (call, result)
    tally. ``None`` thresholds switch a detector off (its ``peak`` still counts)."""

    __slots__ = (
        "_normalize",
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

    def after_call(self, event: ToolEvent) -> Finding | None:
        """A call ran and its outcome is classified: the first detector that fires, if any."""
        # Results compared with their volatile text normalized (each new text once; the
        # arguments only when the result was seen before: CallTally). The event keeps the text.
        result = event.result
        if self._normalize and type(result) is str and event.name not in EXACT_TEXT_TOOLS:
            result = normalize_volatile(result)
        self.tally.add(event, result)
        np = self.no_progress  # inlined NoProgress.after_call: this runs on every call
        if event.new_result:
            np.new_results += 1
        elif event.new_call:
            np.new_calls += 1
        a = self.repeated_action.after_call(event)
        rtc = self.repeated_tool_call
        # A first occurrence cannot repeat: skip the call unless it could change the peak.
        if rtc.count_calls_only or event.entry.count > 1 or not rtc.peak:  # type: ignore[union-attr]
            found = rtc.after_call(event)
        else:
            found = None
        if a is not None:
            found = a
        if event.ok:
            if self.tool_failures.streak:
                self.tool_failures.after_call(event)
            return found
        # Every detector hears the failure (so peaks stay right); the first finding wins.
        e = self.repeated_error.after_call(event)
        f = self.tool_failures.after_call(event)
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
