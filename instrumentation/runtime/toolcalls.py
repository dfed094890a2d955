"""One tool call on its way through the guard: admitted, run, classified, fed to the detectors,
logged and reported to the observer.

Everything hears the one tool-call record,
:class:`~loopwatch.instrumentation.runtime.toolspec.ToolOutcome` (docs/architecture.md, "One
tool call's record"): the detectors and the run log's trace get it classified once
(docs/runtime.md, "One classification of a tool's outcome"), which is the registry's own record
in the usual case; the observer and a progress signal get the registry's own when no
fingerprint is wanted, else one with the fingerprints filled in.
"""

from __future__ import annotations

from typing import Any

from .decisions import ToolOutcomeLike
from .detectors import Detectors, Finding, comparable_arguments
from .fingerprint import call_fingerprint, error_fingerprint, result_fingerprint, short_hash
from .gates import ToolTable
from .outcomes import UNKNOWN_ERROR, tool_error
from .runlog import RunLog, StepState
from .tally import NEW_RESULT
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
    ) -> tuple[ToolOutcome, Finding | None]:
        """The call's result is in: classify it, feed the detectors, log it, and count what it
        brought on ``state`` (when a progress signal will read it). Returns the classified
        record (the registry's own when it is classified already) and the finding."""
        was_pending = self._was_pending = self.pending is call
        self.pending = None
        if was_pending:
            args, exempt = self._args, self._exempt
        else:
            args, exempt = self.arguments(call), self.tools[call.name].repeat_exempt
        # The registry's record is fed as it is when it says all the detectors read: no code on
        # a success; a failure's code and message, and no fingerprint of its own (docs/runtime.md,
        # "One classification of a tool's outcome").
        if (
            type(outcome) is ToolOutcome
            and outcome.call is call
            and (
                outcome.error_code is None
                if outcome.ok
                else (outcome.error_fingerprint is None and bool(outcome.error_code))
                and bool(outcome.error_message)
            )
        ):
            classified = outcome
        else:
            classified = self.classified(call, outcome, error_code, retries)
        detectors = self.detectors
        found = detectors.after_call(classified, step, args, exempt)
        if state is not None:
            entry = detectors.last_entry
            assert entry is not None
            if entry.count == 1 and entry.novelty:
                if entry.novelty == NEW_RESULT:
                    state.new_results += 1
                else:
                    state.new_calls += 1
        self.last_call = call
        self.last_call_step = step
        self.log.entries.append((step, classified))
        return classified, found

    def classified(
        self, call: ToolCall, outcome: ToolOutcomeLike | str, error_code: str | None, retries: int
    ) -> ToolOutcome:
        """``outcome`` as the detectors and the trace read it: a failure has its code
        (``UNKNOWN_ERROR`` when it gave none) and message (the text handed back when it gave
        none); a text outcome is classified as everywhere else (``outcomes.tool_error``)."""
        message: str | None = None
        if isinstance(outcome, str):
            content = outcome
            if error_code is not None:
                code: str | None = error_code
                message = content
            else:
                err = tool_error(content, error_prefix=self.tools[call.name].error_prefix)
                code = None if err is None else err.code
                message = None if err is None else err.message
            attempts = retries + 1
        else:
            content = outcome.content
            code = None if outcome.ok else (outcome.error_code or UNKNOWN_ERROR)
            if code is not None:
                message = getattr(outcome, "error_message", None) or content
            attempts = outcome.attempts
        return ToolOutcome(
            call=call,
            ok=code is None,
            content=content,
            error_code=code,
            error_message=message,
            attempts=attempts,
        )

    def record(
        self,
        call: ToolCall,
        outcome: ToolOutcomeLike | str,
        classified: ToolOutcome,
        *,
        observed: bool,
    ) -> ToolOutcome:
        """The observer's (and progress signal's) record of the call that just ran: the
        registry's own record when it gave one and no fingerprint is wanted; fingerprints only
        when ``observed``."""
        code = classified.error_code
        if not observed:
            # the registry's record as it is, when it says all the guard would
            if type(outcome) is ToolOutcome:
                if outcome.call is call and outcome.error_code == code:
                    return outcome
            elif isinstance(outcome, str):
                return classified  # built for this call: nothing to add
        message = classified.error_message if code is not None else None
        return ToolOutcome(
            call=call,
            ok=classified.ok,
            content=classified.content,
            error_code=code,
            error_message=message,
            attempts=classified.attempts if isinstance(outcome, str) else outcome.attempts,
            fingerprint=(self.fingerprint if self._was_pending else call_fingerprint(call))
            if observed
            else "",
            result_fingerprint=self._result_fingerprint(classified) if observed else "",
            error_fingerprint=error_fingerprint(call.name, code, message or "")
            if (code and observed)
            else None,
        )

    def _result_fingerprint(self, outcome: ToolOutcome) -> str:
        # The detectors' (call, result) record holds the result as compared (volatile text
        # normalized unless the tool compares exactly): the fingerprint's text, not worked out
        # again.
        entry = self.detectors.last_entry
        if entry is not None and type(entry.result) is str and type(outcome.content) is str:
            return short_hash(entry.result)
        return result_fingerprint(outcome.content, outcome.call.name)

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
