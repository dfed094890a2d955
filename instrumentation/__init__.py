"""Limits, stop reasons, the loop guard and the reference loop.

The runtime API in one place::

    from loopwatch.instrumentation import LoopGuard, LoopLimits, ToolRegistry, run

Telemetry is one call, :func:`instrument`. Test fakes live in
:mod:`loopwatch.instrumentation.testing`.

The runtime needs only the standard library. The telemetry names (``instrument``,
``OTelObserverFactory``, ``MetricsSpanProcessor`` ...) are imported on first use, and need the
``otel`` extra (``pip install 'loopwatch[otel]'``); without it, using one raises
:class:`~loopwatch.instrumentation.extras.MissingExtraError` naming the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names

if TYPE_CHECKING:
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
    from .telemetry import Instrumentation, instrument
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

# Every name is imported on first use: an agent pays only for what it uses (the telemetry
# names need the `otel` extra).
_LAZY: dict[str, str] = {
    "Action": ".guard",
    "AgentLoopError": ".errors",
    "AgentStuck": ".errors",
    "Approver": ".guard",
    "AsyncModel": ".loop",
    "AsyncTools": ".loop",
    "BreakerState": ".retry",
    "BudgetSnapshot": ".observer",
    "Cancel": ".guard",
    "CircuitBreaker": ".retry",
    "CountingBatchSpanProcessor": ".processor",
    "Decision": ".guard",
    "ErrorInfo": ".retry",
    "ErrorResult": ".outcomes",
    "Guardrail": ".guard",
    "Instrumentation": ".telemetry",
    "LAST_STEP_NOTICE": ".guard",
    "LIMITS_ENV": ".limits",
    "LIMIT_OF": ".reasons",
    "LimitPolicy": ".limits",
    "LimitReached": ".errors",
    "LoopGuard": ".guard",
    "LoopLimits": ".limits",
    "Message": ".types",
    "MetricsServer": ".metrics",
    "MetricsSpanProcessor": ".metrics",
    "Model": ".loop",
    "ModelResponse": ".types",
    "ModelStopped": ".errors",
    "NoOpObserver": ".observer",
    "OTelObserverFactory": ".tracing",
    "OUTCOME_OF": ".reasons",
    "ObserverFactory": ".observer",
    "Outcome": ".reasons",
    "ProgressSignal": ".guard",
    "ProviderSignal": ".reasons",
    "QueueStats": ".processor",
    "RetryEvent": ".tools",
    "RetryPolicy": ".retry",
    "RunFailed": ".errors",
    "RunInfo": ".observer",
    "RunInterrupted": ".errors",
    "RunObserver": ".observer",
    "RunResult": ".types",
    "Step": ".types",
    "StepReport": ".guard",
    "StopReason": ".reasons",
    "ToolCall": ".types",
    "ToolError": ".retry",
    "ToolOutcome": ".tools",
    "ToolRecord": ".observer",
    "ToolRegistry": ".tools",
    "ToolSpec": ".tools",
    "Tools": ".loop",
    "Usage": ".types",
    "Verifier": ".guard",
    "arun": ".loop",
    "call_fingerprint": ".fingerprint",
    "classify": ".retry",
    "classify_provider_stop": ".reasons",
    "describe_call": ".guard",
    "error_fingerprint": ".fingerprint",
    "get_observer_factory": ".observer",
    "instrument": ".telemetry",
    "resolve_limits": ".limits",
    "result_fingerprint": ".fingerprint",
    "run": ".loop",
    "serve_metrics": ".metrics",
    "set_observer_factory": ".observer",
    "short_hash": ".fingerprint",
    "stable_json": ".fingerprint",
}

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)
