"""How a run ends well, or says why not: the provider's stop signal, the done tool's answer,
the completion check, and the stop an exception stands for (docs/runtime.md, "Completion")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import explain
from .decisions import Verifier
from .detectors import comparable_arguments
from .fingerprint import stable_json
from .reasons import ProviderSignal, StopReason, classify_provider_stop
from .types import RunResult, ToolCall

__all__ = ["SIGNALS", "CompletionCheck", "done_answer", "provider_signal", "stop_reason_of"]

SIGNALS: dict[str | None, ProviderSignal] = {}
"""Provider stop values classified so far; read it first (``SIGNALS.get(v) or
provider_signal(v)``)."""


def provider_signal(value: str | None) -> ProviderSignal:
    """The provider's stop/finish reason classified (cached: a small vocabulary)."""
    signal = SIGNALS.get(value)
    if signal is None:
        signal = classify_provider_stop(value)
        if len(SIGNALS) < 256:  # bounded: provider values are a small vocabulary
            SIGNALS[value] = signal
    return signal


def stop_reason_of(error: BaseException) -> StopReason:
    """The stop an exception stands for: its ``stop_reason`` attribute when that names a stop
    reason other than ``completed`` (a model client raising for its open circuit breaker sets
    ``circuit_open``), else ``error``."""
    value = getattr(error, "stop_reason", None)
    try:
        reason = StopReason(value) if value is not None else StopReason.ERROR
    except ValueError:
        return StopReason.ERROR
    return StopReason.ERROR if reason is StopReason.COMPLETED else reason


def done_answer(call: ToolCall) -> str:
    """The answer a call of the done tool carries: its ``answer`` argument, else its arguments
    (text as it is, anything else as stable JSON)."""
    parsed = comparable_arguments(call.arguments)
    if isinstance(parsed, Mapping) and isinstance(parsed.get("answer"), str):
        return str(parsed["answer"])
    if isinstance(parsed, str):
        return parsed
    return stable_json(parsed)


class CompletionCheck:
    """The caller's completion check and the rejections so far."""

    __slots__ = ("max_rejects", "rejects", "verify")

    def __init__(self, verify: Verifier | None, max_rejects: int | None) -> None:
        self.verify = verify
        self.max_rejects = max_rejects
        self.rejects = 0

    def unmet(self, candidate: RunResult) -> list[str]:
        """The unmet criteria (counts a rejection when there are any); the check's exception
        propagates to the guard, which stops with ``error``."""
        assert self.verify is not None
        unmet = [str(u) for u in self.verify(candidate)]
        if unmet:
            self.rejects += 1
        return unmet

    def exhausted(self) -> bool:
        """The last rejection reached ``max_completion_rejects``."""
        return self.max_rejects is not None and self.rejects >= self.max_rejects

    def stop_text(self, step: int, unmet: list[str]) -> str:
        assert self.max_rejects is not None
        return explain.stopped(
            step, explain.completion_rejected(self.rejects, self.max_rejects, unmet)
        )

    @staticmethod
    def feedback(unmet: list[str]) -> str:
        """What the model is told about unmet criteria."""
        return (
            "The task is not complete yet. Still unmet:\n"
            + "\n".join(f"- {u}" for u in unmet)
            + "\nKeep working on these, then answer again."
        )


def rejection_event(unmet: list[str], rejects: int) -> dict[str, Any]:
    """The ``loopwatch.completion.rejected`` event's attributes."""
    return {"loopwatch.completion.unmet": unmet, "loopwatch.completion.rejects": rejects}
