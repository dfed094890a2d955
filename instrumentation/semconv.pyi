"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.semconv`.
"""

from loopwatch.instrumentation.runtime.semconv import (
    BUDGET_MAX_UTILIZATION as BUDGET_MAX_UTILIZATION,
)
from loopwatch.instrumentation.runtime.semconv import (
    BUDGETS as BUDGETS,
)
from loopwatch.instrumentation.runtime.semconv import (
    CAPTURE_CONTENT_ENV as CAPTURE_CONTENT_ENV,
)
from loopwatch.instrumentation.runtime.semconv import (
    CONTENT_MAX_CHARS_DEFAULT as CONTENT_MAX_CHARS_DEFAULT,
)
from loopwatch.instrumentation.runtime.semconv import (
    CONTENT_MAX_CHARS_ENV as CONTENT_MAX_CHARS_ENV,
)
from loopwatch.instrumentation.runtime.semconv import (
    CONTENT_TRUNCATED as CONTENT_TRUNCATED,
)
from loopwatch.instrumentation.runtime.semconv import (
    CONVERSATION_ID as CONVERSATION_ID,
)
from loopwatch.instrumentation.runtime.semconv import (
    COST_USD as COST_USD,
)
from loopwatch.instrumentation.runtime.semconv import (
    ERROR_CODE as ERROR_CODE,
)
from loopwatch.instrumentation.runtime.semconv import (
    ERROR_FINGERPRINT as ERROR_FINGERPRINT,
)
from loopwatch.instrumentation.runtime.semconv import (
    ERROR_TYPE as ERROR_TYPE,
)
from loopwatch.instrumentation.runtime.semconv import (
    EVENT_BUDGET_WARNING as EVENT_BUDGET_WARNING,
)
from loopwatch.instrumentation.runtime.semconv import (
    EVENT_CIRCUIT_OPEN as EVENT_CIRCUIT_OPEN,
)
from loopwatch.instrumentation.runtime.semconv import (
    EVENT_COMPLETION_REJECTED as EVENT_COMPLETION_REJECTED,
)
from loopwatch.instrumentation.runtime.semconv import (
    EVENT_NUDGE as EVENT_NUDGE,
)
from loopwatch.instrumentation.runtime.semconv import (
    EVENT_RETRY as EVENT_RETRY,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_AGENT_NAME as GEN_AI_AGENT_NAME,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_CONVERSATION_ID as GEN_AI_CONVERSATION_ID,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_INPUT_MESSAGES as GEN_AI_INPUT_MESSAGES,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_OPERATION_NAME as GEN_AI_OPERATION_NAME,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_OUTPUT_MESSAGES as GEN_AI_OUTPUT_MESSAGES,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_PROVIDER_NAME as GEN_AI_PROVIDER_NAME,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_REQUEST_MODEL as GEN_AI_REQUEST_MODEL,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_RESPONSE_FINISH_REASONS as GEN_AI_RESPONSE_FINISH_REASONS,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_RESPONSE_ID as GEN_AI_RESPONSE_ID,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_RESPONSE_MODEL as GEN_AI_RESPONSE_MODEL,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_SYSTEM_INSTRUCTIONS as GEN_AI_SYSTEM_INSTRUCTIONS,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_TOOL_CALL_ARGUMENTS as GEN_AI_TOOL_CALL_ARGUMENTS,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_TOOL_CALL_ID as GEN_AI_TOOL_CALL_ID,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_TOOL_CALL_RESULT as GEN_AI_TOOL_CALL_RESULT,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_TOOL_DEFINITIONS as GEN_AI_TOOL_DEFINITIONS,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_TOOL_DESCRIPTION as GEN_AI_TOOL_DESCRIPTION,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_TOOL_NAME as GEN_AI_TOOL_NAME,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_TOOL_TYPE as GEN_AI_TOOL_TYPE,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_USAGE_COST as GEN_AI_USAGE_COST,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_USAGE_INPUT_TOKENS as GEN_AI_USAGE_INPUT_TOKENS,
)
from loopwatch.instrumentation.runtime.semconv import (
    GEN_AI_USAGE_OUTPUT_TOKENS as GEN_AI_USAGE_OUTPUT_TOKENS,
)
from loopwatch.instrumentation.runtime.semconv import (
    GENAI_SEMCONV_VERSION as GENAI_SEMCONV_VERSION,
)
from loopwatch.instrumentation.runtime.semconv import (
    GUARD_DECISION as GUARD_DECISION,
)
from loopwatch.instrumentation.runtime.semconv import (
    LIMIT as LIMIT,
)
from loopwatch.instrumentation.runtime.semconv import (
    LIMITS_VERSION as LIMITS_VERSION,
)
from loopwatch.instrumentation.runtime.semconv import (
    NUDGE_DETECTOR as NUDGE_DETECTOR,
)
from loopwatch.instrumentation.runtime.semconv import (
    NUDGE_DETECTORS as NUDGE_DETECTORS,
)
from loopwatch.instrumentation.runtime.semconv import (
    NUDGES as NUDGES,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_AGENT as OI_AGENT,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_CHAIN as OI_CHAIN,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_COST_TOTAL as OI_COST_TOTAL,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_LLM as OI_LLM,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_LLM_MODEL_NAME as OI_LLM_MODEL_NAME,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_LLM_PROVIDER as OI_LLM_PROVIDER,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_SESSION_ID as OI_SESSION_ID,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_SPAN_KIND as OI_SPAN_KIND,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_TOKEN_COUNT_COMPLETION as OI_TOKEN_COUNT_COMPLETION,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_TOKEN_COUNT_PROMPT as OI_TOKEN_COUNT_PROMPT,
)
from loopwatch.instrumentation.runtime.semconv import (
    OI_TOOL as OI_TOOL,
)
from loopwatch.instrumentation.runtime.semconv import (
    OP_CHAT as OP_CHAT,
)
from loopwatch.instrumentation.runtime.semconv import (
    OP_EXECUTE_TOOL as OP_EXECUTE_TOOL,
)
from loopwatch.instrumentation.runtime.semconv import (
    OP_INVOKE_AGENT as OP_INVOKE_AGENT,
)
from loopwatch.instrumentation.runtime.semconv import (
    OUTCOME as OUTCOME,
)
from loopwatch.instrumentation.runtime.semconv import (
    PARENT_RUN_ID as PARENT_RUN_ID,
)
from loopwatch.instrumentation.runtime.semconv import (
    PROGRESS_MAX_SAME_CALL as PROGRESS_MAX_SAME_CALL,
)
from loopwatch.instrumentation.runtime.semconv import (
    PROGRESS_MAX_SAME_ERROR as PROGRESS_MAX_SAME_ERROR,
)
from loopwatch.instrumentation.runtime.semconv import (
    PROGRESS_RECENT_NEW_CALLS as PROGRESS_RECENT_NEW_CALLS,
)
from loopwatch.instrumentation.runtime.semconv import (
    PROGRESS_WINDOW as PROGRESS_WINDOW,
)
from loopwatch.instrumentation.runtime.semconv import (
    PROVIDER_UNKNOWN as PROVIDER_UNKNOWN,
)
from loopwatch.instrumentation.runtime.semconv import (
    REPLAY_EXPLANATION as REPLAY_EXPLANATION,
)
from loopwatch.instrumentation.runtime.semconv import (
    REPLAY_PEAK_PREFIX as REPLAY_PEAK_PREFIX,
)
from loopwatch.instrumentation.runtime.semconv import (
    REPLAY_SAVED_PREFIX as REPLAY_SAVED_PREFIX,
)
from loopwatch.instrumentation.runtime.semconv import (
    REPLAY_STEP as REPLAY_STEP,
)
from loopwatch.instrumentation.runtime.semconv import (
    REPLAY_STOP_REASON as REPLAY_STOP_REASON,
)
from loopwatch.instrumentation.runtime.semconv import (
    RESULT_FINGERPRINT as RESULT_FINGERPRINT,
)
from loopwatch.instrumentation.runtime.semconv import (
    RUN_ID as RUN_ID,
)
from loopwatch.instrumentation.runtime.semconv import (
    SHADOW_EXPLANATION as SHADOW_EXPLANATION,
)
from loopwatch.instrumentation.runtime.semconv import (
    SHADOW_LIMITS_VERSION as SHADOW_LIMITS_VERSION,
)
from loopwatch.instrumentation.runtime.semconv import (
    SHADOW_SAVED_PREFIX as SHADOW_SAVED_PREFIX,
)
from loopwatch.instrumentation.runtime.semconv import (
    SHADOW_STEP as SHADOW_STEP,
)
from loopwatch.instrumentation.runtime.semconv import (
    SHADOW_STOP_REASON as SHADOW_STOP_REASON,
)
from loopwatch.instrumentation.runtime.semconv import (
    SPAN_MODEL as SPAN_MODEL,
)
from loopwatch.instrumentation.runtime.semconv import (
    SPAN_RUN as SPAN_RUN,
)
from loopwatch.instrumentation.runtime.semconv import (
    SPAN_STEP as SPAN_STEP,
)
from loopwatch.instrumentation.runtime.semconv import (
    SPAN_TOOL as SPAN_TOOL,
)
from loopwatch.instrumentation.runtime.semconv import (
    STEP_INDEX as STEP_INDEX,
)
from loopwatch.instrumentation.runtime.semconv import (
    STOP_EXPLANATION as STOP_EXPLANATION,
)
from loopwatch.instrumentation.runtime.semconv import (
    STOP_REASON as STOP_REASON,
)
from loopwatch.instrumentation.runtime.semconv import (
    TASK_SUCCESS as TASK_SUCCESS,
)
from loopwatch.instrumentation.runtime.semconv import (
    TASK_TYPE as TASK_TYPE,
)
from loopwatch.instrumentation.runtime.semconv import (
    TOOL_FINGERPRINT as TOOL_FINGERPRINT,
)
from loopwatch.instrumentation.runtime.semconv import (
    TOOL_RETRIES as TOOL_RETRIES,
)
from loopwatch.instrumentation.runtime.semconv import (
    TOOL_STATUS as TOOL_STATUS,
)
from loopwatch.instrumentation.runtime.semconv import (
    TOOL_TYPE_FUNCTION as TOOL_TYPE_FUNCTION,
)
from loopwatch.instrumentation.runtime.semconv import (
    budget_limit as budget_limit,
)
from loopwatch.instrumentation.runtime.semconv import (
    budget_used as budget_used,
)

__all__ = [
    "BUDGETS",
    "BUDGET_MAX_UTILIZATION",
    "CAPTURE_CONTENT_ENV",
    "CONTENT_MAX_CHARS_DEFAULT",
    "CONTENT_MAX_CHARS_ENV",
    "CONTENT_TRUNCATED",
    "CONVERSATION_ID",
    "COST_USD",
    "ERROR_CODE",
    "ERROR_FINGERPRINT",
    "ERROR_TYPE",
    "EVENT_BUDGET_WARNING",
    "EVENT_CIRCUIT_OPEN",
    "EVENT_COMPLETION_REJECTED",
    "EVENT_NUDGE",
    "EVENT_RETRY",
    "GENAI_SEMCONV_VERSION",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_SYSTEM_INSTRUCTIONS",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_DEFINITIONS",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_USAGE_COST",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "GUARD_DECISION",
    "LIMIT",
    "LIMITS_VERSION",
    "NUDGES",
    "NUDGE_DETECTOR",
    "NUDGE_DETECTORS",
    "OI_AGENT",
    "OI_CHAIN",
    "OI_COST_TOTAL",
    "OI_LLM",
    "OI_LLM_MODEL_NAME",
    "OI_LLM_PROVIDER",
    "OI_SESSION_ID",
    "OI_SPAN_KIND",
    "OI_TOKEN_COUNT_COMPLETION",
    "OI_TOKEN_COUNT_PROMPT",
    "OI_TOOL",
    "OP_CHAT",
    "OP_EXECUTE_TOOL",
    "OP_INVOKE_AGENT",
    "OUTCOME",
    "PARENT_RUN_ID",
    "PROGRESS_MAX_SAME_CALL",
    "PROGRESS_MAX_SAME_ERROR",
    "PROGRESS_RECENT_NEW_CALLS",
    "PROGRESS_WINDOW",
    "PROVIDER_UNKNOWN",
    "REPLAY_EXPLANATION",
    "REPLAY_PEAK_PREFIX",
    "REPLAY_SAVED_PREFIX",
    "REPLAY_STEP",
    "REPLAY_STOP_REASON",
    "RESULT_FINGERPRINT",
    "RUN_ID",
    "SHADOW_EXPLANATION",
    "SHADOW_LIMITS_VERSION",
    "SHADOW_SAVED_PREFIX",
    "SHADOW_STEP",
    "SHADOW_STOP_REASON",
    "SPAN_MODEL",
    "SPAN_RUN",
    "SPAN_STEP",
    "SPAN_TOOL",
    "STEP_INDEX",
    "STOP_EXPLANATION",
    "STOP_REASON",
    "TASK_SUCCESS",
    "TASK_TYPE",
    "TOOL_FINGERPRINT",
    "TOOL_RETRIES",
    "TOOL_STATUS",
    "TOOL_TYPE_FUNCTION",
    "budget_limit",
    "budget_used",
]
