"""Exceptions of the runtime: a run that stopped for a reason other than success, and guard misuse.

``AgentLoopError(reason, result)`` is what :func:`~loopwatch.instrumentation.run` raises on a
non-success stop (as in seed 000). Its subclasses group reasons by outcome so callers can catch
what they handle, e.g. ``except LimitReached`` to resume with a bigger budget.
"""

from __future__ import annotations

from .reasons import Outcome, StopReason
from .types import RunResult

__all__ = [
    "AgentLoopError",
    "AgentStuck",
    "LimitReached",
    "ModelStopped",
    "RunFailed",
    "RunInterrupted",
]


class AgentLoopError(RuntimeError):
    """A run ended without success. ``reason`` is the stop reason, ``result`` the partial result."""

    reason: StopReason
    result: RunResult

    def __init__(self, reason: StopReason | str, result: RunResult) -> None:
        super().__init__(reason, result)
        self.reason = StopReason(reason)
        self.result = result

    def __str__(self) -> str:
        if self.result.explanation:
            return f"{self.reason.value}: {self.result.explanation}"
        return self.reason.value

    @property
    def outcome(self) -> Outcome:
        return self.reason.outcome

    @staticmethod
    def for_result(result: RunResult) -> AgentLoopError:
        """The exception of the right subclass for a stopped ``result``."""
        cls = _BY_OUTCOME.get(result.outcome, AgentLoopError)
        return cls(result.stop_reason, result)


class LimitReached(AgentLoopError):
    """A budget ran out: steps, model or tool calls, tokens, cost or wall clock."""


class AgentStuck(AgentLoopError):
    """No progress: repeats, repeated errors, failures, idle turns, rejected completions."""


class ModelStopped(AgentLoopError):
    """The provider ended the turn: output truncated, or refused."""


class RunInterrupted(AgentLoopError):
    """Cancelled by the caller, an approval refused, or a guardrail tripped."""


class RunFailed(AgentLoopError):
    """A circuit breaker was open, or something raised unexpectedly."""


_BY_OUTCOME: dict[Outcome, type[AgentLoopError]] = {
    Outcome.LIMIT: LimitReached,
    Outcome.STUCK: AgentStuck,
    Outcome.MODEL: ModelStopped,
    Outcome.INTERRUPTED: RunInterrupted,
    Outcome.ERROR: RunFailed,
}
