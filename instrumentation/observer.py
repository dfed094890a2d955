"""The hook between the runtime and telemetry.

The guard reports a run's lifecycle to a :class:`RunObserver`, one per run. The default is a
no-op, so an uninstrumented loop pays nothing; :func:`loopwatch.instrumentation.instrument`
installs a factory whose observers emit OpenTelemetry spans. Observers must never raise into
the loop: the guard wraps every call and counts failures as dropped telemetry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .types import ModelResponse, RunResult, ToolCall

if TYPE_CHECKING:
    from .limits import LoopLimits

__all__ = [
    "NOOP_OBSERVER",
    "BudgetSnapshot",
    "NoOpObserver",
    "ObserverFactory",
    "RunInfo",
    "RunObserver",
    "ToolRecord",
    "get_observer_factory",
    "set_observer_factory",
]

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """Budget usage at one point of a run. Keys are the budget names of ``semconv.BUDGETS``."""

    used: Mapping[str, float]
    limits: Mapping[str, float | None]
    """``None`` where the limit is off."""
    max_utilization: float
    """The largest ``used / limit`` over the budgets that are on (0 when none is)."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What is known when a run starts."""

    run_id: str
    task_type: str
    agent_name: str
    limits: LoopLimits
    limits_version: str
    parent_run_id: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolRecord:
    """How one tool call went, as the guard saw it."""

    call: ToolCall
    status: Literal["ok", "error"]
    content: str
    """The text returned to the model (recorded only when content capture is on)."""
    fingerprint: str
    """Short hash of the call (name + stable JSON of the arguments)."""
    result_fingerprint: str
    error_code: str | None = None
    error_fingerprint: str | None = None
    retries: int = 0


class RunObserver(Protocol):
    """Receives one run's lifecycle, in order. Implementations must be cheap and must not raise."""

    def run_started(self, info: RunInfo, budget: BudgetSnapshot) -> None: ...

    def step_started(self, step: int, budget: BudgetSnapshot) -> None: ...

    def model_call_started(self, step: int, model: str | None, budget: BudgetSnapshot) -> None: ...

    def model_call_ended(
        self, response: ModelResponse | None, error: BaseException | None, budget: BudgetSnapshot
    ) -> None: ...

    def tool_call_started(
        self, call: ToolCall, fingerprint: str, budget: BudgetSnapshot
    ) -> None: ...

    def tool_call_ended(self, record: ToolRecord, budget: BudgetSnapshot) -> None: ...

    def event(self, name: str, attributes: Mapping[str, AttributeValue]) -> None:
        """A point event on the current span: budget warning, retry, completion rejected,
        circuit open."""

    def step_ended(self, step: int, decision: str, budget: BudgetSnapshot) -> None:
        """``decision`` is ``continue`` or the stop reason."""

    def run_ended(self, result: RunResult, budget: BudgetSnapshot) -> None: ...


class ObserverFactory(Protocol):
    """Makes the observer for one run."""

    def __call__(self, info: RunInfo) -> RunObserver: ...


class NoOpObserver:
    """Does nothing. The default."""

    def run_started(self, info: RunInfo, budget: BudgetSnapshot) -> None:
        pass

    def step_started(self, step: int, budget: BudgetSnapshot) -> None:
        pass

    def model_call_started(self, step: int, model: str | None, budget: BudgetSnapshot) -> None:
        pass

    def model_call_ended(
        self, response: ModelResponse | None, error: BaseException | None, budget: BudgetSnapshot
    ) -> None:
        pass

    def tool_call_started(self, call: ToolCall, fingerprint: str, budget: BudgetSnapshot) -> None:
        pass

    def tool_call_ended(self, record: ToolRecord, budget: BudgetSnapshot) -> None:
        pass

    def event(self, name: str, attributes: Mapping[str, AttributeValue]) -> None:
        pass

    def step_ended(self, step: int, decision: str, budget: BudgetSnapshot) -> None:
        pass

    def run_ended(self, result: RunResult, budget: BudgetSnapshot) -> None:
        pass


NOOP_OBSERVER = NoOpObserver()

_factory: ObserverFactory | None = None


def set_observer_factory(factory: ObserverFactory | None) -> None:
    """Install the factory used by runs that were not given an observer (``None`` = no-op)."""
    global _factory
    _factory = factory


def get_observer_factory() -> ObserverFactory | None:
    return _factory
