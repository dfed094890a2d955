"""The Prometheus families loopwatch's span-derived metrics are rendered as (docs/metrics.md):
their names, help texts, labels and buckets, and the collectors that hold the values between
scrapes. :class:`~loopwatch.instrumentation.telemetry.metrics.MetricsSpanProcessor` fills them."""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from itertools import accumulate
from typing import Any, Final

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from ..runtime import semconv as sc
from ..runtime.drops import dropped

__all__ = [
    "COST_USD_BUCKETS",
    "DROP_METRICS_FAILED",
    "DROP_METRICS_INVALID_SPAN",
    "DURATION_SECONDS_BUCKETS",
    "GEN_AI_DURATION_BUCKETS",
    "GEN_AI_TOKEN_BUCKETS",
    "HISTOGRAMS",
    "H_COST",
    "H_DURATION",
    "H_GEN_AI_DURATION",
    "H_GEN_AI_TOKENS",
    "H_MODEL_LATENCY",
    "H_STEPS",
    "H_TOKENS",
    "H_TOOL_LATENCY",
    "H_UTILIZATION",
    "LIMIT_METRICS",
    "NUDGE_DETECTORS",
    "STEPS_BUCKETS",
    "TOKENS_BUCKETS",
    "TOOL_DURATION_BUCKETS",
    "UTILIZATION_BUCKETS",
    "BucketCounts",
    "DroppedCollector",
    "SpanMetricsCollector",
]

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


class BucketCounts:
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
HISTOGRAMS: Final[tuple[tuple[str, str, tuple[str, ...], tuple[float, ...], str], ...]] = (
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
    H_STEPS,
    H_TOKENS,
    H_COST,
    H_DURATION,
    H_UTILIZATION,
    H_MODEL_LATENCY,
    H_TOOL_LATENCY,
    H_GEN_AI_DURATION,
    H_GEN_AI_TOKENS,
) = range(9)
_EXEMPLARY: Final = frozenset({H_STEPS, H_TOKENS, H_COST, H_DURATION})
"""The run histograms: each bucket keeps the trace id of the latest run that fell in it."""
# The `le` label values, spelled as prometheus_client spells them ("1.0", "1e+06", "+Inf").
_LES: Final[tuple[tuple[str, ...], ...]] = tuple(
    (*(floatToGoString(b) for b in bounds), "+Inf")  # type: ignore[no-untyped-call]
    for _, _, _, bounds, _ in HISTOGRAMS
)
_RUNS_HELP: Final = "Agent runs ended, by stop reason."
_LIMIT_HELP: Final = "The {budget} limit the latest run of a task type ran under (absent = off)."
_TOOL_CALLS_HELP: Final = "Tool calls ended, by status (ok or error)."
_TOOL_RETRIES_HELP: Final = "Retries made inside tool calls."
_NUDGES_HELP: Final = "Nudges: a detector tripped and the model was told what it repeats."
NUDGE_DETECTORS: Final = frozenset(
    {"repeated_action", "repeated_tool_call", "repeated_error", "tool_failures", "no_progress"}
)


def _counter(
    name: str, doc: str, label_names: tuple[str, ...], values: Mapping[tuple[str, ...], int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=label_names)
    for key, n in sorted(values.items()):
        family.add_metric(key, n)
    return family


class DroppedCollector:
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


class SpanMetricsCollector:
    """Holds the span-derived values and renders them as metric families on scrape.

    Values are plain Python numbers updated under one lock per span, rather than one
    prometheus_client metric child per series: an ended run span touches up to a dozen series,
    and this keeps its cost to a few microseconds. A scrape sees each span either fully counted
    or not at all.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[tuple[str, ...], int] = {}
        self.histograms: tuple[dict[tuple[str, ...], BucketCounts], ...] = tuple(
            {} for _ in HISTOGRAMS
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
            HISTOGRAMS, _LES, hists, strict=True
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
            hist = series[key] = BucketCounts(len(HISTOGRAMS[which][3]))
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = "<=").
        i = bisect_left(HISTOGRAMS[which][3], value)
        hist.counts[i] += 1
        hist.total += value
        if trace_id is not None and which in _EXEMPLARY:
            exemplars = hist.exemplars
            if exemplars is None:
                exemplars = hist.exemplars = [None] * len(hist.counts)
            exemplars[i] = Exemplar({"trace_id": trace_id}, value, time.time())
