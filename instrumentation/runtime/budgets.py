"""The run's budgets as one table, and the check every budget goes through.

Budgets are checked before spending (docs/runtime.md, "Budgets, warnings, gates"): before a
model call (model calls, tokens, cost, wall clock) and before a tool call (tool calls, tokens,
cost, wall clock), this run's first, then each ancestor's. ``max_steps`` is the step gate's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from . import explain
from .limits import LoopLimits
from .reasons import LIMIT_OF, StopReason
from .usage import RunUsage

__all__ = ["BUDGET_TABLE", "SPEND_RATE", "Budget", "BudgetAccount", "SoftWarnings", "limit_name"]

SPEND_RATE = "spend_rate"
"""The ``loopwatch.limit`` of a run stopped by ``max_cost_per_min`` or ``max_tokens_per_min``."""
_RATE_FLOOR_S = 60.0
"""A spend rate is averaged over at least a minute: a run may spend a minute's worth at once."""


@dataclass(frozen=True, slots=True)
class Budget:
    """One budget: its name, the limit that bounds it and how its use is read and shown."""

    name: str
    """As in ``semconv.BUDGETS``."""
    label: str
    """In explanations: "the {label} budget ... is used up"."""
    field: str
    """The ``LoopLimits`` field."""
    reason: StopReason
    before_model: bool
    """Checked before a model call."""
    before_tool: bool
    """Checked before a tool call."""
    used: Callable[[RunUsage], float] | None
    """Reads the use from the run's usage (``None``: the wall clock)."""
    shown: Callable[[float], str]


BUDGET_TABLE: tuple[Budget, ...] = (
    Budget("model_calls", "model-call", "max_model_calls", StopReason.MAX_MODEL_CALLS, True,
           False, lambda u: u.model_calls, lambda v: str(int(v))),
    Budget("tool_calls", "tool-call", "max_tool_calls", StopReason.MAX_TOOL_CALLS, False, True,
           lambda u: u.tool_calls, lambda v: str(int(v))),
    Budget("tokens", "token", "max_tokens", StopReason.TOKEN_BUDGET, True, True,
           lambda u: u.tokens, lambda v: str(int(v))),
    Budget("cost_usd", "cost", "max_cost_usd", StopReason.COST_BUDGET, True, True,
           lambda u: u.cost_usd, lambda v: f"${v:.4f}"),
    Budget("wall_s", "wall-clock", "max_wall_s", StopReason.TIMEOUT, True, True,
           None, lambda v: f"{v:.1f} s"),
)  # fmt: skip
"""Every budget but steps, in the order they are checked."""


_Checks = tuple[tuple[tuple["Budget", float], ...], ...]
# id(limits) -> (the limits, the checks they make): held, so an id is not reused while kept
_CHECKS: dict[int, tuple[LoopLimits, _Checks]] = {}


def _checks_of(limits: LoopLimits) -> _Checks:
    # The (budget, limit) pairs checked before a model call, before a tool call, and the spend
    # rates: worked out once per (immutable) limits object and shared by every run given it (a
    # run's account is built for every run; most runs share their limits).
    kept = _CHECKS.get(id(limits))
    if kept is not None and kept[0] is limits:
        return kept[1]
    table = limits.budget_limits
    on = [(b, table[b.name]) for b in BUDGET_TABLE]
    rates = (
        (BUDGET_TABLE[3], limits.max_cost_per_min),
        (BUDGET_TABLE[2], limits.max_tokens_per_min),
    )
    checks = (
        tuple((b, v) for b, v in on if v is not None and b.before_model),
        tuple((b, v) for b, v in on if v is not None and b.before_tool),
        tuple((b, v) for b, v in rates if v is not None),
    )
    if len(_CHECKS) >= 256:  # limits made per run (a test's, a tuner's): kept bounded
        _CHECKS.clear()
    _CHECKS[id(limits)] = (limits, checks)
    return checks


class BudgetAccount:
    """One run's budgets that are on, with what it spent: asked by it and by its sub-runs."""

    __slots__ = ("_before_model", "_before_tool", "_rates", "rate_stopped", "started_at", "usage")

    def __init__(self, limits: LoopLimits, usage: RunUsage) -> None:
        self.usage = usage
        self.started_at: float | None = None
        """The clock reading when the run started (the wall-clock budget counts from it)."""
        self._before_model, self._before_tool, self._rates = _checks_of(limits)
        self.rate_stopped = False
        """A spend rate stopped the run (its limit is ``spend_rate``)."""

    @property
    def any_on(self) -> bool:
        """Some budget besides steps is on."""
        return bool(self._before_model or self._before_tool or self._rates)

    def exhausted(
        self, *, model: bool, clock: Callable[[], float], whose: str = ""
    ) -> tuple[StopReason, str] | None:
        """The first used-up budget checked before a model (or tool) call, and its words."""
        for budget, limit in self._before_model if model else self._before_tool:
            if budget.used is not None:
                used = budget.used(self.usage)
            elif self.started_at is not None:
                used = clock() - self.started_at
            else:
                continue
            if used >= limit:
                return budget.reason, explain.budget_used_up(
                    budget.label, whose, budget.shown(used), budget.field, limit
                )
        return self._rate_exceeded(clock, whose) if self._rates else None

    def _rate_exceeded(
        self, clock: Callable[[], float], whose: str
    ) -> tuple[StopReason, str] | None:
        if self.started_at is None:
            return None
        elapsed = clock() - self.started_at
        minutes = max(elapsed, _RATE_FLOOR_S) / 60.0
        for budget, limit in self._rates:
            assert budget.used is not None
            rate = budget.used(self.usage) / minutes
            if rate >= limit:
                self.rate_stopped = True
                field = "max_cost_per_min" if budget.name == "cost_usd" else "max_tokens_per_min"
                return budget.reason, (
                    f"the run{whose} spent {budget.shown(budget.used(self.usage))} in "
                    f"{elapsed:.0f} s, {budget.shown(rate)} a minute ({field}={limit})."
                )
        return None


def limit_name(reason: StopReason, accounts: Sequence[BudgetAccount]) -> str | None:
    """The ``loopwatch.limit`` of a run that stopped with ``reason``: ``spend_rate`` when a
    spend rate stopped it, else the budget of the reason."""
    if reason in (StopReason.COST_BUDGET, StopReason.TOKEN_BUDGET) and any(
        a.rate_stopped for a in accounts
    ):
        return SPEND_RATE
    return LIMIT_OF.get(reason)


class SoftWarnings:
    """Budget -> use at which the soft warning fires (``soft_threshold`` × limit); each
    budget warns once."""

    __slots__ = ("after_model", "before_tool", "pending")

    def __init__(self, thresholds: Mapping[str, float]) -> None:
        self.pending: dict[str, float] = dict(thresholds)
        self.after_model = False
        """A warning a model call can cross is pending (model calls, tokens, cost)."""
        self.before_tool = False
        """A warning a tool call's start can cross is pending (tool calls, wall clock)."""
        self._sides()

    def _sides(self) -> None:
        # Asked on every model and tool call: worked out when the pending warnings change.
        pending = self.pending
        self.after_model = "model_calls" in pending or "tokens" in pending or "cost_usd" in pending
        self.before_tool = "tool_calls" in pending or "wall_s" in pending

    def crossed(self, budget: str, used: float) -> bool:
        """``used`` reached the budget's threshold for the first time."""
        at = self.pending.get(budget)
        if at is None or used < at:
            return False
        del self.pending[budget]
        self._sides()
        return True
