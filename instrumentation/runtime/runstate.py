"""What a run's guard knows at any moment, for the loop, the observer and the guard itself.

:class:`RunState` is the reading side of :class:`~loopwatch.instrumentation.LoopGuard`:
usage, counters, budget snapshots, the deadline, and the observer notifications (an observer
that raises is counted as ``observer_error`` and ignored: telemetry never breaks the run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import semconv
from .budgets import BudgetAccount, SoftWarnings
from .completion import CompletionCheck
from .config import RunConfig
from .decisions import Decision
from .detectors import Detectors
from .drops import record_drop
from .escalation import Escalation, Nudge
from .gates import BudgetGate, CancelGate, Gate, ToolTable
from .limits import LoopLimits
from .observer import (
    NOOP_OBSERVER,
    BudgetSnapshot,
    RunInfo,
    RunObserver,
    get_observer_factory,
    observer_for,
)
from .reasons import StopReason
from .runlog import RunLog, StepState
from .shadow import ShadowGuard
from .toolcalls import ToolCallRecorder
from .types import Message, RunResult, Step, Usage
from .usage import RunUsage

if TYPE_CHECKING:
    from .guard import LoopGuard

__all__ = ["RunState"]


class RunState:
    """The guard's state and what can be read from it (the fields are set by ``LoopGuard``)."""

    config: RunConfig
    limits: LoopLimits
    task_type: str
    agent_name: str
    run_id: str
    conversation_id: str | None
    provider: str | None
    parent: LoopGuard | None
    clock: Callable[[], float]
    run_usage: RunUsage
    account: BudgetAccount
    steps: int
    started_at: float | None
    tools: ToolTable
    detectors: Detectors
    escalation: Escalation
    gates: tuple[Gate, ...]
    log: RunLog
    shadow_limits: LoopLimits | None
    _ancestors: tuple[LoopGuard, ...]
    _max_steps: int | None
    _timed: bool
    _cancel: CancelGate | None
    _budgets: BudgetGate | None
    _limit_map: Mapping[str, float | None]
    _limits_on: tuple[tuple[str, float | None], ...]
    _warnings: SoftWarnings
    _ended_at: float | None
    _calls: ToolCallRecorder
    _completion: CompletionCheck
    _step: StepState | None
    _spare_step: StepState
    _checked: int
    _checked_spent: int
    _model_started: bool
    _started: bool
    _messages: list[Message] | None
    _decision: Decision | None
    _final: str | None
    _last_text: str | None
    _result: RunResult | None
    _nudge: str | None
    _observer: RunObserver
    _observing: bool
    _shadow: ShadowGuard | None

    def _fresh_state(self) -> None:
        # What changes as the run goes; LoopGuard sets its parts first.
        self.steps = 0
        """Steps started."""
        self.started_at = None
        self._ended_at = None
        self._step = None
        self._spare_step = StepState(0)  # reused: one step is open at a time
        self._checked, self._checked_spent = -1, 0  # when end_step last let a step start
        self._model_started = self._started = False
        self._messages = None
        self._decision = None
        self._final = None
        self._last_text = None
        self._result = None
        self._nudge = None
        self._observer = NOOP_OBSERVER
        self._observing = False

    @property
    def usage(self) -> Usage:
        """Tokens and cost so far."""
        return self.run_usage.usage

    @property
    def tokens(self) -> int:
        """Input plus output tokens so far."""
        return self.run_usage.tokens

    @property
    def model_calls(self) -> int:
        """Model calls made."""
        return self.run_usage.model_calls

    @property
    def tool_calls(self) -> int:
        """Tool calls started."""
        return self.run_usage.tool_calls

    @property
    def stopped(self) -> bool:
        """The run is over (completed or stopped)."""
        return self._decision is not None

    @property
    def decision(self) -> Decision | None:
        """The final decision, once the run is over."""
        return self._decision

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the run ended (``None`` while it goes on)."""
        return self._decision.reason if self._decision else None

    @property
    def explanation(self) -> str:
        """The stop's explanation (empty while the run goes on, or on success)."""
        return self._decision.explanation if self._decision else ""

    @property
    def wall_s(self) -> float:
        """Seconds since ``start()``."""
        if self.started_at is None:
            return 0.0
        end = self._ended_at if self._ended_at is not None else self.clock()
        return end - self.started_at

    @property
    def records(self) -> list[Step]:
        """The run's trace so far, as ``Step`` records (``RunResult.steps``)."""
        return self.log.records()

    @property
    def nudges(self) -> list[Nudge]:
        """The nudges given so far."""
        return list(self.escalation.given)

    def take_nudge(self) -> str | None:
        """The nudge waiting for the model, if any, and forget it (``before_step`` hands it
        over as ``feedback``; an integration that delivers it elsewhere takes it here)."""
        text, self._nudge = self._nudge, None
        return text

    def counters(self) -> dict[str, float]:
        """Usage of the six budgets (``semconv.BUDGETS``)."""
        u = self.run_usage
        return {
            "steps": self.steps,
            "model_calls": u.model_calls,
            "tool_calls": u.tool_calls,
            "tokens": u.tokens,
            "cost_usd": u.cost_usd,
            "wall_s": self.wall_s,
        }

    def remaining_wall_s(self) -> float | None:
        """Seconds left to the nearest deadline (this run's or an ancestor's); ``None``: none."""
        if not self._timed:
            return None
        left: float | None = None
        for g in (self, *self._ancestors):
            if g.limits.max_wall_s is not None and g.started_at is not None:
                r = g.limits.max_wall_s - (self.clock() - g.started_at)
                left = r if left is None else min(left, r)
        return None if left is None else max(left, 0.0)

    def budget_snapshot(self) -> BudgetSnapshot:
        """Usage and limits of every budget, and the highest utilization."""
        used = self.counters()
        top = max((used[b] / limit for b, limit in self._limits_on if limit), default=0.0)
        return BudgetSnapshot(used=used, limits=self._limit_map, max_utilization=max(top, 0.0))

    def _snapshot(self) -> BudgetSnapshot:
        # For the observer: the counters now, the dicts and ratios built only if it reads them.
        start, end, u = self.started_at, self._ended_at, self.run_usage
        wall = 0.0 if start is None else (end if end is not None else self.clock()) - start
        tokens = u.input_tokens + u.output_tokens
        values = (self.steps, u.model_calls, u.tool_calls, tokens, u.cost_usd, wall)
        return BudgetSnapshot.lazy(values, self._limit_map, self._limits_on)

    def _start(self, messages: list[Message] | None = None) -> None:
        if messages is not None:
            self._messages = messages
        if self._started:
            return
        self._started = True
        self.started_at = self.account.started_at = self.clock()
        config = self.config
        if (
            config.observer is None
            and config.observer_factory is None
            and get_observer_factory() is None
        ):
            return  # no observer can be had: no RunInfo to build (observer_for would say none)
        info = RunInfo(
            run_id=self.run_id,
            task_type=self.task_type,
            agent_name=self.agent_name,
            limits=self.limits,
            limits_version=self.limits.version,
            parent_run_id=self.parent.run_id if self.parent else None,
            attributes=self.config.attributes,
            conversation_id=self.conversation_id,
            provider=self.provider,
            messages=self._messages if self._messages is not None else (),
            registry=self.config.registry,
        )
        observer = observer_for(info, self.config.observer, self.config.observer_factory)
        if observer is not None:
            self._observer, self._observing = observer, True
            self._notify("run_started", info, self._snapshot())

    def model_call_started(self, model: str | None = None) -> None:
        """Tell the observer a model call begins (optional; ``after_model`` implies it)."""
        self._model_started = True
        if self._observing:
            self._notify("model_call_started", self.steps, model, self._snapshot())

    def record_retry(self, event: Any) -> None:
        """Hear of a tool retry (pass as ``on_retry`` to ``ToolRegistry.execute``)."""
        if self._observing:
            attrs: dict[str, Any] = {
                semconv.GEN_AI_TOOL_NAME: str(getattr(event, "tool", "")),
                "loopwatch.retry.attempt": int(getattr(event, "attempt", 0)),
                "loopwatch.retry.delay_s": float(getattr(event, "delay_s", 0.0)),
                semconv.ERROR_CODE: str(getattr(event, "error_code", "")),
            }
            self._notify("event", semconv.EVENT_RETRY, attrs)

    def _notify(self, method: str, *args: Any) -> None:
        try:
            getattr(self._observer, method)(*args)
        except Exception:
            record_drop("observer_error")

    def _warn(self, budget: str, used: float) -> None:
        if not self._warnings.crossed(budget, used):
            return
        limit = self.limits.limit_of(budget)
        self.log.add(self.steps, "warning", {"budget": budget, "used": used, "limit": limit})
        if self._observing:
            attrs = {
                "loopwatch.budget": budget,
                "loopwatch.budget.used": float(used),
                "loopwatch.budget.limit": float(limit or 0.0),
                "loopwatch.budget.threshold": float(self.limits.soft_threshold or 0.0),
            }
            self._notify("event", semconv.EVENT_BUDGET_WARNING, attrs)

    def _circuit_event(self, name: str) -> None:
        if not self._calls.circuit_seen(name):
            self.log.add(self.steps, "warning", {"circuit_open": name})
            if self._observing:
                attrs = {semconv.GEN_AI_TOOL_NAME: name}
                self._notify("event", semconv.EVENT_CIRCUIT_OPEN, attrs)

    def _deadline_passed(self) -> bool:
        left = self.remaining_wall_s()
        return left is not None and left <= 0

    def _deadline_text(self) -> str:
        for g in (self, *self._ancestors):
            if g.limits.max_wall_s is not None:
                whose = "" if g is self else " of the parent run"
                return f"max_wall_s={g.limits.max_wall_s}{whose}"
        return "no deadline"
