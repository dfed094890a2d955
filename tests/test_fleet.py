"""Several nodes (docs/deploy/README.md): two real ``loopwatch serve`` processes, each with its own
store, archive to one directory; a reader (``loopwatch report --archive``, the reader store the
dashboard opens) sees every run of both, none twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from conftest import require_program
from loopwatch.queries.analysis.alerts import rules_path
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store import Store
from loopwatch.queries.store.archive import reader_store

from tests.prometheus_server import PrometheusServer
from tests.serving import ServeProcess, metric_sum, post_traces
from tests.test_serve import make_spans, protobuf_body
from tests.test_serve_deploy import DEPLOY

KINDS = ("tight", "loose", "looping", "healthy", "sparse")


def _history(db: Path, node: str, now: datetime) -> tuple[int, int, int]:
    """Four days of runs ending now; (sealed days, runs in them, all runs)."""
    with Store(db) as store:
        generate_fleet(
            store.connection,
            runs_per_type=60,
            seed=sum(node.encode()),
            end=now,
            span=timedelta(days=4),
            spans=True,
            names={k: f"{node}-{k}" for k in KINDS},
        )
        sealed = (now - timedelta(hours=1)).date()
        [(days, runs, total)] = store.connection.execute(
            "SELECT count(DISTINCT started_at::DATE) FILTER (started_at::DATE < $1),"
            " count(*) FILTER (started_at::DATE < $1), count(*) FROM runs",
            [sealed],
        ).fetchall()
    return int(days), int(runs), int(total)


def _api_runs(port: int) -> tuple[int, set[str]]:
    """The runs a node's JSON API counts over all time, and their task types' node prefixes."""
    url = f"http://127.0.0.1:{port}/api/v1/queries/runs_daily_raw?since=2000-01-01T00:00:00"
    with urllib.request.urlopen(url, timeout=30) as resp:
        rows = json.loads(resp.read())["rows"]
    return sum(r["runs"] for r in rows), {r["task_type"].rsplit("-", 1)[0] for r in rows}


def _wait_for_fleet(port: int, want: int) -> set[str]:
    """Poll until the node's API counts ``want`` runs (its own, the other's sealed days)."""
    deadline = time.monotonic() + 120
    runs, nodes = _api_runs(port)
    while runs < want and time.monotonic() < deadline:
        time.sleep(0.5)
        runs, nodes = _api_runs(port)
    assert runs == want  # every run once: more would be a run counted twice
    return nodes


def _page_runs(db: Path, archive: Path, node: str) -> tuple[str, str]:
    """The overview page (AppTest) over the node's store and the fleet cache it filled: the
    Runs figure and the page's text."""
    from loopwatch.dashboard.app.source import clear_live_store, set_live_store
    from loopwatch.queries.store.archive import ArchiveTarget
    from loopwatch.queries.store.fleet import FleetView, fleet_cache_path
    from streamlit.testing.v1 import AppTest

    from tests.test_dashboard import APP

    with Store(db) as store:
        fleet = FleetView(store, ArchiveTarget.parse(str(archive)), node, fleet_cache_path(db))
        set_live_store(store, reader=fleet.cursor)
        try:
            at = AppTest.from_file(str(APP), default_timeout=60)
            at.query_params["window"] = "30d"
            at.run()
            assert not at.exception, at.exception
            text = "\n".join(str(e.value) for e in (*at.markdown, *at.caption, *at.subheader))
            return {m.label: m.value for m in at.metric}["Runs"], text
        finally:
            clear_live_store()
            fleet.close()


def test_two_nodes_one_archive_one_reader(tmp_path: Path) -> None:
    """Each node's API and UI show its own runs and the other's sealed days, none twice; a
    reader of the archive shows every sealed day of both."""
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    archive = tmp_path / "archive"
    expected: dict[str, tuple[int, int, int]] = {}
    servers = []
    try:
        for node in ("node-a", "node-b"):
            db = tmp_path / f"{node}.duckdb"
            expected[node] = _history(db, node, now)
            servers.append(
                ServeProcess(
                    db,
                    "--archive",
                    str(archive),
                    "--node",
                    node,
                    "--keep-spans",
                    "forever",
                    "--keep-runs",
                    "forever",
                    "--rollup-every-s",
                    "1",  # passes (archive, then the fleet cache's load) come every second
                )
            )
        deadline = time.monotonic() + 120
        for server, node in zip(servers, expected, strict=True):
            want = 2 * expected[node][0]  # runs and spans per sealed day
            while metric_sum(server.metrics, "loopwatch_archive_files_total") < want:
                assert time.monotonic() < deadline, f"{node} did not archive its sealed days"
                time.sleep(0.2)
        (_, _, all_a), (_, sealed_b, all_b) = expected["node-a"], expected["node-b"]
        assert _wait_for_fleet(servers[0].otlp, all_a + sealed_b) == {"node-a", "node-b"}
        assert _wait_for_fleet(servers[1].otlp, all_b + expected["node-a"][1]) == {
            "node-a",
            "node-b",
        }
    finally:
        for server in servers:
            server.stop()
    runs_shown, text = _page_runs(tmp_path / "node-a.duckdb", archive, "node-a")
    assert runs_shown == str(all_a + sealed_b)
    assert "node-a-tight" in text and "node-b-tight" in text
    files = sorted(p.relative_to(archive).as_posix() for p in archive.rglob("*.parquet"))
    assert len(files) == 2 * sum(days for days, _, _ in expected.values())
    assert {f.split("/")[2] for f in files} == {"node=node-a", "node=node-b"}
    total = sum(runs for _, runs, _ in expected.values())
    env = {**os.environ, "LOOPWATCH_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopwatch.dashboard.cli",
            "report",
            "--archive",
            str(archive),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    names = {t["task_type"] for t in report["task_types"]}
    assert {n.split("-")[0] + "-" + n.split("-")[1] for n in names} == {"node-a", "node-b"}
    reader = reader_store(str(archive), tmp_path / "cache")  # the same file, already loaded
    with Store(reader, read_only=True) as store:
        [(runs, distinct)] = store.connection.execute(
            "SELECT count(*), count(DISTINCT run_id) FROM runs"
        ).fetchall()
    assert runs == distinct == total


@pytest.mark.slow
def test_prometheus_rules_aggregate_over_two_serve_nodes(tmp_path: Path) -> None:
    """Prometheus scrapes both nodes' /metrics (same series, two ``instance`` labels) with the
    shipped rules: the totals add both nodes and each recording rule keeps one series per task
    type, never one per instance."""
    require_program("prometheus")  # before serve starts: skipped (or failed in CI) at once
    servers = [ServeProcess(tmp_path / f"{n}.duckdb") for n in ("a", "b")]
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(rules_path())]
    config["scrape_configs"][0]["static_configs"] = [
        {"targets": [f"127.0.0.1:{s.metrics}" for s in servers]}
    ]
    try:
        with PrometheusServer(tmp_path, config) as prom:
            for server, runs in zip(servers, (10, 20), strict=True):
                body = protobuf_body(make_spans(runs, prefix=f"n{server.otlp}"))
                assert post_traces(server.otlp, body)[0] == 200
            total = rule = None
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                found = prom.results("sum(loopwatch_runs_total)")
                total = float(found[0]["value"][1]) if found else None
                rule = prom.results("task_type:loopwatch_runs:increase15m")
                if total == 30 and rule:
                    break
                time.sleep(0.5)
            assert total == 30
            by_instance = 'count by (instance) (loopwatch_runs_total{job="loopwatch"})'
            assert len(prom.query(by_instance)) == 2
            assert rule and len(rule) == 1 and "instance" not in rule[0]["metric"], rule
    finally:
        for server in servers:
            server.stop()
