"""Shadow limits: a silent guard under candidate limits, fed the events the real guard hears.

The real guard hands each event the loop sends it (start, before_step, after_model,
before_tool, after_tool, end_step) to a :class:`ShadowGuard` first; whatever the candidate
decides is recorded, never obeyed, and an error in it is counted, never raised
(docs/runtime.md, "Shadow limits").
"""

from __future__ import annotations

from typing import Any, Protocol

from .decisions import Decision, ToolOutcomeLike
from .drops import record_drop
from .limits import LoopLimits
from .reasons import StopReason
from .types import Message, ModelResponse, ToolCall

__all__ = ["SAVED_BUDGETS", "ShadowGuard", "ShadowedEvents"]

SAVED_BUDGETS = ("steps", "model_calls", "tool_calls", "tokens", "cost_usd")
"""What a shadow stop reports as saved: usage the run spent past that point."""


class ShadowedEvents(Protocol):
    """The events a shadow hears (``LoopGuard`` fits)."""

    @property
    def decision(self) -> Decision | None: ...
    @property
    def steps(self) -> int: ...

    def counters(self) -> dict[str, float]: ...
    def start(self, messages: list[Message] | None = None) -> None: ...
    def before_step(self) -> Decision: ...
    def after_model(self, response: ModelResponse) -> Decision: ...
    def before_tool(self, call: ToolCall) -> Decision: ...
    def after_tool(
        self,
        call: ToolCall,
        outcome: ToolOutcomeLike | str,
        *,
        error_code: str | None = None,
        retries: int = 0,
    ) -> Decision: ...
    def end_step(self) -> Decision: ...


class ShadowGuard:
    """Wraps the candidate guard: every event is passed on and any error swallowed."""

    __slots__ = ("guard", "limits")

    def __init__(self, guard: ShadowedEvents, limits: LoopLimits) -> None:
        self.guard = guard
        self.limits = limits

    def _safely(self, method: str, *args: Any, **kwargs: Any) -> None:
        try:
            getattr(self.guard, method)(*args, **kwargs)
        except Exception:
            record_drop("shadow_error")  # a candidate never breaks the run it watches

    def start(self, messages: list[Message] | None = None) -> None:
        self._safely("start", messages)

    def before_step(self) -> None:
        self._safely("before_step")

    def after_model(self, response: ModelResponse) -> None:
        self._safely("after_model", response)

    def before_tool(self, call: ToolCall) -> None:
        self._safely("before_tool", call)

    def after_tool(self, call: ToolCall, outcome: Any, **kwargs: Any) -> None:
        self._safely("after_tool", call, outcome, **kwargs)

    def end_step(self) -> None:
        self._safely("end_step")

    def result(self, used: dict[str, float], steps: int) -> dict[str, Any]:
        """Where the candidate limits would have stopped the run (``LoopGuard.shadow_result``);
        ``used`` and ``steps`` are the real run's."""
        shadow = self.guard
        d = shadow.decision
        out: dict[str, Any] = {"limits_version": self.limits.version}
        if d is None or d.reason is None or d.reason is StopReason.COMPLETED:
            out.update(stop_reason="finish", step=steps, explanation="")
            return out
        at = shadow.counters()
        out.update(
            stop_reason=d.reason.value,
            step=shadow.steps,
            explanation=d.explanation,
            saved={b: max(float(used[b]) - float(at[b]), 0.0) for b in SAVED_BUDGETS},
        )
        return out
