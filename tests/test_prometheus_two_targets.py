"""A real Prometheus scrapes TWO agent processes' /metrics (two replicas: the same series names,
different ``instance`` labels), fed by real runs of the reference loop, and loads loopwatch's
rules. Every PromQL query documented in docs/metrics.md, every rule, and every panel of the
Grafana dashboard (docs/deploy/grafana/loopwatch-dashboard.json) must evaluate there without
error and return data: a query that works against one target but not two ("many-to-many matching
not allowed") fails here.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_program
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import Usage
from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor, serve_metrics
from loopwatch.instrumentation.telemetry.tracing import OTelObserverFactory
from loopwatch.instrumentation.testing import FakeModel, text_response, tool_call, tool_response
from opentelemetry.sdk.trace import TracerProvider

from tests.prometheus_server import PrometheusServer, scrape_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "metrics.md"
RULES = ROOT / "queries" / "analysis" / "rules" / "loopwatch-rules.yml"
DASHBOARD = ROOT / "docs" / "deploy" / "grafana" / "loopwatch-dashboard.json"
# The documented "is anything wrong" checks: empty while nothing is wrong.
QUIET = ("loopwatch_telemetry_dropped_total", 'task_type="other"')
USAGE = Usage(400, 60, 0.012)
NUDGE = LoopLimits(on_stuck="nudge")


def _lookup(q: str) -> str:
    """Look something up."""
    return f"result for {q}"


class _Replica:
    """One agent process's telemetry: its provider, metrics processor and /metrics server."""

    def __init__(self) -> None:
        self.provider = TracerProvider()
        self.metrics = MetricsSpanProcessor()
        self.provider.add_span_processor(self.metrics)
        self.server = serve_metrics(self.metrics, 0)
        self.factory = OTelObserverFactory(self.provider)
        self.registry = ToolRegistry(breaker=None)
        self.registry.register(_lookup, name="lookup")

    def runs(self, i: int) -> None:
        """One of each kind of ending, with cost: success, a step limit, a repeated error."""
        kw: dict[str, Any] = {"observer_factory": self.factory, "raise_on_stop": False}
        ok = FakeModel(
            [tool_response(tool_call("lookup", q=f"q{i}"), usage=USAGE), text_response("done")]
        )
        run(ok, self.registry, "go", task_type="search", **kw)
        busy = FakeModel(
            [tool_response(tool_call("lookup", q=f"b{i}-{k}"), usage=USAGE) for k in range(4)]
        )
        run(busy, self.registry, "go", task_type="search", limits=LoopLimits(max_steps=2), **kw)
        broken = [
            tool_response(tool_call("search_index", q=f"e{i}-{k}"), usage=USAGE) for k in range(5)
        ]
        run(FakeModel(broken, then="done"), self.registry, "go", task_type="triage", **kw)
        # a run whose repeat is nudged (on_stuck = "nudge"), then answered: loopwatch_nudges_total
        again = tool_response(tool_call("lookup", q=f"n{i}"), usage=USAGE)
        nudged = FakeModel([again, again, text_response("done")])
        run(nudged, self.registry, "go", task_type="search", limits=NUDGE, **kw)

    def close(self) -> None:
        self.server.stop()
        self.provider.shutdown()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    require_program("prometheus")  # before the replicas start: skipped (or failed in CI) at once
    tmp = tmp_path_factory.mktemp("prom2")
    replicas = [_Replica(), _Replica()]
    (tmp / "rules.yml").write_text(RULES.read_text(encoding="utf-8"), encoding="utf-8")
    targets = [f"127.0.0.1:{r.server.port}" for r in replicas]
    config = scrape_config(targets, job="agents", rule_files=["rules.yml"])
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set():
            for replica in replicas:
                replica.runs(i)
            i += 1
            stop.wait(0.25)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        with PrometheusServer(tmp, config, flags=["--enable-feature=exemplar-storage"]) as prom:

            def scraped() -> bool:
                up = _query(prom, "sum(up)")
                rules = _query(prom, "count(task_type:loopwatch_runs_repeated_error:ratio_rate6h)")
                return bool(up and up[0][1] == 2 and rules)

            prom.wait_for(scraped, 60, "scraping both targets with the rules")
            time.sleep(3)  # a few more scrapes, so every range has several samples
            yield prom
    finally:
        stop.set()
        feeder.join(10)
        for replica in replicas:
            replica.close()


def _query(prom: PrometheusServer, expr: str) -> list[tuple[dict[str, str], float]]:
    """Evaluate ``expr`` now; raises AssertionError with Prometheus's error when it fails."""
    body = prom.get_json("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert body["status"] == "success", f"{expr}\n-> {body.get('error')}"
    result = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return [({}, float(result[1]))]
    return [(r["metric"], float(r["value"][1])) for r in result]


def _documented_queries() -> list[str]:
    return re.findall(r"```promql\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_both_targets_are_scraped(prometheus: PrometheusServer) -> None:
    instances = {m["instance"] for m, _ in _query(prometheus, "loopwatch_limit_steps")}
    assert len(instances) == 2


@pytest.mark.parametrize("expr", _documented_queries(), ids=lambda e: e.split("(")[0][:40])
def test_every_documented_query_works_against_two_replicas(
    prometheus: PrometheusServer, expr: str
) -> None:
    result = _query(prometheus, expr)
    if any(marker in expr for marker in QUIET):
        assert result == [], "nothing is wrong, so this check must be empty"
        return
    assert result, f"no data: {expr}"
    assert any(not math.isnan(v) for _, v in result), f"only NaN: {expr}"


def test_the_step_limit_query_needs_the_aggregation(prometheus: PrometheusServer) -> None:
    """Why the docs aggregate the limit gauge: the plain join fails with two replicas."""
    bare = (
        "histogram_quantile(0.95, sum by (task_type, le) (rate(loopwatch_run_steps_bucket[1d])))"
        " / on (task_type) loopwatch_limit_steps"
    )
    with pytest.raises(AssertionError, match="many-to-many"):
        _query(prometheus, bare)


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: str(r.get("record") or r.get("alert")))
def test_every_rule_evaluates_against_two_replicas(
    prometheus: PrometheusServer, rule: dict[str, Any]
) -> None:
    result = _query(prometheus, rule["expr"])
    if "record" in rule:
        assert result, f"recording rule {rule['record']} returned nothing"
        # one series per task type, whatever the number of replicas
        keys = [tuple(sorted(m.items())) for m, _ in result]
        assert len(keys) == len(set(keys))
        assert {m.get("task_type") for m, _ in result} == {"search", "triage"}
    # Prometheus itself evaluated the rule too, without an error.
    groups = prometheus.get_json("/api/v1/rules")["data"]["groups"]
    name = rule.get("record") or rule.get("alert")
    loaded = [r for g in groups for r in g["rules"] if r["name"] == name]
    assert loaded and all(r["health"] == "ok" for r in loaded), loaded


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def _grafana(expr: str) -> str:
    """The query as Grafana sends it with the dashboard's defaults (all task types)."""
    for var, value in (
        ("$__rate_interval", "1m"),
        ("$__range", "1h"),
        ("$__interval", "15s"),
        ("$task_type", ".*"),
    ):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr}"
    return expr


def test_the_dashboard_has_the_panels_ops_teams_need() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    titles = [p["title"] for p in dashboard["panels"]]
    for wanted in ("Hit-the-limit rate", "Stop-reason mix", "repeated_error", "Spend on runs"):
        assert any(wanted in t for t in titles), (wanted, titles)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    # The repeated_error panel draws the alert's own threshold, the same 5% as the rule.
    repeated = next(p for p in dashboard["panels"] if "repeated_error" in p["title"])
    steps = repeated["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == 0.05
    assert ">= 0.05" in RULES.read_text(encoding="utf-8")


@pytest.mark.parametrize("panel", _panel_queries(), ids=lambda p: p[0][:40])
def test_every_dashboard_query_returns_data(
    prometheus: PrometheusServer, panel: tuple[str, str]
) -> None:
    title, expr = panel
    result = _query(prometheus, _grafana(expr))
    assert result, f"{title}: no data"
    assert any(not math.isnan(v) for _, v in result), f"{title}: only NaN"


def test_exemplars_link_run_histograms_to_traces(prometheus: PrometheusServer) -> None:
    end = time.time()
    path = "/api/v1/query_exemplars?" + urllib.parse.urlencode(
        {"query": "loopwatch_run_steps_bucket", "start": end - 300, "end": end}
    )
    data = prometheus.get_json(path)["data"]
    trace_ids = {e["labels"]["trace_id"] for series in data for e in series["exemplars"]}
    assert trace_ids and all(re.fullmatch(r"[0-9a-f]{32}", t) for t in trace_ids)
