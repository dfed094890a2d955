"""Span-derived Prometheus metrics (docs/metrics.md): real OTel SDK spans, HTTP and promtool."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import require_program
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.drops import dropped, record_drop
from loopwatch.instrumentation.telemetry.metrics import (
    DROP_METRICS_FAILED,
    DROP_METRICS_INVALID_SPAN,
    OTHER,
    MetricsServerError,
    MetricsSpanProcessor,
    serve_metrics,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import Status, StatusCode, Tracer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

T0 = 1_700_000_000_000_000_000  # a fixed start time (ns), so durations are exact
S = 1_000_000_000

ALLOWED_LABELS = {
    "task_type", "stop_reason", "outcome", "budget", "tool", "status", "reason", "le", "model",
    "gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_token_type",
    "error_type",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _no_config_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults are under test: the caller's environment must not change them."""
    for name in ("LOOPWATCH_MAX_TASK_TYPES", "LOOPWATCH_MAX_TOOLS", "LOOPWATCH_METRICS_PORT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def processor(registry: CollectorRegistry) -> MetricsSpanProcessor:
    return MetricsSpanProcessor(registry)


@pytest.fixture
def tracer(processor: MetricsSpanProcessor) -> Iterator[Tracer]:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    yield provider.get_tracer("loopwatch.tests")
    provider.shutdown()


def budget_attrs(used: Mapping[str, float], limits: Mapping[str, float]) -> dict[str, Any]:
    """The ``loopwatch.budget.*`` attributes; limits that are off are absent, as the tracer does."""
    attrs: dict[str, Any] = {}
    utilizations = [0.0]
    for budget in sc.BUDGETS:
        attrs[sc.budget_used(budget)] = used.get(budget, 0)
        if budget in limits:
            attrs[sc.budget_limit(budget)] = limits[budget]
            utilizations.append(used.get(budget, 0) / limits[budget])
    attrs[sc.BUDGET_MAX_UTILIZATION] = max(utilizations)
    return attrs


def emit_run(
    tracer: Tracer,
    *,
    task_type: str,
    stop_reason: str,
    outcome: str,
    used: Mapping[str, float],
    limits: Mapping[str, float],
    duration_s: float,
    tools: list[dict[str, Any]] | None = None,
    run_id: str = "run-0001",
) -> None:
    """A run as the instrumented loop emits it: run span > step spans > chat and tool spans."""
    common = {sc.RUN_ID: run_id, sc.TASK_TYPE: task_type}
    run = tracer.start_span(f"{sc.SPAN_RUN} agent", start_time=T0)
    run.set_attributes(
        {
            **common,
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.GEN_AI_AGENT_NAME: "agent",
            sc.GEN_AI_USAGE_INPUT_TOKENS: int(used.get("tokens", 0) * 0.75),
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: int(used.get("tokens", 0) * 0.25),
            sc.STOP_REASON: stop_reason,
            sc.OUTCOME: outcome,
            sc.STOP_EXPLANATION: f"stopped: {stop_reason}",
            sc.LIMITS_VERSION: "abc123",
            **budget_attrs(used, limits),
        }
    )
    if outcome != "success":
        run.set_attribute(sc.ERROR_TYPE, stop_reason)
        run.set_status(Status(StatusCode.ERROR, stop_reason))
    if outcome == "limit":
        run.set_attribute(sc.LIMIT, {"max_steps": "steps"}.get(stop_reason, stop_reason))
    with tracer.start_as_current_span(f"{sc.SPAN_STEP} 1", attributes=common) as step:
        step.set_attribute(sc.GUARD_DECISION, "continue")
        with tracer.start_as_current_span(
            f"{sc.SPAN_MODEL} m",
            attributes={
                **common,
                sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
                sc.GEN_AI_REQUEST_MODEL: "m",
            },
        ):
            pass
        for i, tool in enumerate(tools or []):
            emit_tool(tracer, task_type=task_type, call_id=f"call-{i}", run_id=run_id, **tool)
    run.end(end_time=T0 + int(duration_s * S))


def emit_tool(
    tracer: Tracer,
    *,
    task_type: str,
    name: str,
    status: str | None = "ok",
    retries: int | None = 0,
    call_id: str = "call-0",
    run_id: str = "run-0001",
    span_error: bool = False,
) -> None:
    attrs: dict[str, Any] = {
        sc.RUN_ID: run_id,
        sc.TASK_TYPE: task_type,
        sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
        sc.GEN_AI_TOOL_NAME: name,
        sc.GEN_AI_TOOL_CALL_ID: call_id,
        sc.TOOL_FINGERPRINT: "f00d",
    }
    if status is not None:
        attrs[sc.TOOL_STATUS] = status
    if retries is not None:
        attrs[sc.TOOL_RETRIES] = retries
    if status == "error":
        attrs[sc.ERROR_CODE] = "NOT_FOUND"
        attrs[sc.ERROR_FINGERPRINT] = "dead"
    with tracer.start_as_current_span(f"{sc.SPAN_TOOL} {name}", attributes=attrs) as span:
        if status == "error" or span_error:
            span.set_status(Status(StatusCode.ERROR, "NOT_FOUND"))


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def label_values(registry: CollectorRegistry, metric: str, label: str) -> set[str]:
    return {
        s.labels[label]
        for family in registry.collect()
        if family.name == metric
        for s in family.samples
        if label in s.labels
    }


def all_labels(registry: CollectorRegistry) -> list[dict[str, str]]:
    return [s.labels for family in registry.collect() for s in family.samples]


def drops_of(reason: str) -> int:
    return dropped().get(reason, 0)


def full_fleet(tracer: Tracer) -> None:
    """A success, a limit stop (max_steps) and a stuck stop (repeated_error), with tool spans."""
    emit_run(
        tracer,
        task_type="support",
        stop_reason="completed",
        outcome="success",
        used={"steps": 3, "model_calls": 3, "tool_calls": 2, "tokens": 1500, "cost_usd": 0.012},
        limits={"steps": 8, "tokens": 10000},
        duration_s=12.5,
        tools=[{"name": "search"}, {"name": "read_file", "retries": 1}],
        run_id="run-success-7f3a",
    )
    emit_run(
        tracer,
        task_type="support",
        stop_reason="max_steps",
        outcome="limit",
        used={"steps": 8, "model_calls": 8, "tool_calls": 8, "tokens": 9000, "cost_usd": 0.2},
        limits={"steps": 8, "tokens": 10000},
        duration_s=70,
        tools=[{"name": "search"}],
        run_id="run-limit-91bc",
    )
    emit_run(
        tracer,
        task_type="coding",
        stop_reason="repeated_error",
        outcome="stuck",
        used={"steps": 4, "model_calls": 4, "tool_calls": 3, "tokens": 4000, "cost_usd": 0.03},
        limits={"steps": 15, "wall_s": 300},
        duration_s=3,
        tools=[
            {"name": "read_file", "status": "error", "retries": 2},
            {"name": "read_file", "status": "error", "retries": 2},
            {"name": "read_file", "status": "error", "retries": 0},
        ],
        run_id="run-stuck-0d44",
    )


# --- the series of docs/metrics.md, per kind of ending --------------------------------------------


def test_success_run(registry: CollectorRegistry, tracer: Tracer) -> None:
    full_fleet(tracer)
    lbl = {"task_type": "support", "outcome": "success"}
    assert value(registry, "loopwatch_runs_total", stop_reason="completed", **lbl) == 1
    assert value(registry, "loopwatch_run_steps_count", **lbl) == 1
    assert value(registry, "loopwatch_run_steps_sum", **lbl) == 3
    assert value(registry, "loopwatch_run_steps_bucket", le="2.0", **lbl) == 0
    assert value(registry, "loopwatch_run_steps_bucket", le="3.0", **lbl) == 1
    assert value(registry, "loopwatch_run_tokens_sum", **lbl) == 1500
    assert value(registry, "loopwatch_run_tokens_bucket", le="1000.0", **lbl) == 0
    assert value(registry, "loopwatch_run_tokens_bucket", le="2000.0", **lbl) == 1
    assert value(registry, "loopwatch_run_cost_usd_sum", **lbl) == pytest.approx(0.012)
    assert value(registry, "loopwatch_run_cost_usd_bucket", le="0.01", **lbl) == 0
    assert value(registry, "loopwatch_run_cost_usd_bucket", le="0.025", **lbl) == 1
    # Duration comes from the span's own start and end times.
    assert value(registry, "loopwatch_run_duration_seconds_sum", **lbl) == pytest.approx(12.5)
    assert value(registry, "loopwatch_run_duration_seconds_bucket", le="10.0", **lbl) == 0
    assert value(registry, "loopwatch_run_duration_seconds_bucket", le="20.0", **lbl) == 1
    # Utilization only for the budgets that are on.
    util = "loopwatch_budget_utilization_ratio"
    assert value(registry, f"{util}_sum", budget="steps", **lbl) == pytest.approx(3 / 8)
    assert value(registry, f"{util}_sum", budget="tokens", **lbl) == pytest.approx(0.15)
    assert value(registry, f"{util}_count", budget="model_calls", **lbl) is None
    assert value(registry, f"{util}_count", budget="cost_usd", **lbl) is None
    # Step and chat spans are not runs: one run per task type and ending, no more.
    assert value(registry, "loopwatch_runs_total", stop_reason="completed", **lbl) == 1
    assert label_values(registry, "loopwatch_runs", "outcome") == {"success", "limit", "stuck"}


def test_limit_stop_max_steps(registry: CollectorRegistry, tracer: Tracer) -> None:
    full_fleet(tracer)
    lbl = {"task_type": "support", "outcome": "limit"}
    assert value(registry, "loopwatch_runs_total", stop_reason="max_steps", **lbl) == 1
    assert value(registry, "loopwatch_run_steps_bucket", le="6.0", **lbl) == 0
    assert value(registry, "loopwatch_run_steps_bucket", le="8.0", **lbl) == 1
    util = "loopwatch_budget_utilization_ratio_bucket"
    # At the limit exactly: used / limit = 1 falls in le="1.0", not below it.
    assert value(registry, util, budget="steps", le="0.95", **lbl) == 0
    assert value(registry, util, budget="steps", le="1.0", **lbl) == 1
    assert value(registry, util, budget="tokens", le="0.9", **lbl) == 1
    assert value(registry, "loopwatch_run_duration_seconds_bucket", le="60.0", **lbl) == 0
    assert value(registry, "loopwatch_run_duration_seconds_bucket", le="120.0", **lbl) == 1
    # The limits the task type ran under; limits that are off are not exported.
    assert value(registry, "loopwatch_limit_steps", task_type="support") == 8
    assert value(registry, "loopwatch_limit_tokens", task_type="support") == 10000
    assert value(registry, "loopwatch_limit_model_calls", task_type="support") is None
    assert value(registry, "loopwatch_limit_steps", task_type="coding") == 15
    assert value(registry, "loopwatch_limit_wall_seconds", task_type="coding") == 300
    # Both support runs are in the steps histogram, split by outcome.
    assert value(registry, "loopwatch_run_steps_count", task_type="support", outcome="success") == 1


def test_stuck_stop_repeated_error(registry: CollectorRegistry, tracer: Tracer) -> None:
    full_fleet(tracer)
    lbl = {"task_type": "coding", "outcome": "stuck"}
    assert value(registry, "loopwatch_runs_total", stop_reason="repeated_error", **lbl) == 1
    assert value(registry, "loopwatch_run_steps_sum", **lbl) == 4
    assert value(registry, "loopwatch_run_duration_seconds_sum", **lbl) == pytest.approx(3)
    util = "loopwatch_budget_utilization_ratio_sum"
    assert value(registry, util, budget="steps", **lbl) == pytest.approx(4 / 15)
    assert value(registry, util, budget="wall_s", **lbl) == 0
    # No other stop reason appears for coding.
    assert value(registry, "loopwatch_runs_total", stop_reason="completed", **lbl) is None


def test_tool_spans_ok_error_and_retries(registry: CollectorRegistry, tracer: Tracer) -> None:
    full_fleet(tracer)
    calls = "loopwatch_tool_calls_total"
    retries = "loopwatch_tool_retries_total"
    assert value(registry, calls, task_type="support", tool="search", status="ok") == 2
    assert value(registry, calls, task_type="support", tool="read_file", status="ok") == 1
    assert value(registry, calls, task_type="coding", tool="read_file", status="error") == 3
    assert value(registry, calls, task_type="coding", tool="read_file", status="ok") is None
    assert value(registry, retries, task_type="support", tool="read_file") == 1
    assert value(registry, retries, task_type="coding", tool="read_file") == 4
    # A tool that never retried still has its retries series, at 0, for ratio queries.
    assert value(registry, retries, task_type="support", tool="search") == 0


def test_tool_status_falls_back_to_span_status(registry: CollectorRegistry, tracer: Tracer) -> None:
    emit_tool(tracer, task_type="t", name="fetch", status=None, retries=None, span_error=True)
    emit_tool(tracer, task_type="t", name="fetch", status=None, retries=None)
    calls = "loopwatch_tool_calls_total"
    assert value(registry, calls, task_type="t", tool="fetch", status="error") == 1
    assert value(registry, calls, task_type="t", tool="fetch", status="ok") == 1
    assert value(registry, "loopwatch_tool_retries_total", task_type="t", tool="fetch") == 0


def test_token_and_cost_fall_back_to_usage_attributes(registry: CollectorRegistry) -> None:
    processor = MetricsSpanProcessor(registry)
    counted = processor.observe_span_record(
        {
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.TASK_TYPE: "t",
            sc.STOP_REASON: "completed",
            sc.GEN_AI_USAGE_INPUT_TOKENS: 700,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: 50,
            sc.COST_USD: 0.004,
            sc.budget_used("wall_s"): 2.0,
        }
    )
    assert counted is True
    lbl = {"task_type": "t", "outcome": "success"}
    assert value(registry, "loopwatch_run_tokens_sum", **lbl) == 750
    assert value(registry, "loopwatch_run_cost_usd_sum", **lbl) == pytest.approx(0.004)
    # No span times given: the wall_s budget usage is the duration.
    assert value(registry, "loopwatch_run_duration_seconds_sum", **lbl) == 2.0
    # No steps attribute: nothing observed rather than a made-up 0.
    assert value(registry, "loopwatch_run_steps_count", **lbl) is None


def test_outcome_label_follows_the_stop_reason(registry: CollectorRegistry, tracer: Tracer) -> None:
    emit_run(
        tracer,
        task_type="t",
        stop_reason="timeout",
        outcome="not-an-outcome",
        used={"steps": 2, "wall_s": 31},
        limits={"wall_s": 30},
        duration_s=31,
    )
    assert label_values(registry, "loopwatch_runs", "outcome") == {"limit"}
    lbl = {"task_type": "t", "outcome": "limit", "budget": "wall_s"}
    assert value(registry, "loopwatch_budget_utilization_ratio_bucket", le="1.0", **lbl) == 0
    assert value(registry, "loopwatch_budget_utilization_ratio_bucket", le="1.25", **lbl) == 1


def test_limit_switched_off_removes_the_gauge(registry: CollectorRegistry, tracer: Tracer) -> None:
    used = {"steps": 2, "tokens": 10}
    emit_run(
        tracer,
        task_type="t",
        stop_reason="completed",
        outcome="success",
        used=used,
        limits={"steps": 8, "tokens": 100},
        duration_s=1,
    )
    assert value(registry, "loopwatch_limit_tokens", task_type="t") == 100
    emit_run(
        tracer,
        task_type="t",
        stop_reason="completed",
        outcome="success",
        used=used,
        limits={"steps": 12},
        duration_s=1,
    )
    assert value(registry, "loopwatch_limit_steps", task_type="t") == 12
    assert value(registry, "loopwatch_limit_tokens", task_type="t") is None


# --- labels stay bounded and anonymous ----------------------------------------------------------


def test_no_run_or_trace_id_in_any_label(registry: CollectorRegistry, tracer: Tracer) -> None:
    full_fleet(tracer)
    labels = all_labels(registry)
    assert labels
    assert {name for lbl in labels for name in lbl} <= ALLOWED_LABELS
    values = {v for lbl in labels for v in lbl.values()}
    assert not any(v.startswith("run-") or v.startswith("call-") for v in values)
    assert "f00d" not in values and "dead" not in values and "NOT_FOUND" not in values


def test_ten_thousand_task_types_stay_within_the_cap(
    registry: CollectorRegistry, processor: MetricsSpanProcessor, tracer: Tracer
) -> None:
    assert processor.max_task_types == 50
    for i in range(10_000):
        emit_tool(tracer, task_type=f"task-{i}", name="search")
        span = tracer.start_span(f"{sc.SPAN_RUN} agent")
        span.set_attributes(
            {
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.TASK_TYPE: f"task-{i}",
                sc.STOP_REASON: "completed",
                sc.budget_used("steps"): 1,
                sc.budget_limit("steps"): 8,
            }
        )
        span.end()
    for metric in ("loopwatch_runs", "loopwatch_run_steps", "loopwatch_tool_calls"):
        values = label_values(registry, metric, "task_type")
        assert len(values) == 50 + 1, metric
        assert OTHER in values
    total = "loopwatch_runs_total"
    lbl = {"stop_reason": "completed", "outcome": "success"}
    assert value(registry, total, task_type=OTHER, **lbl) == 10_000 - 50
    assert value(registry, total, task_type="task-0", **lbl) == 1
    # One limit gauge for many task types would be meaningless: none for `other`.
    assert label_values(registry, "loopwatch_limit_steps", "task_type") == {
        f"task-{i}" for i in range(50)
    }


def test_ten_thousand_tools_stay_within_the_cap(
    registry: CollectorRegistry, processor: MetricsSpanProcessor, tracer: Tracer
) -> None:
    assert processor.max_tools == 100
    for i in range(10_000):
        emit_tool(tracer, task_type="t", name=f"tool_{i}", retries=1)
    for metric in ("loopwatch_tool_calls", "loopwatch_tool_retries"):
        values = label_values(registry, metric, "tool")
        assert len(values) == 100 + 1, metric
    calls = "loopwatch_tool_calls_total"
    assert value(registry, calls, task_type="t", tool=OTHER, status="ok") == 10_000 - 100
    assert value(registry, "loopwatch_tool_retries_total", task_type="t", tool=OTHER) == 9_900


def test_a_value_named_other_takes_no_slot(registry: CollectorRegistry) -> None:
    processor = MetricsSpanProcessor(registry, max_task_types=2)
    for task in ("other", "a", "b", "c"):
        processor.observe_span_record(
            {
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.TASK_TYPE: task,
                sc.STOP_REASON: "error",
            }
        )
    assert label_values(registry, "loopwatch_runs", "task_type") == {"a", "b", OTHER}
    lbl = {"stop_reason": "error", "outcome": "error"}
    assert value(registry, "loopwatch_runs_total", task_type=OTHER, **lbl) == 2


def test_caps_argument_then_env_then_default(
    registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWATCH_MAX_TASK_TYPES", "3")
    monkeypatch.setenv("LOOPWATCH_MAX_TOOLS", "7")
    from_env = MetricsSpanProcessor(CollectorRegistry())
    assert (from_env.max_task_types, from_env.max_tools) == (3, 7)
    from_arg = MetricsSpanProcessor(CollectorRegistry(), max_task_types=5, max_tools=9)
    assert (from_arg.max_task_types, from_arg.max_tools) == (5, 9)
    monkeypatch.delenv("LOOPWATCH_MAX_TASK_TYPES")
    monkeypatch.delenv("LOOPWATCH_MAX_TOOLS")
    default = MetricsSpanProcessor(CollectorRegistry())
    assert (default.max_task_types, default.max_tools) == (50, 100)


def test_bad_caps_are_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"^max_task_types must be a positive integer, got 0$"):
        MetricsSpanProcessor(CollectorRegistry(), max_task_types=0)
    with pytest.raises(ValueError, match=r"^max_tools must be a positive integer, got '5'$"):
        MetricsSpanProcessor(CollectorRegistry(), max_tools="5")  # type: ignore[arg-type]
    monkeypatch.setenv("LOOPWATCH_MAX_TOOLS", "lots")
    with pytest.raises(
        ValueError, match=r"^LOOPWATCH_MAX_TOOLS must be a positive integer, got 'lots'$"
    ):
        MetricsSpanProcessor(CollectorRegistry())


def test_one_processor_per_registry(registry: CollectorRegistry) -> None:
    first = MetricsSpanProcessor(registry)
    with pytest.raises(ValueError, match=r"^this registry already holds loopwatch metrics"):
        MetricsSpanProcessor(registry)
    first.observe_span_record(
        {
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.TASK_TYPE: "t",
            sc.STOP_REASON: "completed",
        }
    )
    lbl = {"task_type": "t", "stop_reason": "completed", "outcome": "success"}
    assert value(registry, "loopwatch_runs_total", **lbl) == 1


def test_unregister_frees_the_registry(registry: CollectorRegistry) -> None:
    first = MetricsSpanProcessor(registry)
    first.unregister()
    assert (
        registry.get_sample_value(
            "loopwatch_telemetry_dropped_total", {"reason": DROP_METRICS_FAILED}
        )
        is None
    )
    second = MetricsSpanProcessor(registry)
    second.observe_span_record(
        {sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.TASK_TYPE: "t", sc.STOP_REASON: "refusal"}
    )
    lbl = {"task_type": "t", "stop_reason": "refusal", "outcome": "model"}
    assert value(registry, "loopwatch_runs_total", **lbl) == 1


# --- never breaks the pipeline ----------------------------------------------------------------


MALFORMED_RUNS: list[dict[str, Any]] = [
    {sc.STOP_REASON: "completed"},  # no task type
    {sc.TASK_TYPE: "", sc.STOP_REASON: "completed"},  # empty task type
    {sc.TASK_TYPE: 42, sc.STOP_REASON: "completed"},  # task type of the wrong type
    {sc.TASK_TYPE: "bogus-run", sc.STOP_REASON: "gave_up"},  # not a stop reason
    {sc.TASK_TYPE: "bogus-run", sc.STOP_REASON: "completed", sc.budget_used("steps"): "eight"},
    {sc.TASK_TYPE: "bogus-run", sc.STOP_REASON: "completed", sc.budget_used("tokens"): -5},
    {sc.TASK_TYPE: "bogus-run", sc.STOP_REASON: "completed", sc.budget_limit("steps"): True},
    {sc.TASK_TYPE: "bogus-run", sc.STOP_REASON: "completed", sc.COST_USD: [0.1, 0.2]},
    {sc.TASK_TYPE: "bogus-run", sc.STOP_REASON: ["completed"]},
]
MALFORMED_TOOLS: list[dict[str, Any]] = [
    {sc.TASK_TYPE: "bogus-tool"},  # no tool name
    {sc.TASK_TYPE: "bogus-tool", sc.GEN_AI_TOOL_NAME: 7},
    {sc.GEN_AI_TOOL_NAME: "bogus_tool", sc.RUN_ID: "r"},  # no task type
    {sc.TASK_TYPE: "bogus-tool", sc.GEN_AI_TOOL_NAME: "bogus_tool", sc.TOOL_STATUS: "maybe"},
    {sc.TASK_TYPE: "bogus-tool", sc.GEN_AI_TOOL_NAME: "bogus_tool", sc.TOOL_RETRIES: -1},
    {sc.TASK_TYPE: "bogus-tool", sc.GEN_AI_TOOL_NAME: "bogus_tool", sc.TOOL_RETRIES: 1.5},
    {sc.TASK_TYPE: "bogus-tool", sc.GEN_AI_TOOL_NAME: "bogus_tool", sc.TOOL_RETRIES: "2"},
]


def test_malformed_spans_are_dropped_and_counted(
    registry: CollectorRegistry, tracer: Tracer
) -> None:
    full_fleet(tracer)
    before_labels = all_labels(registry)
    before = drops_of(DROP_METRICS_INVALID_SPAN)
    for attrs in MALFORMED_RUNS:
        with tracer.start_as_current_span(f"{sc.SPAN_RUN} agent") as span:
            span.set_attributes({sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, **attrs})
    for attrs in MALFORMED_TOOLS:
        with tracer.start_as_current_span(f"{sc.SPAN_TOOL} x") as span:
            span.set_attributes({sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL, **attrs})
    assert drops_of(DROP_METRICS_INVALID_SPAN) - before == len(MALFORMED_RUNS) + len(
        MALFORMED_TOOLS
    )
    after_labels = all_labels(registry)
    # Nothing new but the drop counter's own value: no bogus labels, no partial observations.
    strip = [lbl for lbl in after_labels if "reason" not in lbl]
    assert strip == [lbl for lbl in before_labels if "reason" not in lbl]
    values = {v for lbl in after_labels for v in lbl.values()}
    assert not values & {"bogus-run", "bogus-tool", "bogus_tool", "gave_up", "maybe", "42", "7"}
    exposed = value(registry, "loopwatch_telemetry_dropped_total", reason=DROP_METRICS_INVALID_SPAN)
    assert exposed == drops_of(DROP_METRICS_INVALID_SPAN)


def test_plain_genai_spans_count_with_unknown_labels(
    registry: CollectorRegistry, tracer: Tracer
) -> None:
    # An agent without loopwatch's instrumentation: no loopwatch.* attribute at all.
    with (
        tracer.start_as_current_span(
            f"{sc.SPAN_RUN} helper",
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.GEN_AI_USAGE_INPUT_TOKENS: 100,
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
            },
        ),
        tracer.start_as_current_span(
            f"{sc.SPAN_TOOL} search",
            attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL, sc.GEN_AI_TOOL_NAME: "s"},
        ) as tool,
    ):
        tool.set_status(Status(StatusCode.ERROR))
    run = {"task_type": "unknown", "stop_reason": "unknown", "outcome": "unknown"}
    assert value(registry, "loopwatch_runs_total", **run) == 1
    tokens = {"task_type": "unknown", "outcome": "unknown"}
    assert value(registry, "loopwatch_run_tokens_sum", **tokens) == 120
    tool_labels = {"task_type": "unknown", "tool": "s", "status": "error"}
    assert value(registry, "loopwatch_tool_calls_total", **tool_labels) == 1


def test_model_call_latency_and_the_gen_ai_client_metrics(
    registry: CollectorRegistry, tracer: Tracer
) -> None:
    for i, (model, took_s, error) in enumerate(
        [("gpt-4o", 0.3, None), ("gpt-4o", 1.5, None), ("claude", 0.05, "TimeoutError")]
    ):
        attrs = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
            sc.GEN_AI_PROVIDER_NAME: "openai" if model == "gpt-4o" else "anthropic",
            sc.GEN_AI_REQUEST_MODEL: model,
            sc.GEN_AI_USAGE_INPUT_TOKENS: 100 + i,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10,
            sc.TASK_TYPE: "support",
            sc.RUN_ID: f"r{i}",
        }
        if error:
            attrs[sc.ERROR_TYPE] = error
        span = tracer.start_span(f"chat {model}", start_time=T0, attributes=attrs)
        span.end(end_time=T0 + int(took_s * S))
    lat = "loopwatch_model_call_duration_seconds"
    assert value(registry, f"{lat}_count", task_type="support", model="gpt-4o") == 2
    assert value(registry, f"{lat}_bucket", task_type="support", model="gpt-4o", le="0.32") == 1
    assert value(registry, f"{lat}_sum", task_type="support", model="claude") == pytest.approx(0.05)
    gen = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai"}
    dur = "gen_ai_client_operation_duration_seconds_count"
    assert value(registry, dur, gen_ai_request_model="gpt-4o", error_type="", **gen) == 2
    failed = {"gen_ai_provider_name": "anthropic", "gen_ai_request_model": "claude"}
    assert value(registry, dur, gen_ai_operation_name="chat", error_type="TimeoutError", **failed)
    tokens = "gen_ai_client_token_usage_sum"
    assert (
        value(registry, tokens, gen_ai_request_model="gpt-4o", gen_ai_token_type="input", **gen)
        == 201
    )
    assert (
        value(registry, tokens, gen_ai_request_model="gpt-4o", gen_ai_token_type="output", **gen)
        == 20
    )
    # No run id ever becomes a label.
    assert not [
        lbl
        for lbl in all_labels(registry)
        if any(v.startswith("r") and v[1:].isdigit() for v in lbl.values())
    ]


def test_model_label_is_bounded(tracer: Tracer) -> None:
    registry = CollectorRegistry()
    processor = MetricsSpanProcessor(registry, max_models=2)
    for i in range(5):
        attrs = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
            sc.GEN_AI_REQUEST_MODEL: f"m{i}",
            sc.TASK_TYPE: "t",
        }
        processor.observe_span_record(attrs, start_time_ns=T0, end_time_ns=T0 + S)
    models = label_values(registry, "loopwatch_model_call_duration_seconds", "model")
    assert models == {"m0", "m1", "other"}


def test_tool_call_latency(registry: CollectorRegistry, tracer: Tracer) -> None:
    attrs = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL, sc.GEN_AI_TOOL_NAME: "lookup",
        sc.TASK_TYPE: "support", sc.TOOL_STATUS: "ok", sc.TOOL_RETRIES: 0,
    }  # fmt: skip
    span = tracer.start_span("execute_tool lookup", start_time=T0, attributes=attrs)
    span.end(end_time=T0 + S // 5)
    lat = "loopwatch_tool_call_duration_seconds"
    assert value(registry, f"{lat}_bucket", task_type="support", tool="lookup", le="0.1") == 0
    assert value(registry, f"{lat}_bucket", task_type="support", tool="lookup", le="0.25") == 1


def test_openmetrics_has_units_and_trace_exemplars(
    registry: CollectorRegistry, tracer: Tracer
) -> None:
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    full_fleet(tracer)
    text = openmetrics(registry).decode()
    for name, unit in [
        ("loopwatch_run_duration_seconds", "seconds"),
        ("loopwatch_run_cost_usd", "usd"),
        ("loopwatch_limit_wall_seconds", "seconds"),
        ("loopwatch_limit_cost_usd", "usd"),
        ("loopwatch_budget_utilization_ratio", "ratio"),
    ]:
        assert f"# UNIT {name} {unit}" in text
    bucket_lines = [ln for ln in text.splitlines() if ln.startswith("loopwatch_run_steps_bucket")]
    with_exemplar = [ln for ln in bucket_lines if ' # {trace_id="' in ln]
    assert with_exemplar, bucket_lines
    trace_ids = {ln.split('trace_id="')[1][:32] for ln in with_exemplar}
    assert all(len(t) == 32 and int(t, 16) for t in trace_ids)
    # Exemplars only in OpenMetrics: the classic text format stays as it was.
    assert "trace_id" not in generate_latest(registry).decode()


def test_other_spans_are_ignored_and_not_drops(registry: CollectorRegistry, tracer: Tracer) -> None:
    before = dropped()
    with tracer.start_as_current_span("GET /health", attributes={"http.method": "GET"}):
        pass
    with tracer.start_as_current_span("bare"):
        pass
    with tracer.start_as_current_span("step 1", attributes={sc.STEP_INDEX: 1}):
        pass
    # Named like no run, model call or tool span (docs/telemetry.md): turned away by name.
    with tracer.start_as_current_span(
        "my_agent_run",
        attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.TASK_TYPE: "t"},
    ):
        pass
    assert dropped() == before
    assert not [lbl for lbl in all_labels(registry) if "reason" not in lbl]


class ExplodingAttributes(Mapping[str, Any]):
    """Attributes whose reads fail, as a broken decoder in the serve path might give."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("decoder bug")

    def get(self, key: str, default: Any = None) -> Any:
        if key == sc.GEN_AI_OPERATION_NAME:
            return sc.OP_INVOKE_AGENT
        raise RuntimeError("decoder bug")

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 1


def test_plain_records_of_the_wrong_shape_are_drops(processor: MetricsSpanProcessor) -> None:
    before = drops_of(DROP_METRICS_INVALID_SPAN)
    run = {sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.TASK_TYPE: "t"}
    assert processor.observe_span_record({**run, sc.STOP_REASON: ["completed"]}) is False
    assert processor.observe_span_record({**run, sc.STOP_REASON: {"r": 1}}) is False
    assert (
        processor.observe_span_record({**run, sc.STOP_REASON: "completed", sc.COST_USD: "1"})
        is False
    )
    assert drops_of(DROP_METRICS_INVALID_SPAN) - before == 3


class PlainMapping(Mapping[str, Any]):
    """A read-only mapping with no ``copy()``, as a hand-built ReadableSpan may carry."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def test_span_attributes_of_any_mapping_are_read(
    registry: CollectorRegistry, processor: MetricsSpanProcessor
) -> None:
    attrs = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
        sc.TASK_TYPE: "t",
        sc.STOP_REASON: "guardrail",
    }
    processor.on_end(ReadableSpan(name="invoke_agent a", attributes=PlainMapping(attrs)))  # type: ignore[arg-type]
    lbl = {"task_type": "t", "stop_reason": "guardrail", "outcome": "interrupted"}
    assert value(registry, "loopwatch_runs_total", **lbl) == 1


def test_failures_never_raise_and_are_counted(processor: MetricsSpanProcessor) -> None:
    before = drops_of(DROP_METRICS_FAILED)
    assert processor.observe_span_record(ExplodingAttributes()) is False
    # A real ReadableSpan whose status is broken: on_end swallows it.
    span = ReadableSpan(
        name="invoke_agent agent",
        attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL},
        status=None,  # type: ignore[arg-type]
    )
    processor.on_end(span)
    processor.on_end(ReadableSpan(name=None))  # type: ignore[arg-type]
    assert drops_of(DROP_METRICS_FAILED) - before == 3


def test_drops_from_anywhere_are_exposed(registry: CollectorRegistry) -> None:
    MetricsSpanProcessor(registry)
    reason = "test_metrics_exporter_down"
    before = value(registry, "loopwatch_telemetry_dropped_total", reason=reason) or 0
    record_drop(reason, 5)
    assert value(registry, "loopwatch_telemetry_dropped_total", reason=reason) == before + 5
    # The processor's own reasons exist from the start, so rate() has a series to work on.
    assert (
        value(registry, "loopwatch_telemetry_dropped_total", reason=DROP_METRICS_FAILED) is not None
    )


def test_observe_span_record_matches_on_end(registry: CollectorRegistry, tracer: Tracer) -> None:
    other = CollectorRegistry()
    plain = MetricsSpanProcessor(other)
    attrs = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
        sc.TASK_TYPE: "t",
        sc.STOP_REASON: "max_steps",
        **budget_attrs({"steps": 8, "tokens": 900}, {"steps": 8}),
    }
    assert plain.observe_span_record(attrs, start_time_ns=T0, end_time_ns=T0 + 4 * S) is True
    assert plain.observe_span_record({sc.GEN_AI_OPERATION_NAME: "embeddings"}) is False
    span = tracer.start_span("invoke_agent agent", start_time=T0, attributes=attrs)
    span.end(end_time=T0 + 4 * S)
    ours = generate_latest(registry).decode()
    theirs = generate_latest(other).decode()
    strip = [ln for ln in ours.splitlines() if "_created" not in ln and "dropped" not in ln]
    assert strip == [
        ln for ln in theirs.splitlines() if "_created" not in ln and "dropped" not in ln
    ]


def test_concurrent_spans_are_all_counted(registry: CollectorRegistry, tracer: Tracer) -> None:
    def worker(n: int) -> None:
        for i in range(250):
            emit_tool(tracer, task_type=f"t{n % 2}", name=f"tool{i % 3}", retries=1)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(
        s.value
        for family in registry.collect()
        if family.name == "loopwatch_tool_calls"
        for s in family.samples
        if s.name == "loopwatch_tool_calls_total"
    )
    assert total == 1000
    assert value(registry, "loopwatch_tool_retries_total", task_type="t0", tool="tool0") == 168


# --- /metrics over real HTTP, checked by promtool -------------------------------------------------


def fetch(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.headers.get("Content-Type", ""), response.read().decode()


def test_metrics_over_http_have_the_right_values(
    processor: MetricsSpanProcessor, tracer: Tracer
) -> None:
    full_fleet(tracer)
    with serve_metrics(processor, port=0) as server:
        assert server.host == "127.0.0.1" and server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        content_type, body = fetch(server.url)
    assert content_type.startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }

    def at(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert (
        at("loopwatch_runs_total", task_type="support", stop_reason="completed", outcome="success")
        == 1
    )
    assert (
        at("loopwatch_runs_total", task_type="support", stop_reason="max_steps", outcome="limit")
        == 1
    )
    assert (
        at(
            "loopwatch_runs_total",
            task_type="coding",
            stop_reason="repeated_error",
            outcome="stuck",
        )
        == 1
    )
    assert at("loopwatch_run_steps_sum", task_type="support", outcome="limit") == 8
    assert at("loopwatch_run_tokens_sum", task_type="coding", outcome="stuck") == 4000
    assert at("loopwatch_run_cost_usd_sum", task_type="support", outcome="limit") == pytest.approx(
        0.2
    )
    assert at("loopwatch_run_duration_seconds_sum", task_type="support", outcome="limit") == 70
    assert (
        at(
            "loopwatch_budget_utilization_ratio_bucket",
            task_type="support",
            budget="steps",
            outcome="limit",
            le="1.0",
        )
        == 1
    )
    assert at("loopwatch_limit_steps", task_type="support") == 8
    assert (
        at("loopwatch_tool_calls_total", task_type="coding", tool="read_file", status="error") == 3
    )
    assert at("loopwatch_tool_retries_total", task_type="coding", tool="read_file") == 4
    assert at("loopwatch_telemetry_dropped_total", reason=DROP_METRICS_FAILED) >= 0


def test_exposition_passes_promtool(processor: MetricsSpanProcessor, tracer: Tracer) -> None:
    promtool = require_program("promtool")
    full_fleet(tracer)
    record_drop("test_metrics_promtool")
    with serve_metrics(processor, port=0) as server:
        _, body = fetch(server.url)
    # Before the first span too: families with HELP/TYPE and no samples yet.
    empty = generate_latest(MetricsSpanProcessor().registry).decode()
    for exposition in (body, empty):
        proc = subprocess.run(
            [promtool, "check", "metrics"],
            input=exposition,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.strip() == "" and proc.stderr.strip() == "", proc.stdout + proc.stderr


def test_server_stops_and_frees_the_port(processor: MetricsSpanProcessor) -> None:
    server = serve_metrics(processor.registry, port=0)
    fetch(server.url)
    assert not server.stopped
    server.stop()
    server.stop()  # idempotent
    assert server.stopped
    with pytest.raises(urllib.error.URLError):
        fetch(server.url)
    again = serve_metrics(processor, port=server.port)  # the port is free again
    again.stop()


def test_taken_port_is_a_clear_error(processor: MetricsSpanProcessor) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(
            MetricsServerError, match=rf"cannot serve /metrics on 127.0.0.1:{port}: "
        ):
            serve_metrics(processor, port=port)
    finally:
        holder.close()


def test_bad_port_is_a_clear_error(
    processor: MetricsSpanProcessor, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(
        ValueError, match=r"^metrics port must be an integer in 0..65535, got 70000$"
    ):
        serve_metrics(processor, port=70000)
    monkeypatch.setenv("LOOPWATCH_METRICS_PORT", "http")
    with pytest.raises(
        ValueError, match=r"^LOOPWATCH_METRICS_PORT must be an integer in 0..65535, got 'http'$"
    ):
        serve_metrics(processor)


def test_port_from_env(processor: MetricsSpanProcessor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWATCH_METRICS_PORT", "0")
    with serve_metrics(processor) as server:
        assert server.port > 0
        fetch(server.url)


def test_promql_examples_in_the_docs_parse(tmp_path: Path) -> None:
    promtool = require_program("promtool")
    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    examples = re.findall(r"```promql\n(.*?)```", doc, flags=re.DOTALL)
    assert len(examples) >= 10
    rules = {
        "groups": [
            {
                "name": "docs_metrics_md",
                "rules": [
                    {"record": f"loopwatch:docs_example_{i}", "expr": expr.strip()}
                    for i, expr in enumerate(examples)
                ],
            }
        ]
    }
    path = tmp_path / "examples.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(examples)} rules found" in proc.stdout
