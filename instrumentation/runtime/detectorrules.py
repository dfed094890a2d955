"""The five stuck-loop detectors, each an object fed one run's tool calls and steps in order,
and the :class:`Finding` one stops with (docs/runtime.md, "The detectors").

:class:`~loopwatch.instrumentation.runtime.detectors.Detectors` holds the five in their order and
feeds them; a detector's ``after_call`` reads the one tool-call record, ``ToolOutcome``, with the
step, the arguments as compared and the call's (call, result) entry in the run's tally.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .explain import advice, describe, preview, step_list
from .fingerprint import error_key
from .reasons import StopReason
from .tally import NEW_RESULT, CallEntry, CallTally, arguments_key
from .toolspec import ToolOutcome

__all__ = [
    "Detector",
    "Finding",
    "NoProgress",
    "RepeatedAction",
    "RepeatedError",
    "RepeatedToolCall",
    "ToolFailures",
]


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

    def after_call(
        self, outcome: ToolOutcome, step: int, arguments: Any, entry: CallEntry, exempt: bool
    ) -> Finding | None:
        """A call ran: ``outcome`` is its record, classified (a failure has its ``error_code``
        and message), ``step`` the loop step, ``arguments`` the call's arguments as compared
        (``comparable_arguments``), ``entry`` its (call, result) in the run's tally (its
        ``new_result``/``new_call`` say what the call brought), ``exempt``: the tool is
        repeat-exempt."""
        ...


class RepeatedAction:
    """``repeated_action``: a call that repeats the one just before it with the same result,
    or a short cycle A,B,A,B whose repeat of A brought the same result as before.

    The adjacent repeat is judged on its result (after it ran): ``cd('..')`` twice climbs two
    folders and is not a loop. The cycle is refused before the second B runs.
    """

    reason = StopReason.REPEATED_ACTION
    __slots__ = ("arguments_key", "history", "peak", "streak")

    def __init__(self) -> None:
        self.arguments_key: Callable[[str, Any], Any] | None = None
        """How arguments are compared (set by :class:`Detectors`: volatile text normalized)."""
        self.history: deque[CallEntry | None] = deque((None, None, None), maxlen=3)
        """The (call, result) entries of the last three calls run, oldest first (``None``: an
        exempt call, or none yet); the last is the one a repeat is compared with."""
        self.streak = 0
        """How many times in a row the last (call, result) occurred."""
        self.peak = 0
        """The longest such streak (2 = the rule's stop), or 2 once a cycle was seen."""

    def before_call(self, name: str, arguments: Any, step: int) -> Finding | None:
        """A,B,A then B: a cycle, when the repeat of A brought the same result as before."""
        h = self.history
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

    def after_call(
        self, outcome: ToolOutcome, step: int, arguments: Any, entry: CallEntry, exempt: bool
    ) -> Finding | None:
        history = self.history
        if exempt:
            history.append(None)
            self.streak = 0
            return None
        repeated = entry is history[2]
        history.append(entry)
        if repeated:
            self.streak += 1
        else:
            self.streak = 1
            return None
        if self.streak > self.peak:
            self.peak = self.streak
        return Finding(
            self.reason,
            step,
            f"{describe(entry.name, arguments)} repeated the call just before it and "
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

    def after_call(
        self, outcome: ToolOutcome, step: int, arguments: Any, entry: CallEntry, exempt: bool
    ) -> Finding | None:
        name = entry.name
        if self.count_calls_only:  # the call alone: its name stands for the result
            entry = self._calls.add(name, arguments, name, step)
        if exempt:
            return None
        same = entry.count
        if same > self.peak:
            self.peak = same
        limit = self.limit
        if limit is None or same < limit:
            return None
        if self.count_calls_only:
            what = f"was called {same} times"
        elif outcome.ok:
            what = f"returned the same result {same} times ({_result_text(entry.result)})"
        else:
            what = f"returned {outcome.error_code} {same} times"
        return Finding(
            self.reason,
            step,
            f"{describe(name, arguments)} {what} (steps {step_list(entry.steps)}).",
            code=None if outcome.ok else outcome.error_code,
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

    def after_call(
        self, outcome: ToolOutcome, step: int, arguments: Any, entry: CallEntry, exempt: bool
    ) -> Finding | None:
        """A failure's identity is the record's ``error_fingerprint`` when it has one (a
        replay's), else :func:`error_key` of tool, code and message."""
        if outcome.ok:
            return None
        name, code, message = entry.name, outcome.error_code, outcome.error_message
        key = outcome.error_fingerprint
        if key is None:
            key = error_key(name, code, message)
        steps = self._counts.get(key)
        if steps is None:
            steps = self._counts[key] = []
        steps.append(step)
        n = len(steps)
        if n > self.peak:
            self.peak = n
        limit = self.limit
        if limit is None or n < limit:
            return None
        said = f": {preview(message, 100)}" if message else ""
        return Finding(
            self.reason,
            step,
            f"{name} failed {n} times with the same error, {code}{said} "
            f"(steps {step_list(steps)}), last for {describe(name, arguments)}.",
            code=code,
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

    def after_call(
        self, outcome: ToolOutcome, step: int, arguments: Any, entry: CallEntry, exempt: bool
    ) -> Finding | None:
        if outcome.ok:
            if self.streak:
                self.streak = 0
                self._steps = []
            return None
        self.streak += 1
        self._steps.append(step)
        if self.streak > self.peak:
            self.peak = self.streak
        limit = self.limit
        if limit is None or self.streak < limit:
            return None
        message = outcome.error_message
        said = f": {preview(message, 100)}" if message else ""
        return Finding(
            self.reason,
            step,
            f"{self.streak} tool calls in a row failed (steps {step_list(self._steps)}), the "
            f"last {describe(entry.name, arguments)} with {outcome.error_code}{said}.",
            code=outcome.error_code,
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

    def after_call(
        self, outcome: ToolOutcome, step: int, arguments: Any, entry: CallEntry, exempt: bool
    ) -> Finding | None:
        if entry.count == 1 and entry.novelty:  # what the call brought (the tally says)
            if entry.novelty == NEW_RESULT:
                self.new_results += 1
            else:
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
