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
import time
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
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
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from ..runtime import semconv as sc
from ..runtime.drops import dropped, record_drop
from ..runtime.reasons import OUTCOME_OF, StopReason
from ..runtime.settings import env_int
from ..runtime.validate import check_int

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
DEFAULT_METRICS_PORT: Final = 9464
MAX_TASK_TYPES_ENV: Final = "LOOPWATCH_MAX_TASK_TYPES"
MAX_TOOLS_ENV: Final = "LOOPWATCH_MAX_TOOLS"
METRICS_PORT_ENV: Final = "LOOPWATCH_METRICS_PORT"

OTHER: Final = "other"
"""The label value that stands for every ``task_type`` / ``tool`` past the cap."""
UNKNOWN: Final = "unknown"
"""The ``task_type``, ``stop_reason`` and ``outcome`` of runs (and the ``task_type`` of tool
calls) from agents without loopwatch's instrumentation: plain OTel GenAI spans."""

# --- drop reasons (loopwatch_telemetry_dropped_total{reason}) -----------------------------------
DROP_METRICS_INVALID_SPAN: Final = "metrics_invalid_span"
"""A run or tool span lacked a required attribute or had one of the wrong type; it was skipped."""
DROP_METRICS_FAILED: Final = "metrics_failed"
"""The processor failed unexpectedly on a span; the span was skipped."""

# --- histogram buckets (upper bounds; +Inf is added by the client) -------------------------------
STEPS_BUCKETS: Final[tuple[float, ...]] = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 50, 100)
"""Steps are whole numbers, so ``le="8"`` is exactly "8 steps or fewer" (8 is the default limit)."""
TOKENS_BUCKETS: Final[tuple[float, ...]] = (
    500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000, 2000000
)  # fmt: skip
"""Run totals (input + output): from a one-shot answer to a long tool-heavy run; 1-2-5 spacing."""
COST_USD_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
)  # fmt: skip
"""USD per run, a tenth of a cent to ten dollars; 1-2.5-5 spacing."""
DURATION_SECONDS_BUCKETS: Final[tuple[float, ...]] = (
    0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600
)  # fmt: skip
"""Wall-clock run time, sub-second to an hour; 300 s is a common ``max_wall_s``."""
UTILIZATION_BUCKETS: Final[tuple[float, ...]] = (
    0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1, 1.25, 1.5, 2
)  # fmt: skip
"""``used / limit``. Dense near 1 where verdicts are made (0.8 = the ``too_tight`` threshold,
1 = at the limit); above 1 because a token, cost or time budget can be overshot by the last call."""
GEN_AI_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92
)  # fmt: skip
"""The GenAI conventions' advice for ``gen_ai.client.operation.duration`` (seconds); also the
model-call latency buckets."""
GEN_AI_TOKEN_BUCKETS: Final[tuple[float, ...]] = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864
)  # fmt: skip
"""The GenAI conventions' advice for ``gen_ai.client.token.usage``."""
TOOL_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120
)  # fmt: skip
"""Tool-call latency: in-process lookups to minute-long jobs."""

LIMIT_METRICS: Final[Mapping[str, tuple[str, str]]] = {
    "steps": ("loopwatch_limit_steps", "steps"),
    "model_calls": ("loopwatch_limit_model_calls", "calls"),
    "tool_calls": ("loopwatch_limit_tool_calls", "calls"),
    "tokens": ("loopwatch_limit_tokens", "tokens"),
    "cost_usd": ("loopwatch_limit_cost_usd", "usd"),
    "wall_s": ("loopwatch_limit_wall_seconds", "seconds"),
}
"""Budget -> (gauge name, unit). One gauge per unit, so that no query can add steps to dollars
(Prometheus naming: one unit per metric, the unit in the name)."""


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


class _Histogram:
    """Per-bucket (non-cumulative) counts and the sum of one label set; for run histograms, the
    latest exemplar (trace id, value, time) of each bucket."""

    __slots__ = ("counts", "exemplars", "total")

    def __init__(self, n_buckets: int) -> None:
        self.counts = [0] * (n_buckets + 1)  # the last slot is +Inf
        self.total = 0.0
        self.exemplars: list[Exemplar | None] | None = None


# (name, help, label names, buckets, unit) of each histogram, in exposition order.
_RUN_LABELS: Final = ("task_type", "outcome")
_GEN_AI_LABELS: Final = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model")
_HISTOGRAMS: Final[tuple[tuple[str, str, tuple[str, ...], tuple[float, ...], str], ...]] = (
    (
        "loopwatch_run_steps",
        "Steps per run (one model call plus the tool calls it asked for).",
        _RUN_LABELS,
        STEPS_BUCKETS,
        "steps",
    ),
    (
        "loopwatch_run_tokens",
        "Tokens per run (input + output).",
        _RUN_LABELS,
        TOKENS_BUCKETS,
        "tokens",
    ),
    ("loopwatch_run_cost_usd", "Cost per run in US dollars.", _RUN_LABELS, COST_USD_BUCKETS, "usd"),
    (
        "loopwatch_run_duration_seconds",
        "Wall-clock duration per run.",
        _RUN_LABELS,
        DURATION_SECONDS_BUCKETS,
        "seconds",
    ),
    (
        "loopwatch_budget_utilization_ratio",
        "Share of each budget a run used at its end (used / limit; budgets that are off are"
        " not observed).",
        ("task_type", "budget", "outcome"),
        UTILIZATION_BUCKETS,
        "ratio",
    ),
    (
        "loopwatch_model_call_duration_seconds",
        "Latency of one model call (a chat span), by the model asked for.",
        ("task_type", "model"),
        GEN_AI_DURATION_BUCKETS,
        "seconds",
    ),
    (
        "loopwatch_tool_call_duration_seconds",
        "Latency of one tool call (retries inside the call included).",
        ("task_type", "tool"),
        TOOL_DURATION_BUCKETS,
        "seconds",
    ),
    (
        "gen_ai_client_operation_duration_seconds",
        "GenAI operation duration (OTel GenAI client metric gen_ai.client.operation.duration).",
        (*_GEN_AI_LABELS, "error_type"),
        GEN_AI_DURATION_BUCKETS,
        "seconds",
    ),
    (
        "gen_ai_client_token_usage",
        "Tokens used per GenAI operation (OTel GenAI client metric gen_ai.client.token.usage).",
        (*_GEN_AI_LABELS, "gen_ai_token_type"),
        GEN_AI_TOKEN_BUCKETS,
        "",
    ),
)
(
    _STEPS,
    _TOKENS,
    _COST,
    _DURATION,
    _UTILIZATION,
    _MODEL_LATENCY,
    _TOOL_LATENCY,
    _GEN_AI_DURATION,
    _GEN_AI_TOKENS,
) = range(9)
_EXEMPLARY: Final = frozenset({_STEPS, _TOKENS, _COST, _DURATION})
"""The run histograms: each bucket keeps the trace id of the latest run that fell in it."""
# The `le` label values, spelled as prometheus_client spells them ("1.0", "1e+06", "+Inf").
_LES: Final[tuple[tuple[str, ...], ...]] = tuple(
    (*(floatToGoString(b) for b in bounds), "+Inf")  # type: ignore[no-untyped-call]
    for _, _, _, bounds, _ in _HISTOGRAMS
)
_RUNS_HELP: Final = "Agent runs ended, by stop reason."
_LIMIT_HELP: Final = "The {budget} limit the latest run of a task type ran under (absent = off)."
_TOOL_CALLS_HELP: Final = "Tool calls ended, by status (ok or error)."
_TOOL_RETRIES_HELP: Final = "Retries made inside tool calls."
_NUDGES_HELP: Final = "Nudges: a detector tripped and the model was told what it repeats."
_NUDGE_DETECTORS: Final = frozenset(
    {"repeated_action", "repeated_tool_call", "repeated_error", "tool_failures", "no_progress"}
)


def _counter(
    name: str, doc: str, label_names: tuple[str, ...], values: Mapping[tuple[str, ...], int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=label_names)
    for key, n in sorted(values.items()):
        family.add_metric(key, n)
    return family


class _DroppedCollector:
    """Exposes the process-wide drop counts (``drops.dropped()``) as a counter family."""

    _NAME: Final = "loopwatch_telemetry_dropped"
    _HELP: Final = (
        "Telemetry lost instead of breaking the agent (spans, observer calls), by reason."
    )

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self._NAME, self._HELP, labels=["reason"])]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self._NAME, self._HELP, labels=["reason"])
        counts = dropped()
        # Seed this module's own reasons so the series exist (and rate() works) from the start.
        for reason in (DROP_METRICS_INVALID_SPAN, DROP_METRICS_FAILED):
            counts.setdefault(reason, 0)
        for reason, n in sorted(counts.items()):
            family.add_metric([reason], n)
        return [family]


class _SpanMetricsCollector:
    """Holds the span-derived values and renders them as metric families on scrape.

    Values are plain Python numbers updated under one lock per span, rather than one
    prometheus_client metric child per series: an ended run span touches up to a dozen series,
    and this keeps its cost to a few microseconds. A scrape sees each span either fully counted
    or not at all.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[tuple[str, ...], int] = {}
        self.histograms: tuple[dict[tuple[str, ...], _Histogram], ...] = tuple(
            {} for _ in _HISTOGRAMS
        )
        self.limits: dict[tuple[str, ...], float] = {}
        self.tool_calls: dict[tuple[str, ...], int] = {}
        self.tool_retries: dict[tuple[str, ...], int] = {}
        self.nudges: dict[tuple[str, ...], int] = {}

    def describe(self) -> Iterable[Metric]:
        return self._families(empty=True)

    def collect(self) -> Iterable[Metric]:
        return self._families(empty=False)

    def _families(self, *, empty: bool) -> list[Metric]:
        with self.lock:
            runs = {} if empty else dict(self.runs)
            hists = [
                {}
                if empty
                else {
                    k: (
                        list(h.counts),
                        h.total,
                        None if h.exemplars is None else list(h.exemplars),
                    )
                    for k, h in d.items()
                }
                for d in self.histograms
            ]
            limits = {} if empty else dict(self.limits)
            tool_calls = {} if empty else dict(self.tool_calls)
            tool_retries = {} if empty else dict(self.tool_retries)
            nudges = {} if empty else dict(self.nudges)

        families: list[Metric] = [
            _counter("loopwatch_runs", _RUNS_HELP, ("task_type", "stop_reason", "outcome"), runs)
        ]
        for (name, doc, label_names, _, unit), les, series in zip(
            _HISTOGRAMS, _LES, hists, strict=True
        ):
            hist = HistogramMetricFamily(name, doc, labels=label_names, unit=unit)
            for key, (counts, total, exemplars) in sorted(series.items()):
                cumulative = accumulate(counts)
                if exemplars is None:
                    buckets: list[Any] = list(zip(les, cumulative, strict=True))
                else:
                    buckets = [
                        (le, n, ex) if ex is not None else (le, n)
                        for le, n, ex in zip(les, cumulative, exemplars, strict=True)
                    ]
                hist.add_metric(key, buckets, total)
            families.append(hist)
        for budget in sc.BUDGETS:
            name, unit = LIMIT_METRICS[budget]
            gauge = GaugeMetricFamily(
                name, _LIMIT_HELP.format(budget=budget), labels=("task_type",), unit=unit
            )
            for (task, limit_budget), limit in sorted(limits.items()):
                if limit_budget == budget:
                    gauge.add_metric((task,), limit)
            families.append(gauge)
        families.append(
            _counter(
                "loopwatch_tool_calls",
                _TOOL_CALLS_HELP,
                ("task_type", "tool", "status"),
                tool_calls,
            )
        )
        families.append(
            _counter(
                "loopwatch_tool_retries", _TOOL_RETRIES_HELP, ("task_type", "tool"), tool_retries
            )
        )
        families.append(
            _counter("loopwatch_nudges", _NUDGES_HELP, ("task_type", "detector"), nudges)
        )
        return families

    def observe(
        self, which: int, key: tuple[str, ...], value: float, trace_id: str | None = None
    ) -> None:
        """Adds ``value`` to a histogram; the caller holds :attr:`lock`. ``trace_id`` becomes
        the bucket's exemplar (run histograms only)."""
        series = self.histograms[which]
        hist = series.get(key)
        if hist is None:
            hist = series[key] = _Histogram(len(_HISTOGRAMS[which][3]))
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = "<=").
        i = bisect_left(_HISTOGRAMS[which][3], value)
        hist.counts[i] += 1
        hist.total += value
        if trace_id is not None and which in _EXEMPLARY:
            exemplars = hist.exemplars
            if exemplars is None:
                exemplars = hist.exemplars = [None] * len(hist.counts)
            exemplars[i] = Exemplar({"trace_id": trace_id}, value, time.time())


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
        self._values = _SpanMetricsCollector()
        self._collectors: list[Any] = []
        for collector in (self._values, _DroppedCollector()):
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
                    name = detector if detector in _NUDGE_DETECTORS else OTHER
                    values.nudges[(task, name)] = values.nudges.get((task, name), 0) + 1
            if steps is not None:
                values.observe(_STEPS, key, steps, trace_id)
            if tokens is not None:
                values.observe(_TOKENS, key, tokens, trace_id)
            if cost is not None:
                values.observe(_COST, key, cost, trace_id)
            if duration is not None:
                values.observe(_DURATION, key, duration, trace_id)
            for budget, budget_used, limit in zip(sc.BUDGETS, used, limits, strict=True):
                if limit is not None and limit > 0 and budget_used is not None:
                    values.observe(_UTILIZATION, (task, budget, outcome), budget_used / limit)
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
                values.observe(_MODEL_LATENCY, (task, model), duration)
                values.observe(_GEN_AI_DURATION, (*gen_ai, error), duration)
            if tokens_in is not None:
                values.observe(_GEN_AI_TOKENS, (*gen_ai, "input"), tokens_in)
            if tokens_out is not None:
                values.observe(_GEN_AI_TOKENS, (*gen_ai, "output"), tokens_out)

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
                values.observe(_TOOL_LATENCY, retry_key, duration)


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


@dataclass(eq=False)
class MetricsServer:
    """A running ``/metrics`` endpoint; stop it with :meth:`stop` or use it as a context manager."""

    host: str
    """The address it is bound to."""
    port: int
    """The port it listens on (the real one when 0 was asked for)."""
    _httpd: Any = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` has been called."""
        return self._stopped

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self, timeout: float = 5.0) -> None:
        """Stops serving and closes the socket. Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MetricsServerError(OSError):
    """The ``/metrics`` server could not start (typically: the port is taken)."""


def serve_metrics(
    registry: CollectorRegistry | MetricsSpanProcessor,
    port: int | None = None,
    *,
    host: str = "127.0.0.1",
) -> MetricsServer:
    """Serves ``registry`` (or a processor's registry) as ``/metrics`` over HTTP in a daemon thread.

    ``port``: argument -> ``LOOPWATCH_METRICS_PORT`` -> 9464; 0 picks a free port (read it from
    :attr:`MetricsServer.port`). Binds 127.0.0.1 unless ``host`` says otherwise.

    Raises:
        ValueError: the port is not an integer in 0..65535.
        MetricsServerError: the server could not bind (the message names host and port).
    """
    if isinstance(registry, MetricsSpanProcessor):
        registry = registry.registry
    if port is None:
        port = env_int(METRICS_PORT_ENV, DEFAULT_METRICS_PORT, minimum=0, maximum=65535)
    check_int("metrics port", port, minimum=0, maximum=65535)
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsServerError(
            exc.errno,
            f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}; pick another port"
            f" (metrics_port=..., {METRICS_PORT_ENV}) or stop the process holding it",
        ) from exc
    return MetricsServer(host=host, port=int(httpd.server_address[1]), _httpd=httpd, _thread=thread)
