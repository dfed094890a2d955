"""Limits, stop reasons, the loop guard and the reference loop.

The runtime API in one place::

    from loopwatch.instrumentation import LoopGuard, LoopLimits, ToolRegistry, run

Telemetry is one call, :func:`instrument`. Test fakes live in
:mod:`loopwatch.instrumentation.testing`.
"""

from .errors import (
    AgentLoopError,
    AgentStuck,
    LimitReached,
    ModelStopped,
    RunFailed,
    RunInterrupted,
)
from .fingerprint import (
    call_fingerprint,
    error_fingerprint,
    result_fingerprint,
    short_hash,
    stable_json,
)
from .guard import (
    LAST_STEP_NOTICE,
    Action,
    Approver,
    Cancel,
    Decision,
    Guardrail,
    LoopGuard,
    ProgressSignal,
    StepReport,
    Verifier,
    describe_call,
)
from .instrument import Instrumentation, instrument
from .limits import LIMITS_ENV, LimitPolicy, LoopLimits, resolve_limits
from .loop import AsyncModel, AsyncTools, Model, Tools, arun, run
from .metrics import MetricsServer, MetricsSpanProcessor, serve_metrics
from .observer import (
    BudgetSnapshot,
    NoOpObserver,
    ObserverFactory,
    RunInfo,
    RunObserver,
    ToolRecord,
    get_observer_factory,
    set_observer_factory,
)
from .outcomes import ErrorResult
from .processor import CountingBatchSpanProcessor, QueueStats
from .reasons import (
    LIMIT_OF,
    OUTCOME_OF,
    Outcome,
    ProviderSignal,
    StopReason,
    classify_provider_stop,
)
from .retry import BreakerState, CircuitBreaker, ErrorInfo, RetryPolicy, ToolError, classify
from .tools import RetryEvent, ToolOutcome, ToolRegistry, ToolSpec
from .tracing import OTelObserverFactory
from .types import Message, ModelResponse, RunResult, Step, ToolCall, Usage

__all__ = [
    "LAST_STEP_NOTICE",
    "LIMITS_ENV",
    "LIMIT_OF",
    "OUTCOME_OF",
    "Action",
    "AgentLoopError",
    "AgentStuck",
    "Approver",
    "AsyncModel",
    "AsyncTools",
    "BreakerState",
    "BudgetSnapshot",
    "Cancel",
    "CircuitBreaker",
    "CountingBatchSpanProcessor",
    "Decision",
    "ErrorInfo",
    "ErrorResult",
    "Guardrail",
    "Instrumentation",
    "LimitPolicy",
    "LimitReached",
    "LoopGuard",
    "LoopLimits",
    "Message",
    "MetricsServer",
    "MetricsSpanProcessor",
    "Model",
    "ModelResponse",
    "ModelStopped",
    "NoOpObserver",
    "OTelObserverFactory",
    "ObserverFactory",
    "Outcome",
    "ProgressSignal",
    "ProviderSignal",
    "QueueStats",
    "RetryEvent",
    "RetryPolicy",
    "RunFailed",
    "RunInfo",
    "RunInterrupted",
    "RunObserver",
    "RunResult",
    "Step",
    "StepReport",
    "StopReason",
    "ToolCall",
    "ToolError",
    "ToolOutcome",
    "ToolRecord",
    "ToolRegistry",
    "ToolSpec",
    "Tools",
    "Usage",
    "Verifier",
    "arun",
    "call_fingerprint",
    "classify",
    "classify_provider_stop",
    "describe_call",
    "error_fingerprint",
    "get_observer_factory",
    "instrument",
    "resolve_limits",
    "result_fingerprint",
    "run",
    "serve_metrics",
    "set_observer_factory",
    "short_hash",
    "stable_json",
]
