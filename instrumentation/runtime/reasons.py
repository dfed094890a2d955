"""The shared vocabulary: why a loop ended, and what kind of ending that was."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ERROR_OUTCOMES",
    "LIMIT_OF",
    "OUTCOME_OF",
    "Outcome",
    "ProviderSignal",
    "StopReason",
    "classify_provider_stop",
]


class Outcome(StrEnum):
    """The group a stop reason belongs to. Dashboards aggregate on this."""

    SUCCESS = "success"
    LIMIT = "limit"
    STUCK = "stuck"
    MODEL = "model"
    INTERRUPTED = "interrupted"
    ERROR = "error"


class StopReason(StrEnum):
    """Why a run ended. Every run ends with exactly one."""

    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    MAX_MODEL_CALLS = "max_model_calls"
    MAX_TOOL_CALLS = "max_tool_calls"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    TIMEOUT = "timeout"
    TOOL_FAILURES = "tool_failures"
    REPEATED_ACTION = "repeated_action"
    REPEATED_TOOL_CALL = "repeated_tool_call"
    REPEATED_ERROR = "repeated_error"
    NO_PROGRESS = "no_progress"
    COMPLETION_REJECTED = "completion_rejected"
    OUTPUT_TRUNCATED = "output_truncated"
    REFUSAL = "refusal"
    CANCELLED = "cancelled"
    PERMISSION_DENIED = "permission_denied"
    GUARDRAIL = "guardrail"
    CIRCUIT_OPEN = "circuit_open"
    ERROR = "error"

    @property
    def outcome(self) -> Outcome:
        return OUTCOME_OF[self]


OUTCOME_OF: dict[StopReason, Outcome] = {
    StopReason.COMPLETED: Outcome.SUCCESS,
    StopReason.MAX_STEPS: Outcome.LIMIT,
    StopReason.MAX_MODEL_CALLS: Outcome.LIMIT,
    StopReason.MAX_TOOL_CALLS: Outcome.LIMIT,
    StopReason.TOKEN_BUDGET: Outcome.LIMIT,
    StopReason.COST_BUDGET: Outcome.LIMIT,
    StopReason.TIMEOUT: Outcome.LIMIT,
    StopReason.TOOL_FAILURES: Outcome.STUCK,
    StopReason.REPEATED_ACTION: Outcome.STUCK,
    StopReason.REPEATED_TOOL_CALL: Outcome.STUCK,
    StopReason.REPEATED_ERROR: Outcome.STUCK,
    StopReason.NO_PROGRESS: Outcome.STUCK,
    StopReason.COMPLETION_REJECTED: Outcome.STUCK,
    StopReason.OUTPUT_TRUNCATED: Outcome.MODEL,
    StopReason.REFUSAL: Outcome.MODEL,
    StopReason.CANCELLED: Outcome.INTERRUPTED,
    StopReason.PERMISSION_DENIED: Outcome.INTERRUPTED,
    StopReason.GUARDRAIL: Outcome.INTERRUPTED,
    StopReason.CIRCUIT_OPEN: Outcome.ERROR,
    StopReason.ERROR: Outcome.ERROR,
}

ERROR_OUTCOMES: frozenset[Outcome] = frozenset({Outcome.STUCK, Outcome.MODEL, Outcome.ERROR})
"""Outcomes that are an error in OpenTelemetry terms (``error.type`` and status ERROR on the run
span): the agent failed to produce an answer (it looped, the provider cut it off or refused, an
exception or an open circuit). A stop someone chose is not an error: a limit (policy), an
interruption (cancel, refused approval, guardrail). docs/telemetry.md, *Errors*."""

# The budget a limit stop used up. Budget names are those of the span attributes
# `loopwatch.budget.<budget>.used` and of the `budget` metric label.
LIMIT_OF: dict[StopReason, str] = {
    StopReason.MAX_STEPS: "steps",
    StopReason.MAX_MODEL_CALLS: "model_calls",
    StopReason.MAX_TOOL_CALLS: "tool_calls",
    StopReason.TOKEN_BUDGET: "tokens",
    StopReason.COST_BUDGET: "cost_usd",
    StopReason.TIMEOUT: "wall_s",
}


class ProviderSignal(StrEnum):
    """What a provider's stop/finish reason asks the loop to do."""

    CONTINUE = "continue"  # the model asked for tools (or to resend the turn)
    COMPLETED = "completed"
    OUTPUT_TRUNCATED = "output_truncated"
    REFUSAL = "refusal"
    UNKNOWN = "unknown"


# Both vocabularies (Anthropic stop_reason, OpenAI finish_reason / Responses status).
_PROVIDER_SIGNALS: dict[str, ProviderSignal] = {
    "tool_use": ProviderSignal.CONTINUE,
    "tool_calls": ProviderSignal.CONTINUE,
    "function_call": ProviderSignal.CONTINUE,
    "pause_turn": ProviderSignal.CONTINUE,
    "end_turn": ProviderSignal.COMPLETED,
    "stop": ProviderSignal.COMPLETED,
    "stop_sequence": ProviderSignal.COMPLETED,
    "completed": ProviderSignal.COMPLETED,
    "max_tokens": ProviderSignal.OUTPUT_TRUNCATED,
    "length": ProviderSignal.OUTPUT_TRUNCATED,
    "model_context_window_exceeded": ProviderSignal.OUTPUT_TRUNCATED,
    "max_output_tokens": ProviderSignal.OUTPUT_TRUNCATED,
    "refusal": ProviderSignal.REFUSAL,
    "content_filter": ProviderSignal.REFUSAL,
}


def classify_provider_stop(value: str | None) -> ProviderSignal:
    """Map a provider's stop signal, in either vocabulary, to what the loop does next.

    ``None`` (a provider that sends nothing) counts as ``completed`` only when the caller
    has already checked there are no tool calls; here it is ``UNKNOWN``.
    """
    if value is None:
        return ProviderSignal.UNKNOWN
    return _PROVIDER_SIGNALS.get(value.strip().lower(), ProviderSignal.UNKNOWN)
