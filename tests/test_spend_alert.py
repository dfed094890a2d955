"""The spend alert: the SQL evaluation on a store (the promtool cases, in runs), and a real
Prometheus scraping a real ``loopwatch serve`` that agents send runs to, firing
``LoopwatchSpendPerRunRising`` once runs get expensive (test-scaled windows: 8 s and 5 min)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import require_program
from loopwatch.queries.analysis.alerts import AlertThresholds, render_rules
from loopwatch.queries.analysis.spend_alerts import spend_alerts
from loopwatch.queries.store.database import Store

from tests.prometheus_server import PrometheusServer, scrape_config
from tests.serving import ServeProcess

T0 = datetime(2026, 1, 1)


def add(store: Store, task: str, minutes: range, per_minute: int, cost: float) -> None:
    rows = []
    for m in minutes:
        for i in range(per_minute):
            at = T0 + timedelta(minutes=m, seconds=1 + i)
            ns = int(at.timestamp() * 1e9)
            rows.append((f"{task}-{m}-{i}-{cost}", task, at, ns, ns, "completed", "success", cost))
    store.connection.executemany(
        "INSERT INTO runs (run_id, task_type, started_at, start_ns, end_ns, stop_reason, outcome,"
        " cost_usd) VALUES (?,?,?,?,?,?,?,?)",
        rows,
    )


def test_the_sql_spend_alert_matches_the_promtool_cases(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    add(store, "shop", range(390), 20, 0.05)  # $0.05 a run, then $0.20 for 30 minutes
    add(store, "shop", range(390, 420), 20, 0.20)
    add(store, "pricey", range(420), 20, 0.50)  # flat and high: a baseline
    add(store, "seldom", range(390), 1, 0.05)  # the same rise, one run a minute
    add(store, "seldom", range(390, 420), 1, 0.20)
    states = {s.task_type: s for s in spend_alerts(store.cursor(), now=T0 + timedelta(hours=7))}
    assert states["shop"].firing and states["shop"].per_run_short == pytest.approx(0.20)
    assert states["shop"].runs_short == 15 * 20
    assert not states["pricey"].firing and not states["seldom"].firing
    assert states["seldom"].runs_short < 20
    earlier = spend_alerts(store.cursor(), now=T0 + timedelta(hours=6), task_types=["shop"])
    assert not earlier[0].firing  # before the rise
    low = spend_alerts(
        store.cursor(), now=T0 + timedelta(hours=7), task_types=["seldom"],
        thresholds=AlertThresholds(min_runs=5),
    )  # fmt: skip
    assert low[0].firing  # the run count is what held it back
    store.close()


SENDER = textwrap.dedent(
    """
    import sys, time
    from loopwatch.instrumentation import instrument
    from loopwatch.instrumentation.runtime.loop import run
    from loopwatch.instrumentation.runtime.tools import ToolRegistry
    from loopwatch.instrumentation.runtime.types import Usage
    from loopwatch.instrumentation.testing import FakeModel, text_response

    url, cost, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    handle = instrument(otlp_endpoint=url, service_name="shop-agent")
    registry = ToolRegistry()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(5):
            model = FakeModel([text_response("done", usage=Usage(10, 5, cost))])
            run(model, registry, "buy", task_type="shop", raise_on_stop=False)
        handle.force_flush() if hasattr(handle, "force_flush") else None
        time.sleep(0.1)
    handle.shutdown()
    """
)
SCALED = AlertThresholds(short_window="8s", baseline_window="5m", min_runs=20)


def _firing(prom: PrometheusServer) -> list[dict[str, Any]]:
    return [
        a
        for a in prom.get_json("/api/v1/alerts")["data"]["alerts"]
        if a["labels"].get("alertname") == "LoopwatchSpendPerRunRising" and a["state"] == "firing"
    ]


@pytest.mark.slow
def test_prometheus_scraping_serve_fires_the_spend_alert(tmp_path: Path) -> None:
    require_program("prometheus")  # before serve starts: skipped (or failed in CI) at once
    server = ServeProcess(tmp_path / "live.duckdb")
    (tmp_path / "rules.yml").write_text(render_rules(SCALED), encoding="utf-8")
    config = scrape_config([f"127.0.0.1:{server.metrics}"], rule_files=["rules.yml"])
    url = f"http://127.0.0.1:{server.otlp}"
    try:
        with PrometheusServer(tmp_path, config) as prom:
            cheap = subprocess.Popen([sys.executable, "-c", SENDER, url, "0.01", "25"])
            assert cheap.wait(120) == 0
            assert _firing(prom) == []  # a steady spend per run is the baseline
            pricey = subprocess.Popen([sys.executable, "-c", SENDER, url, "0.10", "60"])
            fired: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while not fired and time.monotonic() < deadline:
                time.sleep(0.5)
                fired = _firing(prom)
            pricey.kill()
            pricey.wait(30)
            assert fired, "LoopwatchSpendPerRunRising did not fire"
            (alert,) = fired
            assert alert["labels"]["task_type"] == "shop"
            assert alert["annotations"]["summary"] == "shop: spend per run is rising"
    finally:
        server.kill()


def test_the_overview_shows_the_spend_alert_banner_and_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamlit.testing.v1 import AppTest

    global T0
    path = tmp_path / "f.duckdb"
    store = Store(path)
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)  # naive UTC, as the store
    saved, T0 = T0, now - timedelta(minutes=420)
    try:
        add(store, "shop", range(390), 2, 0.05)
        add(store, "shop", range(390, 419), 2, 0.20)
    finally:
        T0 = saved
    store.close()
    monkeypatch.setenv("LOOPWATCH_DB", str(path))
    at = AppTest.from_file(str(Path(__file__).parent.parent / "dashboard/app/streamlit_app.py"),
                           default_timeout=90)  # fmt: skip
    at.query_params["window"] = "24h"
    at.run()
    assert not at.exception, at.exception
    banners = [e.value for e in at.error if "spend per run rising" in e.value]
    assert len(banners) == 1 and "0\\.2000 a run" in banners[0], banners
    assert len(at.get("plotly_chart")) >= 1
