"""Span, event and attribute names (docs/telemetry.md). One place, so tracer, metrics and store
agree.

GenAI semantic-convention names are used where they exist; what they lack lives under
``loopwatch.*``.
"""

from __future__ import annotations

from typing import Final

# --- budgets -------------------------------------------------------------------------------
BUDGETS: Final[tuple[str, ...]] = (
    "steps",
    "model_calls",
    "tool_calls",
    "tokens",
    "cost_usd",
    "wall_s",
)


def budget_used(budget: str) -> str:
    """``loopwatch.budget.<budget>.used``."""
    return f"loopwatch.budget.{budget}.used"


def budget_limit(budget: str) -> str:
    """``loopwatch.budget.<budget>.limit``."""
    return f"loopwatch.budget.{budget}.limit"


BUDGET_MAX_UTILIZATION: Final = "loopwatch.budget.max_utilization"

# --- span names (prefixes; the suffix is the agent, step number, model or tool) ------------
SPAN_RUN: Final = "invoke_agent"
SPAN_STEP: Final = "step"
SPAN_MODEL: Final = "chat"
SPAN_TOOL: Final = "execute_tool"

# --- GenAI semantic conventions -------------------------------------------------------------
GENAI_SEMCONV_VERSION: Final = "1.41.0"
"""The GenAI semantic-conventions release these names and requirement levels follow (the last
release of the GenAI model in ``open-telemetry/semantic-conventions``)."""
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"  # opt-in only
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"  # opt-in only
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"  # opt-in only
GEN_AI_USAGE_COST: Final = "gen_ai.usage.cost"
"""Cost in USD of one model call: not in the GenAI conventions; what Langfuse reads."""
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"  # opt-in only
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"  # opt-in only
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"  # opt-in only
ERROR_TYPE: Final = "error.type"
PROVIDER_UNKNOWN: Final = "unknown"
"""``gen_ai.provider.name`` when neither the model object, the response nor the caller names it
(the attribute is required)."""
TOOL_TYPE_FUNCTION: Final = "function"

# --- OpenInference (Phoenix, Arize) -----------------------------------------------------------
OI_SPAN_KIND: Final = "openinference.span.kind"
OI_AGENT: Final = "AGENT"
OI_CHAIN: Final = "CHAIN"
OI_LLM: Final = "LLM"
OI_TOOL: Final = "TOOL"
OI_SESSION_ID: Final = "session.id"
OI_LLM_MODEL_NAME: Final = "llm.model_name"
OI_LLM_PROVIDER: Final = "llm.provider"
OI_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
OI_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
OI_COST_TOTAL: Final = "llm.cost.total"

OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CHAT: Final = "chat"
OP_EXECUTE_TOOL: Final = "execute_tool"

# --- loopwatch attributes ----------------------------------------------------------------------
RUN_ID: Final = "loopwatch.run_id"
TASK_TYPE: Final = "loopwatch.task_type"
STEP_INDEX: Final = "loopwatch.step"
GUARD_DECISION: Final = "loopwatch.guard.decision"
STOP_REASON: Final = "loopwatch.stop_reason"
OUTCOME: Final = "loopwatch.outcome"
LIMIT: Final = "loopwatch.limit"
STOP_EXPLANATION: Final = "loopwatch.stop.explanation"
LIMITS_VERSION: Final = "loopwatch.limits.version"
COST_USD: Final = "loopwatch.usage.cost_usd"
TOOL_FINGERPRINT: Final = "loopwatch.tool.fingerprint"
TOOL_STATUS: Final = "loopwatch.tool.status"  # ok | error
TOOL_RETRIES: Final = "loopwatch.tool.retries"
RESULT_FINGERPRINT: Final = "loopwatch.tool.result_fingerprint"
ERROR_CODE: Final = "loopwatch.error.code"
ERROR_FINGERPRINT: Final = "loopwatch.error.fingerprint"
PARENT_RUN_ID: Final = "loopwatch.parent_run_id"
CONVERSATION_ID: Final = "loopwatch.conversation_id"
"""Read, never written: the conversation id before ``gen_ai.conversation.id`` was used."""
CONTENT_TRUNCATED: Final = "loopwatch.content.truncated"
"""Names the captured-content attributes that were cut at the size cap."""

# --- events ------------------------------------------------------------
EVENT_BUDGET_WARNING: Final = "loopwatch.budget.warning"
EVENT_RETRY: Final = "loopwatch.retry"
EVENT_COMPLETION_REJECTED: Final = "loopwatch.completion.rejected"
EVENT_CIRCUIT_OPEN: Final = "loopwatch.circuit.open"
EVENT_NUDGE: Final = "loopwatch.nudge"
"""A detector tripped and the model was handed a corrective message (docs/runtime.md)."""
NUDGE_DETECTOR: Final = "loopwatch.nudge.detector"

# --- nudges on the run span ---
NUDGES: Final = "loopwatch.nudges"
"""How many nudges the run's detectors gave (0 when none)."""
NUDGE_DETECTORS: Final = "loopwatch.nudge.detectors"
"""The detector of each nudge, in order (string array; absent when none)."""

# Opt-in switch for recording raw tool arguments/results and message content.
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_MAX_CHARS_ENV: Final = "LOOPWATCH_CONTENT_MAX_CHARS"
CONTENT_MAX_CHARS_DEFAULT: Final = 16384

# --- progress evidence on the run span: lets the store judge a stopped run alone ---
PROGRESS_RECENT_NEW_CALLS: Final = "loopwatch.progress.recent_new_calls"
"""Distinct call fingerprints first seen in the run's last ``PROGRESS_WINDOW`` steps."""
PROGRESS_MAX_SAME_ERROR: Final = "loopwatch.progress.max_same_error"
"""The highest count of any one error fingerprint in the run."""
PROGRESS_MAX_SAME_CALL: Final = "loopwatch.progress.max_same_call"
"""The highest count of any one (call, result) fingerprint pair in the run."""
PROGRESS_WINDOW: Final = 3
TASK_SUCCESS: Final = "loopwatch.task.success"
"""Set by ``loopwatch import``: the recorded task's own label, kept apart from the loop outcome."""

# --- shadow limits (docs/import.md): evaluated, not enforced, recorded on the run span ---
SHADOW_STOP_REASON: Final = "loopwatch.shadow.stop_reason"
"""The stop reason the run's shadow limits would have stopped it with, or ``finish``."""
SHADOW_STEP: Final = "loopwatch.shadow.step"
"""The step they would have stopped it at (the run's last step for ``finish``)."""
SHADOW_EXPLANATION: Final = "loopwatch.shadow.explanation"
"""Their would-be stop's explanation."""
SHADOW_LIMITS_VERSION: Final = "loopwatch.shadow.limits.version"
"""Short hash of the shadow limits."""
SHADOW_SAVED_PREFIX: Final = "loopwatch.shadow.saved."
"""``loopwatch.shadow.saved.<budget>``: usage the run spent past the would-be stop."""

# --- replay of imported runs (docs/import.md), recorded on the imported run span ---
REPLAY_STOP_REASON: Final = "loopwatch.replay.stop_reason"
"""The stop reason the guard would have stopped the recorded run with; ``finish`` when it would
have let the run end as recorded."""
REPLAY_STEP: Final = "loopwatch.replay.step"
"""The step the guard would have stopped at (the run's last step when it would have let it
finish)."""
REPLAY_EXPLANATION: Final = "loopwatch.replay.explanation"
"""The guard's explanation of the would-be stop."""
REPLAY_SAVED_PREFIX: Final = "loopwatch.replay.saved."
"""``loopwatch.replay.saved.<budget>``: recorded usage past the would-be stop (steps,
model_calls, tool_calls, tokens), 0 when it would have finished."""
REPLAY_PEAK_PREFIX: Final = "loopwatch.replay.peak."
"""``loopwatch.replay.peak.<detector>``: the detector's highest evidence count over the whole
recorded run (a threshold N would have stopped it iff peak ≥ N)."""
