"""Stop reasons derived from what a foreign run's spans recorded, with the evidence.

The rules, in order (docs/foreign.md has the full table):

1. A framework's own limit, guardrail or cancellation, recorded on any span of the run as an
   exception (``exception`` event, ``error.type``) or in an ERROR status message
   (:data:`EXCEPTION_RULES`, :data:`MESSAGE_RULES`) → the matching stop reason; smolagents'
   ``max_steps`` on its agent span with more model calls than it → ``max_steps``;
2. an ERROR status (or exception) on the run span itself → ``error``;
3. the last model call's finish reason: ``length``/``max_tokens`` → ``output_truncated``,
   ``content_filter``/``refusal`` → ``refusal``;
4. the last model call asked for no tool (finish reason ``stop``/``end_turn``, or none
   recorded and no tool span after it) and the run span ended without error → ``completed``;
5. anything else → ``unknown``: never guessed.

Every explanation starts with "Derived from" and names the span and the evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from loopwatch.instrumentation.runtime.reasons import (
    ProviderSignal,
    StopReason,
    classify_provider_stop,
)

from .conventions import MODEL, TOOL, SpanView

__all__ = ["EXCEPTION_RULES", "MESSAGE_RULES", "UNKNOWN", "DerivedStop", "derive_stop"]

UNKNOWN: Final = "unknown"

EXCEPTION_RULES: Final[dict[str, StopReason]] = {
    "MaxTurnsExceeded": StopReason.MAX_STEPS,  # OpenAI Agents SDK, max_turns
    "GraphRecursionError": StopReason.MAX_STEPS,  # LangGraph, recursion_limit
    "AgentMaxStepsError": StopReason.MAX_STEPS,  # smolagents, max_steps
    "LlmCallsLimitExceededError": StopReason.MAX_MODEL_CALLS,  # Google ADK, max_llm_calls
    "MaxTokensReachedException": StopReason.OUTPUT_TRUNCATED,  # Strands
    "LengthFinishReasonError": StopReason.OUTPUT_TRUNCATED,  # OpenAI SDK
    "ContentFilterFinishReasonError": StopReason.REFUSAL,  # OpenAI SDK
    "InputGuardrailTripwireTriggered": StopReason.GUARDRAIL,  # OpenAI Agents SDK
    "OutputGuardrailTripwireTriggered": StopReason.GUARDRAIL,  # OpenAI Agents SDK
    "CancelledError": StopReason.CANCELLED,  # asyncio
    "KeyboardInterrupt": StopReason.CANCELLED,
}
"""Exception class names (the last dotted part) → stop reason."""

# pydantic-ai's UsageLimitExceeded names the limit in its message.
_USAGE_LIMITS: Final = (
    ("request_limit", StopReason.MAX_MODEL_CALLS),
    ("tool_calls_limit", StopReason.MAX_TOOL_CALLS),
    ("tokens_limit", StopReason.TOKEN_BUDGET),
)

MESSAGE_RULES: Final[tuple[tuple[re.Pattern[str], StopReason], ...]] = (
    (re.compile(r"\bmax turns\b|\berror_max_turns\b", re.I), StopReason.MAX_STEPS),
    (re.compile(r"\berror_max_budget_usd\b", re.I), StopReason.COST_BUDGET),
    (re.compile(r"recursion limit of \d+ reached", re.I), StopReason.MAX_STEPS),
    (re.compile(r"reached max (steps|iterations)", re.I), StopReason.MAX_STEPS),
    (re.compile(r"maximum iterations reached", re.I), StopReason.MAX_STEPS),  # CrewAI max_iter
    (re.compile(r"max number of llm calls", re.I), StopReason.MAX_MODEL_CALLS),
    (re.compile(r"\bmodel_context_window_exceeded\b", re.I), StopReason.OUTPUT_TRUNCATED),
)
"""Texts (exception or status messages, Claude Agent SDK result subtypes) → stop reason."""


@dataclass(frozen=True, slots=True)
class DerivedStop:
    """A derived stop: the reason (or ``unknown``) and the sentence naming its evidence."""

    reason: str
    explanation: str


def _quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _usage_limit(message: str) -> StopReason | None:
    for key, reason in _USAGE_LIMITS:
        if key in message:
            return reason
    return None


def _rule_of(kind: str, message: str) -> StopReason | None:
    short = kind.rsplit(".", 1)[-1]
    if short == "UsageLimitExceeded":
        return _usage_limit(message)
    reason = EXCEPTION_RULES.get(short)
    if reason is not None:
        return reason
    for pattern, matched in MESSAGE_RULES:
        if pattern.search(message) or pattern.search(short):
            return matched
    return None


def _framework_stop(spans: Sequence[SpanView]) -> DerivedStop | None:
    for view in spans:
        evidence = list(view.exceptions)
        if view.error and view.status_message:
            evidence.append(("", view.status_message))
        for kind, message in evidence:
            reason = _rule_of(kind, message)
            if reason is None:
                continue
            what = f"{kind}: {message}" if kind and message else kind or message
            return DerivedStop(
                reason.value, f"Derived from span {view.name!r}, which recorded {_quote(what)!r}."
            )
    return None


def _step_limit(run: SpanView, spans: Sequence[SpanView]) -> DerivedStop | None:
    """smolagents records no exception at its step limit: it asks the model once more, without
    tools, for a final answer. So more model calls than ``max_steps`` means the limit ended it."""
    limit = run.step_limit
    calls = sum(1 for s in spans if s.role == MODEL)
    if limit is None or calls <= limit:
        return None
    return DerivedStop(
        StopReason.MAX_STEPS.value,
        f"Derived from span {run.name!r}: max_steps={limit} and {calls} model calls, the last "
        "the final answer the framework asks for once the step limit is reached.",
    )


def _run_error(run: SpanView) -> DerivedStop | None:
    if not (run.error or run.exceptions):
        return None
    kind, message = run.exceptions[-1] if run.exceptions else ("", run.status_message or "")
    what = f"{kind}: {message}" if kind and message else kind or message or "status ERROR"
    return DerivedStop(
        StopReason.ERROR.value,
        f"Derived from the run span {run.name!r}, which ended with an error ({_quote(what)!r}).",
    )


def _last_call_stop(run: SpanView, spans: Sequence[SpanView]) -> DerivedStop:
    models = [s for s in spans if s.role == MODEL]
    if not models:
        return DerivedStop(UNKNOWN, "No model call of this run was received: its end is unknown.")
    last = max(models, key=lambda s: (s.start_ns, s.end_ns))
    reasons = [classify_provider_stop(r) for r in last.finish_reasons]
    for signal, reason in (
        (ProviderSignal.OUTPUT_TRUNCATED, StopReason.OUTPUT_TRUNCATED),
        (ProviderSignal.REFUSAL, StopReason.REFUSAL),
    ):
        if signal in reasons:
            return DerivedStop(
                reason.value,
                f"Derived from the last model call {last.name!r}: finish reason "
                f"{', '.join(last.finish_reasons)!r}.",
            )
    tools_after = any(s.role == TOOL and s.start_ns >= last.start_ns for s in spans)
    if ProviderSignal.CONTINUE in reasons or tools_after:
        return DerivedStop(
            UNKNOWN,
            f"The last model call {last.name!r} asked for tools and no later model call was "
            "received: how the run ended is unknown.",
        )
    if any(r is ProviderSignal.UNKNOWN for r in reasons):
        return DerivedStop(
            UNKNOWN,
            f"The last model call {last.name!r} ended with an unknown finish reason "
            f"{', '.join(last.finish_reasons)!r}.",
        )
    said = f"finish reason {', '.join(last.finish_reasons)!r}" if reasons else "no tool call"
    return DerivedStop(
        StopReason.COMPLETED.value,
        f"Derived from the last model call {last.name!r} ({said}) and the run span "
        f"{run.name!r} ending without error.",
    )


def derive_stop(run: SpanView, spans: Sequence[SpanView]) -> DerivedStop:
    """The stop reason of a foreign run whose run span is ``run`` and whose spans (the run span
    included, in any order) are ``spans``; ``unknown`` when the spans do not say."""
    ordered = sorted(spans, key=lambda s: (s.end_ns, s.start_ns), reverse=True)
    return (
        _framework_stop(ordered)
        or _step_limit(run, spans)
        or _run_error(run)
        or _last_call_stop(run, spans)
    )
