"""The hook between the runtime and telemetry.

The guard reports a run's lifecycle to a :class:`RunObserver`, one per run. The default is a
no-op, so an uninstrumented loop pays nothing; :func:`loopwatch.instrumentation.instrument`
installs a factory whose observers emit OpenTelemetry spans. Observers must never raise into
the loop: the guard wraps every call and counts failures as dropped telemetry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .drops import record_drop
from .toolspec import ToolOutcome
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
    "observer_for",
    "set_observer_factory",
]

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]


_BUDGET_ORDER = ("steps", "model_calls", "tool_calls", "tokens", "cost_usd", "wall_s")


class BudgetSnapshot:
    """Budget usage at one point of a run. Keys are the budget names of ``semconv.BUDGETS``.

    Immutable. The guard hands observers a lazy one: the six numbers are taken when it is made,
    the ``used`` map and ``max_utilization`` are built on first read (most notifications are
    never read, and building them cost more than the rest of the guard's step).
    """

    __slots__ = ("_limits", "_limits_on", "_max", "_used", "_values")

    def __init__(
        self,
        used: Mapping[str, float],
        limits: Mapping[str, float | None],
        max_utilization: float,
    ) -> None:
        self._used: Mapping[str, float] | None = used
        self._limits = limits
        self._max: float | None = max_utilization
        self._values: tuple[float, ...] = ()
        self._limits_on: tuple[tuple[str, float | None], ...] = ()

    @classmethod
    def lazy(
        cls,
        values: tuple[float, ...],
        limits: Mapping[str, float | None],
        limits_on: tuple[tuple[str, float | None], ...],
    ) -> BudgetSnapshot:
        """A snapshot of ``values`` (steps, model calls, tool calls, tokens, cost, wall
        seconds), built on first read; ``limits_on`` are the (budget, limit) pairs switched on."""
        snap = cls.__new__(cls)
        snap._used = None
        snap._limits = limits
        snap._max = None
        snap._values = values
        snap._limits_on = limits_on
        return snap

    @property
    def used(self) -> Mapping[str, float]:
        """Usage per budget."""
        used = self._used
        if used is None:
            used = self._used = dict(zip(_BUDGET_ORDER, self._values, strict=True))
        return used

    @property
    def limits(self) -> Mapping[str, float | None]:
        """``None`` where the limit is off."""
        return self._limits

    @property
    def max_utilization(self) -> float:
        """The largest ``used / limit`` over the budgets that are on (0 when none is)."""
        top = self._max
        if top is None:
            used = self.used
            top = 0.0
            for b, limit in self._limits_on:
                if limit:
                    u = used[b] / limit
                    if u > top:
                        top = u
            self._max = top
        return top

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BudgetSnapshot):
            return NotImplemented
        return (
            dict(self.used) == dict(other.used)
            and dict(self.limits) == dict(other.limits)
            and self.max_utilization == other.max_utilization
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"BudgetSnapshot(used={dict(self.used)!r}, limits={dict(self.limits)!r}, "
            f"max_utilization={self.max_utilization!r})"
        )


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
    conversation_id: str | None = None
    """The conversation (session, thread) the run belongs to, when the caller named one."""
    provider: str | None = None
    """The model's provider (``openai``, ``anthropic`` ...), when the model object names it."""
    messages: Sequence[Any] = ()
    """The run's message list, live: what the next model call is sent (read only when content
    capture is on)."""
    registry: Any = None
    """The tool registry (``get(name)`` returns a spec with ``description`` and ``parameters``),
    for tool descriptions and definitions; ``None`` when the loop has none."""


ToolRecord = ToolOutcome
"""How one tool call went, as the guard saw it: the one tool-call record,
:class:`~loopwatch.instrumentation.runtime.toolspec.ToolOutcome`, with its fingerprints filled in
(``status`` and ``retries`` are its properties). The old name, kept as an alias."""


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


def observer_for(
    info: RunInfo, observer: RunObserver | None, factory: ObserverFactory | None
) -> RunObserver | None:
    """The run's observer: ``observer``, else ``factory(info)``, else the installed factory's;
    ``None`` for none (or a no-op). A factory that raises is counted, and the run has none."""
    if observer is None:
        factory = factory or get_observer_factory()
        if factory is not None:
            try:
                observer = factory(info)
            except Exception:
                record_drop("observer_error")
    if observer is None or isinstance(observer, NoOpObserver):
        return None
    return observer
