"""A real Prometheus server scrapes a real loopwatch /metrics endpoint fed by instrumented runs of
the reference loop, evaluates loopwatch's rules, and fires LoopwatchRepeatedErrorRateRising.

The rules are ``render_rules`` of test-scaled thresholds (the same expressions with an 8 s short
window and a 5 min baseline instead of 15 min and 6 h), so a baseline of healthy runs followed by
a tool outage fits in well under a minute. With H seconds of healthy runs, the alert is expected
from the first seconds of the outage until about H seconds into it (short share 100% against a
baseline share of t / (H + t)).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import require_program
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.observer import set_observer_factory
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.telemetry.pipeline import instrument
from loopwatch.instrumentation.testing import FakeModel, tool_call
from loopwatch.queries.analysis.alerts import AlertThresholds, render_rules
from opentelemetry.sdk.trace import TracerProvider

from tests.prometheus_server import PrometheusServer, scrape_config

pytestmark = pytest.mark.slow

SCALED = AlertThresholds(short_window="8s", baseline_window="5m", min_runs=20)
HEALTHY_S = 20.0
DEADLINE_S = 60.0


def _lookup(q: str) -> str:
    """Look something up."""
    return f"result for {q}"


def _healthy_run(registry: ToolRegistry, i: int) -> str:
    model = FakeModel([tool_call("lookup", q=f"q{i}"), "done"])
    result = run(model, registry, "go", task_type="search", raise_on_stop=False)
    return result.stop_reason.value


def _outage_run(registry: ToolRegistry, i: int) -> str:
    # the tool is gone: every call errors the same way, so the guard stops with repeated_error
    calls = [tool_call("search_index", q=f"q{i}-{k}") for k in range(5)]
    model = FakeModel(calls, then="done")
    result = run(
        model, registry, "go", task_type="search", limits=LoopLimits(), raise_on_stop=False
    )
    return result.stop_reason.value


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[PrometheusServer, Any]]:
    require_program("prometheus")  # before instrumenting: skipped (or failed in CI) at once
    registry = ToolRegistry(breaker=None)
    registry.register(_lookup, name="lookup")
    handle = instrument(tracer_provider=TracerProvider(), metrics_port=0)
    assert handle.metrics_server is not None
    target = f"127.0.0.1:{handle.metrics_server.port}"
    (tmp_path / "rules.yml").write_text(render_rules(SCALED), encoding="utf-8")
    config = scrape_config([target], job="agents", rule_files=["rules.yml"])
    try:
        with PrometheusServer(tmp_path, config) as prom:
            yield prom, registry
    finally:
        handle.shutdown()
        set_observer_factory(None)


def _firing(prom: PrometheusServer) -> list[dict[str, Any]]:
    alerts = prom.get_json("/api/v1/alerts")["data"]["alerts"]
    return [
        a
        for a in alerts
        if a["labels"].get("alertname") == "LoopwatchRepeatedErrorRateRising"
        and a["state"] == "firing"
    ]


def test_prometheus_fires_the_repeated_error_alert_from_real_runs(
    prometheus: tuple[PrometheusServer, Any],
) -> None:
    prom, registry = prometheus
    i = 0
    # healthy runs: the baseline; the alert stays silent
    start = time.monotonic()
    while time.monotonic() - start < HEALTHY_S:
        for _ in range(5):
            assert _healthy_run(registry, i) == "completed"
            i += 1
        time.sleep(0.1)
    targets = prom.get_json("/api/v1/targets")["data"]["activeTargets"]
    assert [t["health"] for t in targets] == ["up"], targets
    assert _firing(prom) == []

    # the outage: every run stops on repeated_error until the alert fires (bounded wait)
    fired: list[dict[str, Any]] = []
    start = time.monotonic()
    while time.monotonic() - start < DEADLINE_S:
        for _ in range(5):
            assert _outage_run(registry, i) == "repeated_error"
            i += 1
        fired = _firing(prom)
        if fired:
            break
        time.sleep(0.1)
    assert fired, "LoopwatchRepeatedErrorRateRising did not fire within the deadline"
    (alert,) = fired
    assert alert["labels"]["task_type"] == "search" and alert["labels"]["severity"] == "warning"
    assert "runs stopping on repeated errors are rising" in alert["annotations"]["summary"]
    # the recorded per-task-type share it fired on
    result = prom.query("task_type:loopwatch_runs_repeated_error:ratio_rate8s")
    assert result and result[0]["metric"]["task_type"] == "search"
    assert float(result[0]["value"][1]) >= 0.05
