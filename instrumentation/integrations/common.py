"""What the framework integrations share: the stop signal raised inside a framework's loop, and
an observer that writes loopwatch's attributes onto a framework's own spans.

A framework that emits its own GenAI spans (pydantic-ai's ``invoke_agent`` / ``chat`` /
``execute_tool``) gets them annotated, not duplicated: the guard runs with a
:class:`SpanAnnotator` as its observer. A framework without OTel spans of its own gets
loopwatch's spans from the observer factory :func:`~loopwatch.instrumentation.instrument`
installed, exactly as the reference loop does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..runtime.extras import MissingExtraError

try:
    import opentelemetry.sdk.trace  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("otel", __name__, exc) from exc

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from ..clients.base import ModelPrice
from ..runtime import semconv as sc
from ..runtime.config import RunConfig, explicit_options, run_config
from ..runtime.drops import record_drop
from ..runtime.guard import Cancel, Decision, Guardrail, LoopGuard, Verifier
from ..runtime.limits import LimitPolicy, LoopLimits
from ..runtime.observer import BudgetSnapshot, RunInfo, RunObserver, ToolRecord
from ..runtime.reasons import StopReason
from ..runtime.types import ModelResponse, RunResult, ToolCall
from ..telemetry.tracing import (
    budget_attributes,
    capture_content_enabled,
    is_error_outcome,
    run_span_attributes,
)

__all__ = [
    "GuardOptions",
    "GuardStopped",
    "SpanAnnotator",
    "current_span_if",
    "guard_config",
    "reject",
    "tool_error_content",
]


@dataclass(eq=False, kw_only=True)
class GuardOptions:
    """What an integration takes for the guard it starts on each run; the base of the
    integrations' hooks and handlers, whose own state follows these fields.

    Args:
        limits: the run's limits, or a ``LimitPolicy`` picked by ``task_type``.
        task_type: the task type runs are recorded under.
        agent_name: the agent's name (default: the framework's name for it, else ``agent``).
        prices: USD per million tokens by model name for the cost budget; without them cost
            stays 0.
        verify, cancel, guardrails, repeat_exempt, observer: as for ``LoopGuard``.
        config: a :class:`~loopwatch.instrumentation.runtime.config.RunConfig` for every run (the
            fields above, when set, win over its own).
    """

    limits: LoopLimits | LimitPolicy | None = None
    task_type: str = "default"
    agent_name: str | None = None
    prices: Mapping[str, ModelPrice] | None = None
    verify: Verifier | None = None
    cancel: Cancel | None = None
    guardrails: Sequence[Guardrail] = ()
    repeat_exempt: Sequence[str] = ()
    observer: RunObserver | None = None
    config: RunConfig | None = None

    def __post_init__(self) -> None:
        # copies: a caller's later change to its own dict or list does not reach a running guard
        self.prices = dict(self.prices or {})
        self.guardrails = tuple(self.guardrails)
        self.repeat_exempt = tuple(self.repeat_exempt)

    def new_guard(self, framework_name: object, **extra: Any) -> LoopGuard:
        """A guard for one run, named ``agent_name`` (or the config's), else
        ``framework_name``, else ``agent``."""
        return LoopGuard(config=guard_config(self, framework_name, **extra))


def guard_config(options: Any, framework_name: object, **extra: Any) -> RunConfig:
    """The run config of an integration's run: its ``config`` with the option fields it set
    (``limits``, ``task_type`` ...) and ``extra`` folded in (``config.run_config``)."""
    cfg = run_config(
        options.config,
        **explicit_options(
            limits=options.limits,
            task_type=options.task_type,
            verify=options.verify,
            cancel=options.cancel,
            guardrails=options.guardrails,
            repeat_exempt=options.repeat_exempt,
            observer=options.observer,
        ),
        **extra,
    )
    name = options.agent_name or (cfg.agent_name if cfg.agent_name != "agent" else None)
    return cfg.with_options(agent_name=str(name or framework_name or "agent"))


class GuardStopped(Exception):
    """Raised inside a framework's loop when the guard stopped the run; the integration turns it
    into :class:`~loopwatch.instrumentation.runtime.errors.AgentLoopError` with the run's result."""

    decision: Decision

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.explanation or str(decision.reason))
        self.decision = decision


def reject(guard: LoopGuard, decision: Decision) -> Decision:
    """The completion check rejected the answer, in a framework with no way to hand the unmet
    criteria back to the model: the run stops with ``completion_rejected``."""
    unmet = (decision.feedback or "").strip()
    return guard.stop(
        StopReason.COMPLETION_REJECTED,
        f"Stopped at step {guard.steps}: the completion check rejected the answer and this "
        f"framework cannot return the unmet criteria to the model. {unmet}",
    )


def tool_error_content(code: str, message: str) -> str:
    """A failed tool call's result in the ``{"error": ..., "code": ...}`` convention."""
    return json.dumps({"error": message, "code": code}, ensure_ascii=False)


def current_span_if(operation: str) -> Span | None:
    """The current span when it is recording and its ``gen_ai.operation.name`` is ``operation``."""
    span = trace.get_current_span()
    if not span.is_recording():
        return None
    attrs = getattr(span, "attributes", None)
    if not attrs or attrs.get(sc.GEN_AI_OPERATION_NAME) != operation:
        return None
    return span


def _safe_set(span: Span | None, attrs: Mapping[str, AttributeValue]) -> None:
    if span is None:
        return
    try:
        if span.is_recording():
            span.set_attributes(attrs)
    except Exception:
        record_drop("observer_error")


class SpanAnnotator:
    """A :class:`~loopwatch.instrumentation.runtime.observer.RunObserver` that writes loopwatch's
    attributes onto a framework's own spans: the run span it is given, and the ``chat`` /
    ``execute_tool`` span current when a model or tool call starts. It makes no span itself
    (the framework has no step spans; model and tool spans carry ``loopwatch.step``)."""

    def __init__(self, run_span: Span, *, capture_content: bool | None = None) -> None:
        self._run = run_span
        self._capture = capture_content_enabled(capture_content)
        self._common: dict[str, AttributeValue] = {}
        self._step = 0
        self._model: Span | None = None
        self._tools: dict[str, Span] = {}

    def run_started(self, info: RunInfo, budget: BudgetSnapshot) -> None:
        self._common = {sc.RUN_ID: info.run_id, sc.TASK_TYPE: info.task_type}
        attrs: dict[str, AttributeValue] = dict(self._common)
        attrs[sc.LIMITS_VERSION] = info.limits_version
        if info.parent_run_id:
            attrs[sc.PARENT_RUN_ID] = info.parent_run_id
        _safe_set(self._run, attrs)

    def step_started(self, step: int, budget: BudgetSnapshot) -> None:
        self._step = step

    def model_call_started(self, step: int, model: str | None, budget: BudgetSnapshot) -> None:
        span = current_span_if(sc.OP_CHAT)
        self._model = span
        _safe_set(span, {**self._common, sc.STEP_INDEX: step})

    def model_call_ended(
        self, response: ModelResponse | None, error: BaseException | None, budget: BudgetSnapshot
    ) -> None:
        attrs = budget_attributes(budget)
        if response is not None:
            attrs[sc.COST_USD] = float(response.usage.cost_usd)
        _safe_set(self._model, attrs)
        self._model = None

    def tool_call_started(self, call: ToolCall, fingerprint: str, budget: BudgetSnapshot) -> None:
        span = current_span_if(sc.OP_EXECUTE_TOOL)
        if span is not None:
            self._tools[call.id] = span
        _safe_set(
            span, {**self._common, sc.STEP_INDEX: self._step, sc.TOOL_FINGERPRINT: fingerprint}
        )

    def tool_call_ended(self, record: ToolRecord, budget: BudgetSnapshot) -> None:
        span = self._tools.pop(record.call.id, None)
        if span is None:
            span = current_span_if(sc.OP_EXECUTE_TOOL)
        attrs = budget_attributes(budget)
        attrs[sc.TOOL_STATUS] = record.status
        attrs[sc.TOOL_RETRIES] = record.retries
        attrs[sc.RESULT_FINGERPRINT] = record.result_fingerprint
        if record.status != "ok":
            code = record.error_code or "error"
            attrs[sc.ERROR_TYPE] = code
            attrs[sc.ERROR_CODE] = code
            if record.error_fingerprint:
                attrs[sc.ERROR_FINGERPRINT] = record.error_fingerprint
        _safe_set(span, {**self._common, **attrs})

    def event(self, name: str, attributes: Mapping[str, AttributeValue]) -> None:
        try:
            span = trace.get_current_span()
            if span.is_recording():
                span.add_event(name, dict(attributes))
        except Exception:
            record_drop("observer_error")

    def step_ended(self, step: int, decision: str, budget: BudgetSnapshot) -> None:
        pass

    def run_ended(self, result: RunResult, budget: BudgetSnapshot) -> None:
        span = self._run
        try:
            if not span.is_recording():
                return
            attrs = run_span_attributes(result, budget, capture_content=self._capture)
            span.set_attributes({**self._common, **attrs})
            if is_error_outcome(result.outcome):
                span.set_status(Status(StatusCode.ERROR, str(attrs.get(sc.STOP_EXPLANATION) or "")))
        except Exception:
            record_drop("observer_error")
