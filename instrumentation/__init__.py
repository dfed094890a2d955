"""Limits, stop reasons, the loop guard and the reference loop.

The runtime API in one place::

    from loopwatch.instrumentation import LoopGuard, LoopLimits, ToolRegistry, run

Telemetry is one call, :func:`instrument`. Test fakes live in
:mod:`loopwatch.instrumentation.testing`.

The runtime needs only the standard library. The telemetry names (``instrument``,
``OTelObserverFactory``, ``MetricsSpanProcessor`` ...) are imported on first use, and need the
``otel`` extra (``pip install 'loopwatch[otel]'``); without it, using one raises
:class:`~loopwatch.instrumentation.runtime.extras.MissingExtraError` naming the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .runtime.lazy import lazy_names, moved_modules

if TYPE_CHECKING:
    from .runtime.config import RunConfig
    from .runtime.errors import (
        AgentLoopError,
        AgentStuck,
        LimitReached,
        ModelStopped,
        RunFailed,
        RunInterrupted,
    )
    from .runtime.fingerprint import (
        call_fingerprint,
        error_fingerprint,
        result_fingerprint,
        short_hash,
        stable_json,
    )
    from .runtime.guard import (
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
    from .runtime.limits import LIMITS_ENV, LimitPolicy, LoopLimits, resolve_limits
    from .runtime.loop import AsyncModel, AsyncTools, Model, Tools, arun, run
    from .runtime.observer import (
        BudgetSnapshot,
        NoOpObserver,
        ObserverFactory,
        RunInfo,
        RunObserver,
        ToolRecord,
        get_observer_factory,
        set_observer_factory,
    )
    from .runtime.outcomes import ErrorResult
    from .runtime.reasons import (
        LIMIT_OF,
        OUTCOME_OF,
        Outcome,
        ProviderSignal,
        StopReason,
        classify_provider_stop,
    )
    from .runtime.retry import (
        BreakerState,
        CircuitBreaker,
        ErrorInfo,
        RetryPolicy,
        ToolError,
        classify,
    )
    from .runtime.tools import RetryEvent, ToolOutcome, ToolRegistry, ToolSpec
    from .runtime.types import Message, ModelResponse, RunResult, Step, ToolCall, Usage
    from .telemetry.metrics import MetricsServer, MetricsSpanProcessor, serve_metrics
    from .telemetry.pipeline import Instrumentation, instrument
    from .telemetry.processor import CountingBatchSpanProcessor, QueueStats
    from .telemetry.tracing import OTelObserverFactory

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
    "RunConfig",
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
    "Action": ".runtime.guard",
    "AgentLoopError": ".runtime.errors",
    "AgentStuck": ".runtime.errors",
    "Approver": ".runtime.guard",
    "AsyncModel": ".runtime.loop",
    "AsyncTools": ".runtime.loop",
    "BreakerState": ".runtime.retry",
    "BudgetSnapshot": ".runtime.observer",
    "Cancel": ".runtime.guard",
    "CircuitBreaker": ".runtime.retry",
    "CountingBatchSpanProcessor": ".telemetry.processor",
    "Decision": ".runtime.guard",
    "ErrorInfo": ".runtime.retry",
    "ErrorResult": ".runtime.outcomes",
    "Guardrail": ".runtime.guard",
    "Instrumentation": ".telemetry.pipeline",
    "LAST_STEP_NOTICE": ".runtime.guard",
    "LIMITS_ENV": ".runtime.limits",
    "LIMIT_OF": ".runtime.reasons",
    "LimitPolicy": ".runtime.limits",
    "LimitReached": ".runtime.errors",
    "LoopGuard": ".runtime.guard",
    "LoopLimits": ".runtime.limits",
    "Message": ".runtime.types",
    "MetricsServer": ".telemetry.metrics",
    "MetricsSpanProcessor": ".telemetry.metrics",
    "Model": ".runtime.loop",
    "ModelResponse": ".runtime.types",
    "ModelStopped": ".runtime.errors",
    "NoOpObserver": ".runtime.observer",
    "OTelObserverFactory": ".telemetry.tracing",
    "OUTCOME_OF": ".runtime.reasons",
    "ObserverFactory": ".runtime.observer",
    "Outcome": ".runtime.reasons",
    "ProgressSignal": ".runtime.guard",
    "ProviderSignal": ".runtime.reasons",
    "QueueStats": ".telemetry.processor",
    "RetryEvent": ".runtime.tools",
    "RetryPolicy": ".runtime.retry",
    "RunConfig": ".runtime.config",
    "RunFailed": ".runtime.errors",
    "RunInfo": ".runtime.observer",
    "RunInterrupted": ".runtime.errors",
    "RunObserver": ".runtime.observer",
    "RunResult": ".runtime.types",
    "Step": ".runtime.types",
    "StepReport": ".runtime.guard",
    "StopReason": ".runtime.reasons",
    "ToolCall": ".runtime.types",
    "ToolError": ".runtime.retry",
    "ToolOutcome": ".runtime.tools",
    "ToolRecord": ".runtime.observer",
    "ToolRegistry": ".runtime.tools",
    "ToolSpec": ".runtime.tools",
    "Tools": ".runtime.loop",
    "Usage": ".runtime.types",
    "Verifier": ".runtime.guard",
    "arun": ".runtime.loop",
    "call_fingerprint": ".runtime.fingerprint",
    "classify": ".runtime.retry",
    "classify_provider_stop": ".runtime.reasons",
    "describe_call": ".runtime.guard",
    "error_fingerprint": ".runtime.fingerprint",
    "get_observer_factory": ".runtime.observer",
    "instrument": ".telemetry.pipeline",
    "resolve_limits": ".runtime.limits",
    "result_fingerprint": ".runtime.fingerprint",
    "run": ".runtime.loop",
    "serve_metrics": ".telemetry.metrics",
    "set_observer_factory": ".runtime.observer",
    "short_hash": ".runtime.fingerprint",
    "stable_json": ".runtime.fingerprint",
}

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)

# Modules that moved into subpackages keep their old import paths (docs/architecture.md,
# "Old import paths"); type checkers read the OLD.pyi stubs beside this file.
_MOVED: dict[str, str] = {
    "decisions": ".runtime.decisions",
    "detectors": ".runtime.detectors",
    "drops": ".runtime.drops",
    "errors": ".runtime.errors",
    "explain": ".runtime.explain",
    "extras": ".runtime.extras",
    "fingerprint": ".runtime.fingerprint",
    "guard": ".runtime.guard",
    "lazy": ".runtime.lazy",
    "limits": ".runtime.limits",
    "loop": ".runtime.loop",
    "metrics": ".telemetry.metrics",
    "observer": ".runtime.observer",
    "outcomes": ".runtime.outcomes",
    "processor": ".telemetry.processor",
    "reasons": ".runtime.reasons",
    "retry": ".runtime.retry",
    "semconv": ".runtime.semconv",
    "settings": ".runtime.settings",
    "tools": ".runtime.tools",
    "tracing": ".telemetry.tracing",
    "types": ".runtime.types",
    "validate": ".runtime.validate",
}
moved_modules(__name__, _MOVED)
