"""One tool call on its way through the guard: admitted, run, classified, fed to the detectors,
logged and reported to the observer.

What the detectors hear of the call is a
:class:`~loopwatch.instrumentation.runtime.detectors.ToolEvent`: the same object is the run
log's trace entry, so a call is classified once (docs/runtime.md, "One classification of a
tool's outcome"). The observer and a progress signal get the one tool-call record,
:class:`~loopwatch.instrumentation.runtime.toolspec.ToolOutcome`: the registry's own when no
fingerprint is wanted, else one with the fingerprints filled in (docs/architecture.md, "One
tool call's record").
"""

from __future__ import annotations

from typing import Any

from .decisions import ToolOutcomeLike
from .detectors import Detectors, Finding, ToolEvent, comparable_arguments
from .fingerprint import call_fingerprint, error_fingerprint, result_fingerprint, short_hash
from .gates import ToolTable
from .outcomes import UNKNOWN_ERROR, tool_error
from .runlog import RunLog, StepState
from .toolspec import ToolOutcome
from .types import ToolCall

__all__ = ["CIRCUIT_OPEN", "ToolCallRecorder"]

CIRCUIT_OPEN = "CIRCUIT_OPEN"
"""The registry's error code for a call its circuit breaker refused."""


class ToolCallRecorder:
    """The guard's tool-call bookkeeping: the admitted call, and each call that ran."""

    __slots__ = (
        "_args",
        "_circuits",
        "_exempt",
        "_was_pending",
        "detectors",
        "fingerprint",
        "last_call",
        "last_call_step",
        "log",
        "pending",
        "tools",
    )

    def __init__(self, tools: ToolTable, detectors: Detectors, log: RunLog) -> None:
        self.tools = tools
        self.detectors = detectors
        self.log = log
        self.pending: ToolCall | None = None
        """The call ``before_tool`` let through, until its result is in."""
        self._args: Any = None
        self._exempt = False
        self._was_pending = False
        self.fingerprint = ""
        """The admitted call's fingerprint, when an observer wants it."""
        self.last_call: ToolCall | None = None
        self.last_call_step = 0
        self._circuits: set[str] = set()

    def circuit_seen(self, name: str) -> bool:
        """Whether ``name``'s open circuit was reported already (and note it now)."""
        if name in self._circuits:
            return True
        self._circuits.add(name)
        return False

    @staticmethod
    def arguments(call: ToolCall) -> Any:
        """The call's arguments as compared (``detectors.comparable_arguments``)."""
        args = call.arguments
        return args if type(args) is dict else comparable_arguments(args)

    def admit(self, call: ToolCall, args: Any, exempt: bool, *, fingerprint: bool) -> None:
        """``call`` passed the gates and is about to run."""
        self.pending = call
        self._args = args
        self._exempt = exempt
        if fingerprint:
            self.fingerprint = call_fingerprint(call)

    def ran(
        self,
        call: ToolCall,
        outcome: ToolOutcomeLike | str,
        error_code: str | None,
        retries: int,
        step: int,
        state: StepState | None,
    ) -> tuple[ToolEvent, Finding | None]:
        """The call's result is in: classify it, feed the detectors, log it."""
        was_pending = self._was_pending = self.pending is call
        self.pending = None
        name = call.name
        if was_pending:
            args, exempt = self._args, self._exempt
        else:
            args, exempt = self.arguments(call), self.tools[name].repeat_exempt
        message: str | None = None
        if isinstance(outcome, str):
            content = outcome
            if error_code is not None:
                code: str | None = error_code
                message = content
            else:
                err = tool_error(content, error_prefix=self.tools[name].error_prefix)
                code = None if err is None else err.code
                message = None if err is None else err.message
        else:
            content = outcome.content
            code = None if outcome.ok else (outcome.error_code or UNKNOWN_ERROR)
            if code is not None:
                message = getattr(outcome, "error_message", None) or content
            attempts = outcome.attempts
            retries = attempts - 1 if attempts > 1 else 0
        event = ToolEvent(step, name, args, content, code is None, code, message, exempt)
        event.call_id = call.id
        event.retries = retries
        found = self.detectors.after_call(event)
        if state is not None:
            if event.new_result:
                state.new_results += 1
            if event.new_call:
                state.new_calls += 1
        self.last_call = call
        self.last_call_step = step
        self.log.entries.append(event)
        return event, found

    def record(
        self, call: ToolCall, outcome: ToolOutcomeLike | str, event: ToolEvent, *, observed: bool
    ) -> ToolOutcome:
        """The observer's (and progress signal's) record of the call that just ran: the
        registry's own record when it gave one and no fingerprint is wanted; fingerprints only
        when ``observed``."""
        code = event.error_code
        if isinstance(outcome, str):
            attempts = event.retries + 1
        else:
            # the registry's record as it is, when it says all the guard would
            if (
                not observed
                and type(outcome) is ToolOutcome
                and outcome.call is call
                and outcome.error_code == code
            ):
                return outcome
            attempts = outcome.attempts
        return ToolOutcome(
            call=call,
            ok=event.ok,
            content=event.result,
            error_code=code,
            error_message=event.error_message,
            attempts=attempts,
            fingerprint=(self.fingerprint if self._was_pending else call_fingerprint(call))
            if observed
            else "",
            result_fingerprint=self._result_fingerprint(event) if observed else "",
            error_fingerprint=error_fingerprint(call.name, code, event.error_message or "")
            if (code and observed)
            else None,
        )

    def _result_fingerprint(self, event: ToolEvent) -> str:
        # The detectors' (call, result) record holds the result as compared (volatile text
        # normalized unless the tool compares exactly): the fingerprint's text, not worked out
        # again.
        entry = event.entry
        if entry is not None and type(entry.result) is str and type(event.result) is str:
            return short_hash(entry.result)
        return result_fingerprint(event.result, event.name)

    def interrupted(self, call: ToolCall, step: int) -> ToolOutcome:
        """``call`` was cut off at the deadline: logged as a ``TIMEOUT`` failure."""
        self.pending = None
        detail = {
            "tool": call.name,
            "call_id": call.id,
            "status": "error",
            "error_code": "TIMEOUT",
            "retries": 0,
        }
        self.log.add(step, "tool", detail)
        return ToolOutcome(
            call=call,
            ok=False,
            content="",
            error_code="TIMEOUT",
            fingerprint=call_fingerprint(call),
            error_fingerprint=error_fingerprint(call.name, "TIMEOUT"),
        )
