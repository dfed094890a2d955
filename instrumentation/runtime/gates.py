"""The gates a tool call passes before it runs, in order, and the breaker watch after it ran.

Before a call (docs/runtime.md, "How the guard decides"): cancellation → budgets (this run's,
then each ancestor's) → the per-tool cap → the A,B,A,B cycle → guardrails → approval. Approval
comes last, so nobody is asked to approve a call a cap, a detector or a rule would refuse. Each
gate is a small object with one method, :meth:`Gate.check`; the guard builds only the gates a
run needs and asks them in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from . import explain
from .budgets import BudgetAccount
from .decisions import Approver, Cancel, Guardrail, Settable
from .detectors import Finding, RepeatedAction
from .reasons import StopReason
from .types import ToolCall

__all__ = [
    "ApprovalGate",
    "BreakerLike",
    "BudgetGate",
    "CancelGate",
    "CycleGate",
    "Gate",
    "GateFailed",
    "GuardrailGate",
    "HasBreaker",
    "Refusal",
    "ToolCapGate",
    "ToolFlags",
    "ToolTable",
    "build_gates",
    "gates_for_tool",
    "is_cancelled",
]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A gate's no: the stop reason and its explanation; ``finding`` when a detector said it
    (the guard may turn a detector's first finding into a nudge, docs/runtime.md)."""

    reason: StopReason
    explanation: str
    finding: Finding | None = None


class GateFailed(Exception):
    """A caller's callable (guardrail, approver) raised inside a gate; the run stops with
    ``error`` naming ``where``."""

    def __init__(self, where: str, error: Exception) -> None:
        super().__init__(where)
        self.where = where
        self.error = error


@dataclass(slots=True)
class ToolFlags:
    """What the guard reads of a tool's registry entry."""

    done: bool = False
    requires_approval: bool = False
    repeat_exempt: bool = False
    error_prefix: str | Sequence[str] | None = None


class ToolLookup(Protocol):
    """What the guard needs of a registry: its tools' entries by name."""

    def get(self, name: str) -> Any: ...


class BreakerLike(Protocol):
    """A circuit breaker's state per tool (``retry.CircuitBreaker`` fits)."""

    def state(self, tool: str) -> object: ...


@runtime_checkable
class HasBreaker(Protocol):
    """A registry with a circuit breaker (``ToolRegistry`` fits); ``None``: switched off."""

    @property
    def breaker(self) -> BreakerLike | None: ...


class ToolTable:
    """Each tool's flags, read once per run from the registry and the run's exempt names."""

    __slots__ = ("_exempt", "_flags", "registry")

    def __init__(self, registry: ToolLookup | None, exempt: frozenset[str]) -> None:
        self.registry = registry
        self._exempt = exempt
        self._flags: dict[str, ToolFlags] = {}

    def __getitem__(self, name: str) -> ToolFlags:
        flags = self._flags.get(name)
        if flags is None:
            spec = self.registry.get(name) if self.registry is not None else None
            flags = self._flags[name] = ToolFlags(
                done=bool(getattr(spec, "done", False)),
                requires_approval=bool(getattr(spec, "requires_approval", False)),
                repeat_exempt=bool(getattr(spec, "repeat_exempt", False)) or name in self._exempt,
                error_prefix=getattr(spec, "error_prefix", None),
            )
        return flags

    def breaker_open(self, name: str) -> bool:
        """The registry's breaker reads ``open`` for ``name`` (a breaker that raises: no)."""
        registry = self.registry
        # None first: a runtime-checkable protocol's isinstance costs ~20 µs (every replay)
        if registry is None or not isinstance(registry, HasBreaker):
            return False
        breaker = registry.breaker
        if breaker is None:
            return False
        try:
            return str(breaker.state(name)) == "open"
        except Exception:
            return False


class Gate(Protocol):
    """One check a tool call passes before it runs."""

    def check(self, call: ToolCall, args: Any, tool: ToolFlags, step: int) -> Refusal | None:
        """``None`` lets the call through; a :class:`Refusal` stops the run."""


def is_cancelled(cancel: Cancel) -> bool:
    """Whether an event-like object is set, or a callable says so."""
    if isinstance(cancel, Settable):
        return bool(cancel.is_set())
    return bool(cancel())


class CancelGate:
    """No call starts once the run (or an ancestor) was cancelled."""

    __slots__ = ("cancels",)

    def __init__(self, cancels: Sequence[Cancel]) -> None:
        self.cancels = tuple(cancels)

    def cancelled(self) -> bool:
        return any(is_cancelled(c) for c in self.cancels)

    def check(self, call: ToolCall, args: Any, tool: ToolFlags, step: int) -> Refusal | None:
        if self.cancelled():
            return Refusal(
                StopReason.CANCELLED, explain.stopped(step, explain.CANCELLED, before=call)
            )
        return None


class BudgetGate:
    """Tool calls, tokens, cost and time: this run's budgets, then each ancestor's."""

    __slots__ = ("accounts", "clock")

    def __init__(
        self, accounts: Sequence[tuple[BudgetAccount, str]], clock: Callable[[], float]
    ) -> None:
        self.accounts = tuple(accounts)
        self.clock = clock

    def exhausted(self, *, model: bool) -> tuple[StopReason, str] | None:
        for account, whose in self.accounts:
            found = account.exhausted(model=model, clock=self.clock, whose=whose)
            if found is not None:
                return found
        return None

    def check(self, call: ToolCall, args: Any, tool: ToolFlags, step: int) -> Refusal | None:
        found = self.exhausted(model=False)
        if found is None:
            return None
        return Refusal(found[0], explain.stopped(step, found[1], before=call))


class ToolCapGate:
    """``max_calls_per_tool``: calls of one tool (counted here as they pass every gate before
    approval; a refusal after this gate stops the run, so the count is never read again)."""

    __slots__ = ("caps", "counts")

    def __init__(self, caps: int | Mapping[str, int]) -> None:
        self.caps = caps
        self.counts: dict[str, int] = {}

    def check(self, call: ToolCall, args: Any, tool: ToolFlags, step: int) -> Refusal | None:
        name = call.name
        cap = self.caps if isinstance(self.caps, int) else self.caps.get(name)
        made = self.counts.get(name, 0)
        if cap is not None and made >= cap:
            return Refusal(
                StopReason.MAX_TOOL_CALLS,
                explain.stopped(step, explain.tool_cap_reached(name, cap), before=call),
            )
        self.counts[name] = made + 1
        return None


class CycleGate:
    """A,B,A then B: refused before it runs when the repeat of A brought nothing new."""

    __slots__ = ("detector",)

    def __init__(self, detector: RepeatedAction) -> None:
        self.detector = detector

    def check(self, call: ToolCall, args: Any, tool: ToolFlags, step: int) -> Refusal | None:
        if tool.repeat_exempt:
            return None
        detector = self.detector
        h = detector.history
        if h[0] is None or h[0] is not h[2]:
            return None  # no A,B,A behind the call: the usual case, decided without the detector
        found = detector.before_call(call.name, args, step)
        if found is None:
            return None
        return Refusal(found.reason, found.explanation, found)


def _rule_name(rule: object, default: str) -> str:
    name = getattr(rule, "__name__", None)
    return name if isinstance(name, str) else default


class GuardrailGate:
    """Risk rules: a reason (or ``True``) vetoes the call."""

    __slots__ = ("rules",)

    def __init__(self, rules: Sequence[Guardrail]) -> None:
        self.rules = tuple(rules)

    def check(self, call: ToolCall, args: Any, tool: ToolFlags, step: int) -> Refusal | None:
        for rule in self.rules:
            try:
                verdict = rule(call)
            except Exception as exc:
                label = getattr(rule, "__name__", rule)
                raise GateFailed(f"guardrail {label!r}", exc) from exc
            if verdict:
                why = (
                    verdict
                    if isinstance(verdict, str)
                    else f"rule {_rule_name(rule, 'guardrail')!r}"
                )
                return Refusal(
                    StopReason.GUARDRAIL, explain.stopped(step, explain.guardrail_vetoed(call, why))
                )
        return None


class ApprovalGate:
    """A tool that requires approval runs only if the approver says yes; none means no."""

    __slots__ = ("approver",)

    def __init__(self, approver: Approver | None) -> None:
        self.approver = approver

    def check(self, call: ToolCall, args: Any, tool: ToolFlags, step: int) -> Refusal | None:
        if not tool.requires_approval:
            return None
        if self.approver is None:
            return Refusal(
                StopReason.PERMISSION_DENIED, explain.stopped(step, explain.no_approver(call))
            )
        try:
            approved = self.approver(call)
        except Exception as exc:
            raise GateFailed("the approver", exc) from exc
        if not approved:
            return Refusal(
                StopReason.PERMISSION_DENIED, explain.stopped(step, explain.approval_refused(call))
            )
        return None


def build_gates(
    *,
    cancel: CancelGate | None,
    budgets: BudgetGate | None,
    caps: int | Mapping[str, int] | None,
    cycle: RepeatedAction,
    guardrails: Sequence[Guardrail],
    approver: Approver | None,
) -> tuple[Gate, ...]:
    """The gates a run needs, in their order (docs/runtime.md, "How the guard decides")."""
    gates: list[Gate | None] = [
        cancel,
        budgets,
        None if caps is None else ToolCapGate(caps),
        CycleGate(cycle),
        GuardrailGate(guardrails) if guardrails else None,
        ApprovalGate(approver),
    ]
    return tuple(g for g in gates if g is not None)


def gates_for_tool(gates: Sequence[Gate], tool: ToolFlags) -> tuple[Gate, ...]:
    """The gates that apply to one tool: no cycle check for a repeat-exempt tool, no approval
    check for a tool that needs none (worked out once per tool and run)."""
    return tuple(
        g
        for g in gates
        if not (isinstance(g, CycleGate) and tool.repeat_exempt)
        and not (isinstance(g, ApprovalGate) and not tool.requires_approval)
    )
