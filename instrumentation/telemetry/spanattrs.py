"""The attributes a loopwatch span ends with: budget usage and limits, and a run's stop reason,
outcome, explanation, progress, nudges and shadow stop (docs/telemetry.md)."""

from __future__ import annotations

from typing import Final

from opentelemetry.util.types import AttributeValue

from ..runtime import semconv as sc
from ..runtime.observer import BudgetSnapshot
from ..runtime.reasons import ERROR_OUTCOMES, Outcome
from ..runtime.types import RunResult
from .content import redact_content

__all__ = [
    "budget_attributes",
    "is_error_outcome",
    "run_attributes",
    "run_span_attributes",
    "shadow_attributes",
]

# Budgets counted in whole units are exported as ints, the rest (cost, wall clock) as floats,
# so one attribute always has one type in the store and in trace backends.
_COUNT_BUDGETS: Final = frozenset({"steps", "model_calls", "tool_calls", "tokens"})
_BUDGET_KEYS: Final = tuple(
    (b, sc.budget_used(b), sc.budget_limit(b), b in _COUNT_BUDGETS) for b in sc.BUDGETS
)
_PROGRESS_KEYS: Final = {
    "recent_new_calls": sc.PROGRESS_RECENT_NEW_CALLS,
    "max_same_error": sc.PROGRESS_MAX_SAME_ERROR,
    "max_same_call": sc.PROGRESS_MAX_SAME_CALL,
}


def is_error_outcome(outcome: Outcome | str) -> bool:
    """Whether a run that ended with ``outcome`` is an error in OpenTelemetry terms
    (``error.type`` and status ERROR): ``stuck``, ``model`` and ``error``; never ``success``,
    ``limit`` (a policy stop) or ``interrupted`` (a stop someone asked for)."""
    try:
        return Outcome(outcome) in ERROR_OUTCOMES
    except ValueError:
        return False


def budget_attributes(budget: BudgetSnapshot) -> dict[str, AttributeValue]:
    """``loopwatch.budget.<b>.used`` / ``.limit`` for every budget, limits that are off omitted,
    plus ``loopwatch.budget.max_utilization``."""
    attrs: dict[str, AttributeValue] = {}
    used = budget.used
    limits = budget.limits
    for name, used_key, limit_key, whole in _BUDGET_KEYS:
        value = used.get(name)
        if value is not None:
            attrs[used_key] = int(value) if whole else float(value)
        limit = limits.get(name)
        if limit is not None:
            attrs[limit_key] = int(limit) if whole else float(limit)
    attrs[sc.BUDGET_MAX_UTILIZATION] = float(budget.max_utilization)
    return attrs


def shadow_attributes(result: RunResult, capture: bool) -> dict[str, AttributeValue]:
    """Where the run's shadow limits would have stopped it (docs/import.md, "Shadow limits on
    live traffic")."""
    shadow = result.shadow
    attrs: dict[str, AttributeValue] = {
        sc.SHADOW_STOP_REASON: str(shadow.get("stop_reason", "")),
        sc.SHADOW_STEP: int(shadow.get("step") or 0),
        sc.SHADOW_LIMITS_VERSION: str(shadow.get("limits_version", "")),
    }
    explanation = str(shadow.get("explanation") or "")
    if explanation:
        attrs[sc.SHADOW_EXPLANATION] = (
            explanation if capture else redact_content(explanation, result.messages)
        )
    for budget, value in (shadow.get("saved") or {}).items():
        attrs[sc.SHADOW_SAVED_PREFIX + str(budget)] = float(value)
    return attrs


def run_attributes(
    result: RunResult, budget: BudgetSnapshot, explanation: str
) -> dict[str, AttributeValue]:
    attrs = budget_attributes(budget)
    usage = result.usage
    attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = usage.input_tokens
    attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.output_tokens
    attrs[sc.COST_USD] = float(usage.cost_usd)
    attrs[sc.STOP_REASON] = str(result.stop_reason)
    attrs[sc.OUTCOME] = str(result.outcome)
    attrs[sc.STOP_EXPLANATION] = explanation
    if result.limits_version:
        attrs[sc.LIMITS_VERSION] = result.limits_version
    if result.limit is not None and result.outcome == Outcome.LIMIT:
        attrs[sc.LIMIT] = result.limit
    for key, value in result.progress.items():
        name = _PROGRESS_KEYS.get(key)
        if name is not None:
            attrs[name] = int(value)
    if result.nudges:
        attrs[sc.NUDGES] = len(result.nudges)
        attrs[sc.NUDGE_DETECTORS] = [str(n.get("detector", "")) for n in result.nudges]
    if is_error_outcome(result.outcome):
        attrs[sc.ERROR_TYPE] = str(result.stop_reason)
    return attrs


def run_span_attributes(
    result: RunResult, budget: BudgetSnapshot, *, capture_content: bool = False
) -> dict[str, AttributeValue]:
    """The ``loopwatch.*`` and usage attributes a run span ends with (the explanation redacted
    unless ``capture_content``), for integrations that annotate a framework's own run span."""
    explanation = result.explanation
    if not capture_content:
        explanation = redact_content(explanation, result.messages)
    return run_attributes(result, budget, explanation)
