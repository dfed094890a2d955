"""Prometheus metrics derived from ended spans (docs/metrics.md).

:class:`MetricsSpanProcessor` is an OpenTelemetry ``SpanProcessor``: it reads only what an ended
span carries (name, attributes, status, start and end times), so the same code serves an agent
process (spans straight from its ``TracerProvider``) and the ``serve`` process (spans received over
OTLP, fed through :meth:`MetricsSpanProcessor.observe_span_record`).

Label values are bounded: past a cap, new ``task_type`` and ``tool`` values become ``other``.
Nothing run-specific (run id, trace id, arguments) ever becomes a label. The processor never
raises into the span pipeline; a span it cannot read is counted in
``loopwatch_telemetry_dropped_total`` instead. See ``docs/metrics.md`` for every metric.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from typing import Any, Final

from ..runtime.extras import MissingExtraError

try:
    import opentelemetry.sdk.trace  # noqa: F401 (fail early, naming the extra)
    import prometheus_client  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("otel", __name__, exc) from exc

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from ..runtime import semconv as sc
from ..runtime.drops import record_drop
from ..runtime.reasons import OUTCOME_OF, StopReason
from ..runtime.settings import env_int
from ..runtime.validate import check_int
from .metricfamilies import (
    COST_USD_BUCKETS,
    DROP_METRICS_FAILED,
    DROP_METRICS_INVALID_SPAN,
    DURATION_SECONDS_BUCKETS,
    GEN_AI_DURATION_BUCKETS,
    GEN_AI_TOKEN_BUCKETS,
    H_COST,
    H_DURATION,
    H_GEN_AI_DURATION,
    H_GEN_AI_TOKENS,
    H_MODEL_LATENCY,
    H_STEPS,
    H_TOKENS,
    H_TOOL_LATENCY,
    H_UTILIZATION,
    LIMIT_METRICS,
    NUDGE_DETECTORS,
    STEPS_BUCKETS,
    TOKENS_BUCKETS,
    TOOL_DURATION_BUCKETS,
    UTILIZATION_BUCKETS,
    DroppedCollector,
    SpanMetricsCollector,
)
from .metricsserver import (
    DEFAULT_METRICS_PORT,
    METRICS_PORT_ENV,
    MetricsServer,
    MetricsServerError,
    serve_metrics,
)

__all__ = [
    "COST_USD_BUCKETS",
    "DEFAULT_MAX_TASK_TYPES",
    "DEFAULT_MAX_TOOLS",
    "DEFAULT_METRICS_PORT",
    "DROP_METRICS_FAILED",
    "DROP_METRICS_INVALID_SPAN",
    "DURATION_SECONDS_BUCKETS",
    "GEN_AI_DURATION_BUCKETS",
    "GEN_AI_TOKEN_BUCKETS",
    "LIMIT_METRICS",
    "MAX_MODELS_ENV",
    "MAX_TASK_TYPES_ENV",
    "MAX_TOOLS_ENV",
    "METRICS_PORT_ENV",
    "OTHER",
    "SPAN_PREFIXES",
    "STEPS_BUCKETS",
    "TOKENS_BUCKETS",
    "TOOL_DURATION_BUCKETS",
    "UNKNOWN",
    "UTILIZATION_BUCKETS",
    "MetricsServer",
    "MetricsServerError",
    "MetricsSpanProcessor",
    "serve_metrics",
]

_log = logging.getLogger(__name__)

# --- configuration ---------------------------------------------------------------------------
DEFAULT_MAX_TASK_TYPES: Final = 50
DEFAULT_MAX_TOOLS: Final = 100
DEFAULT_MAX_MODELS: Final = 50
MAX_MODELS_ENV: Final = "LOOPWATCH_MAX_MODELS"
MAX_TASK_TYPES_ENV: Final = "LOOPWATCH_MAX_TASK_TYPES"
MAX_TOOLS_ENV: Final = "LOOPWATCH_MAX_TOOLS"

OTHER: Final = "other"
"""The label value that stands for every ``task_type`` / ``tool`` past the cap."""
UNKNOWN: Final = "unknown"
"""The ``task_type``, ``stop_reason`` and ``outcome`` of runs (and the ``task_type`` of tool
calls) from agents without loopwatch's instrumentation: plain OTel GenAI spans."""


class _Invalid(Exception):
    """A span attribute is missing or of the wrong type (internal: becomes a drop)."""


def _config_int(value: int | None, env: str, default: int, what: str) -> int:
    """Constructor argument -> env var -> default, validated."""
    if value is None:
        return env_int(env, default, minimum=1)
    return check_int(what, value, minimum=1)


class _BoundedValues:
    """Admits the first ``cap`` distinct values of a label; every later one becomes ``other``."""

    __slots__ = ("_cap", "_label", "_lock", "_seen", "_warned")

    def __init__(self, label: str, cap: int) -> None:
        self._label = label
        self._cap = cap
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._warned = False

    def __call__(self, value: str) -> str:
        if value in self._seen or value == OTHER:
            return value
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self._cap:
                self._seen.add(value)
                return value
            if not self._warned:
                self._warned = True
                _log.warning(
                    "loopwatch metrics: more than %d distinct %s values; new ones are labelled %r",
                    self._cap,
                    self._label,
                    OTHER,
                )
            return OTHER


def _str_attr(attrs: Mapping[str, Any], key: str) -> str:
    value = attrs.get(key)
    if type(value) is not str or not value:
        raise _Invalid(key)
    return value


def _num_attr(attrs: Mapping[str, Any], key: str) -> float | None:
    """A non-negative finite number, or ``None`` when absent."""
    value = attrs.get(key)
    if value is None:
        return None
    kind = type(value)
    # Exact types first (the common case); bools are ints to Python, never numbers here.
    if (kind is int or kind is float or (kind is not bool and isinstance(value, int | float))) and (
        0 <= value < math.inf
    ):
        return value  # type: ignore[no-any-return]
    raise _Invalid(key)


class MetricsSpanProcessor(SpanProcessor):
    """Turns ended run and tool spans into the Prometheus metrics of docs/metrics.md.

    Run spans are those named ``invoke_agent ...`` with ``gen_ai.operation.name=invoke_agent``,
    tool spans those named ``execute_tool ...`` with ``gen_ai.operation.name=execute_tool``
    (docs/telemetry.md); every other span is turned away by its name, before any attribute is read.
    Add it to a ``TracerProvider`` with ``provider.add_span_processor(...)`` and serve
    :attr:`registry` with :func:`serve_metrics`.

    Args:
        registry: where the metrics are registered. ``None`` makes a private
            ``CollectorRegistry`` (see :attr:`registry`), so two processors never clash; pass
            ``prometheus_client.REGISTRY`` to expose the metrics next to the application's own.
        max_task_types: distinct ``task_type`` label values before new ones become ``other``
            (argument -> ``LOOPWATCH_MAX_TASK_TYPES`` -> 50).
        max_tools: distinct ``tool`` label values before new ones become ``other``
            (argument -> ``LOOPWATCH_MAX_TOOLS`` -> 100).
        max_models: distinct ``model`` (and ``gen_ai_request_model``, ``gen_ai_provider_name``)
            label values before new ones become ``other`` (argument -> ``LOOPWATCH_MAX_MODELS``
            -> 50).

    Raises:
        ValueError: a cap is not a positive integer, or ``registry`` already holds loopwatch
            metrics (one processor per registry; :meth:`unregister` the old one first).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_task_types: int | None = None,
        max_tools: int | None = None,
        max_models: int | None = None,
    ) -> None:
        self.max_task_types = _config_int(
            max_task_types, MAX_TASK_TYPES_ENV, DEFAULT_MAX_TASK_TYPES, "max_task_types"
        )
        """The ``task_type`` label cap in force."""
        self.max_tools = _config_int(max_tools, MAX_TOOLS_ENV, DEFAULT_MAX_TOOLS, "max_tools")
        """The ``tool`` label cap in force."""
        self.max_models = _config_int(max_models, MAX_MODELS_ENV, DEFAULT_MAX_MODELS, "max_models")
        """The ``model`` label cap in force."""
        self.registry = CollectorRegistry() if registry is None else registry
        """The registry holding this processor's metrics (serve it with :func:`serve_metrics`)."""

        self._task_types = _BoundedValues("task_type", self.max_task_types)
        self._tools = _BoundedValues("tool", self.max_tools)
        self._models = _BoundedValues("model", self.max_models)
        self._providers = _BoundedValues("provider", self.max_models)
        self._errors = _BoundedValues("error_type", self.max_tools)
        self._values = SpanMetricsCollector()
        self._collectors: list[Any] = []
        for collector in (self._values, DroppedCollector()):
            try:
                self.registry.register(collector)
            except ValueError as exc:
                self.unregister()
                raise ValueError(
                    "this registry already holds loopwatch metrics; use one MetricsSpanProcessor"
                    f" per registry ({exc})"
                ) from None
            self._collectors.append(collector)

    def unregister(self) -> None:
        """Removes this processor's metrics from :attr:`registry` (e.g. before re-instrumenting)."""
        while self._collectors:
            self.registry.unregister(self._collectors.pop())

    # --- SpanProcessor -------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Does nothing: metrics come from ended spans only."""

    def on_end(self, span: ReadableSpan) -> None:
        """Records the metrics of an ended run or tool span. Never raises."""
        try:
            # Most spans are neither runs nor tools: the name (docs/telemetry.md, GenAI conventions)
            # turns them away before any attribute is read.
            if not span.name.startswith(_PREFIXES):
                return
            live = span.attributes
            if live is None:
                return
            # A C-level dict copy beats Mapping.get on the SDK's attributes, whose misses go
            # through a raised KeyError.
            attrs: Mapping[str, Any]
            try:
                attrs = live.copy()  # type: ignore[attr-defined]
            except AttributeError:  # a mapping without copy() (a proxy passes the call on)
                attrs = dict(live)
            op = attrs.get(sc.GEN_AI_OPERATION_NAME)
            if op not in _OPS:
                return
            trace_id = None
            if op == sc.OP_INVOKE_AGENT:
                ctx = span.context
                trace_id = None if ctx is None else f"{ctx.trace_id:032x}"
            self._observe(
                op,
                attrs,
                span.start_time,
                span.end_time,
                span.status.status_code is StatusCode.ERROR,
                trace_id,
            )
        except Exception:
            record_drop(DROP_METRICS_FAILED)

    def shutdown(self) -> None:
        """Nothing to release: the registry stays readable after the provider shuts down."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True

    # --- plain-value entry (the serve process) ---------------------------------------------------

    def observe_span_record(
        self,
        attributes: Mapping[str, Any],
        *,
        start_time_ns: int | None = None,
        end_time_ns: int | None = None,
        status_error: bool = False,
        trace_id: str | None = None,
    ) -> bool:
        """Records one ended span given as plain values (e.g. decoded from OTLP). Never raises.

        ``attributes`` are the span's attributes with values already decoded to Python types
        (OTLP/JSON sends int64 as strings: convert them first). ``status_error`` is true when the
        span status code is ERROR; ``trace_id`` (32 hex digits) becomes the exemplar of a run's
        histogram buckets. Returns ``True`` when the span was counted, ``False`` when it is not
        a run, model-call or tool span or was dropped (and counted as a drop).
        """
        try:
            op = attributes.get(sc.GEN_AI_OPERATION_NAME)
            if op not in _OPS:
                return False
            return self._observe(op, attributes, start_time_ns, end_time_ns, status_error, trace_id)
        except Exception:
            record_drop(DROP_METRICS_FAILED)
            return False

    # --- internals -------------------------------------------------------------------------------

    def _observe(
        self,
        op: str,
        attrs: Mapping[str, Any],
        start_ns: int | None,
        end_ns: int | None,
        status_error: bool,
        trace_id: str | None = None,
    ) -> bool:
        try:
            if op == sc.OP_INVOKE_AGENT:
                self._observe_run(attrs, start_ns, end_ns, trace_id)
            elif op == sc.OP_CHAT:
                self._observe_chat(attrs, start_ns, end_ns, status_error)
            else:
                self._observe_tool(attrs, start_ns, end_ns, status_error)
        except _Invalid:
            record_drop(DROP_METRICS_INVALID_SPAN)
            return False
        return True

    def _observe_run(
        self,
        attrs: Mapping[str, Any],
        start_ns: int | None,
        end_ns: int | None,
        trace_id: str | None,
    ) -> None:
        # Read and check everything first, so a malformed span records nothing at all.
        if _foreign(attrs, _RUN_KEYS):
            # An agent without loopwatch's instrumentation (plain GenAI spans): a run whose
            # task type and stop reason cannot be known, as the store records it too.
            task_type = reason_value = outcome = UNKNOWN
        else:
            task_type = _str_attr(attrs, sc.TASK_TYPE)
            raw_reason = attrs.get(sc.STOP_REASON)
            reason = _REASONS.get(raw_reason) if type(raw_reason) is str else None
            if reason is None:
                raise _Invalid(sc.STOP_REASON)
            reason_value = reason.value
            # The outcome follows from the stop reason; the attribute is not trusted for labels.
            outcome = OUTCOME_OF[reason].value
        used = [_num_attr(attrs, key) for key in _USED_KEYS]
        limits = [_num_attr(attrs, key) for key in _LIMIT_KEYS]

        steps, tokens, cost = used[_I_STEPS], used[_I_TOKENS], used[_I_COST]
        if tokens is None:
            tokens_in = _num_attr(attrs, sc.GEN_AI_USAGE_INPUT_TOKENS)
            tokens_out = _num_attr(attrs, sc.GEN_AI_USAGE_OUTPUT_TOKENS)
            if tokens_in is not None or tokens_out is not None:
                tokens = (tokens_in or 0.0) + (tokens_out or 0.0)
        if cost is None:
            cost = _num_attr(attrs, sc.COST_USD)
        duration = used[_I_WALL]
        if type(start_ns) is int and type(end_ns) is int and end_ns >= start_ns:
            duration = (end_ns - start_ns) / 1e9

        detectors = attrs.get(sc.NUDGE_DETECTORS)
        task = self._task_types(task_type)
        key = (task, outcome)
        values = self._values
        with values.lock:
            run_key = (task, reason_value, outcome)
            values.runs[run_key] = values.runs.get(run_key, 0) + 1
            if detectors and not isinstance(detectors, str):
                for detector in detectors:
                    name = detector if detector in NUDGE_DETECTORS else OTHER
                    values.nudges[(task, name)] = values.nudges.get((task, name), 0) + 1
            if steps is not None:
                values.observe(H_STEPS, key, steps, trace_id)
            if tokens is not None:
                values.observe(H_TOKENS, key, tokens, trace_id)
            if cost is not None:
                values.observe(H_COST, key, cost, trace_id)
            if duration is not None:
                values.observe(H_DURATION, key, duration, trace_id)
            for budget, budget_used, limit in zip(sc.BUDGETS, used, limits, strict=True):
                if limit is not None and limit > 0 and budget_used is not None:
                    values.observe(H_UTILIZATION, (task, budget, outcome), budget_used / limit)
                # One gauge for many task types would show whichever ran last: none for `other`.
                if task != OTHER:
                    if limit is not None:
                        values.limits[(task, budget)] = limit
                    else:
                        # Switched off: the series goes away rather than going stale.
                        values.limits.pop((task, budget), None)

    def _observe_chat(
        self,
        attrs: Mapping[str, Any],
        start_ns: int | None,
        end_ns: int | None,
        status_error: bool,
    ) -> None:
        task_type = UNKNOWN if _foreign(attrs, _TOOL_KEYS) else _str_attr(attrs, sc.TASK_TYPE)
        model_name = attrs.get(sc.GEN_AI_REQUEST_MODEL) or attrs.get(sc.GEN_AI_RESPONSE_MODEL)
        provider_name = attrs.get(sc.GEN_AI_PROVIDER_NAME)
        tokens_in = _num_attr(attrs, sc.GEN_AI_USAGE_INPUT_TOKENS)
        tokens_out = _num_attr(attrs, sc.GEN_AI_USAGE_OUTPUT_TOKENS)
        error_type = attrs.get(sc.ERROR_TYPE)
        if error_type is None and status_error:
            error_type = "_OTHER"  # the conventions' value for an error without a type
        duration = _duration(start_ns, end_ns)
        task = self._task_types(task_type)
        model = self._models(model_name if type(model_name) is str and model_name else UNKNOWN)
        provider = self._providers(
            provider_name if type(provider_name) is str and provider_name else UNKNOWN
        )
        error = self._errors(error_type if type(error_type) is str else "")
        gen_ai = (sc.OP_CHAT, provider, model)
        values = self._values
        with values.lock:
            if duration is not None:
                values.observe(H_MODEL_LATENCY, (task, model), duration)
                values.observe(H_GEN_AI_DURATION, (*gen_ai, error), duration)
            if tokens_in is not None:
                values.observe(H_GEN_AI_TOKENS, (*gen_ai, "input"), tokens_in)
            if tokens_out is not None:
                values.observe(H_GEN_AI_TOKENS, (*gen_ai, "output"), tokens_out)

    def _observe_tool(
        self,
        attrs: Mapping[str, Any],
        start_ns: int | None,
        end_ns: int | None,
        status_error: bool,
    ) -> None:
        task_type = UNKNOWN if _foreign(attrs, _TOOL_KEYS) else _str_attr(attrs, sc.TASK_TYPE)
        tool_name = _str_attr(attrs, sc.GEN_AI_TOOL_NAME)
        raw_status = attrs.get(sc.TOOL_STATUS)
        if raw_status is None:
            status = "error" if status_error else "ok"
        elif raw_status == "ok" or raw_status == "error":
            status = raw_status
        else:
            raise _Invalid(sc.TOOL_STATUS)
        retries = attrs.get(sc.TOOL_RETRIES, 0)
        if type(retries) is not int or retries < 0:
            raise _Invalid(sc.TOOL_RETRIES)

        duration = _duration(start_ns, end_ns)
        task = self._task_types(task_type)
        tool = self._tools(tool_name)
        values = self._values
        with values.lock:
            call_key = (task, tool, status)
            values.tool_calls[call_key] = values.tool_calls.get(call_key, 0) + 1
            # Present even at 0 so rate(retries) / rate(calls) has both series from the first call.
            retry_key = (task, tool)
            values.tool_retries[retry_key] = values.tool_retries.get(retry_key, 0) + retries
            if duration is not None:
                values.observe(H_TOOL_LATENCY, retry_key, duration)


SPAN_PREFIXES: Final = (sc.SPAN_RUN, sc.SPAN_TOOL, sc.SPAN_MODEL)
"""Names of the spans metrics are derived from (runs, tool calls, model calls); every other span
is turned away by its name."""
_PREFIXES: Final = SPAN_PREFIXES
_OPS: Final = frozenset({sc.OP_INVOKE_AGENT, sc.OP_EXECUTE_TOOL, sc.OP_CHAT})


def _duration(start_ns: int | None, end_ns: int | None) -> float | None:
    if type(start_ns) is int and type(end_ns) is int and end_ns >= start_ns:
        return (end_ns - start_ns) / 1e9
    return None


_RUN_KEYS: Final = (sc.TASK_TYPE, sc.STOP_REASON, sc.RUN_ID, sc.OUTCOME)
_TOOL_KEYS: Final = (sc.TASK_TYPE, sc.RUN_ID, sc.TOOL_STATUS, sc.TOOL_RETRIES)


def _foreign(attrs: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether a run or tool span comes from outside loopwatch (none of its own attributes)."""
    return not any(key in attrs for key in keys)


_REASONS: Final[dict[str, StopReason]] = {r.value: r for r in StopReason}
_USED_KEYS: Final = tuple(sc.budget_used(b) for b in sc.BUDGETS)
_LIMIT_KEYS: Final = tuple(sc.budget_limit(b) for b in sc.BUDGETS)
_I_STEPS, _I_TOKENS, _I_COST, _I_WALL = (
    sc.BUDGETS.index(b) for b in ("steps", "tokens", "cost_usd", "wall_s")
)
