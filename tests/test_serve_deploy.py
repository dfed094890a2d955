"""The shipped deployment files: the Collector config in front of serve, and Prometheus scraping
serve with loopwatch's rules (checked by promtool, then by a real Prometheus server)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import require_program
from loopwatch.queries.analysis.alerts import rules_path

from tests.prometheus_server import PrometheusServer
from tests.serving import ServeProcess, post_traces
from tests.test_serve import make_spans, protobuf_body

DEPLOY = Path(__file__).resolve().parent.parent / "docs" / "deploy"


def test_the_collector_config_is_a_complete_pipeline_into_serve() -> None:
    config = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text(encoding="utf-8"))
    assert set(config) == {"extensions", "receivers", "processors", "exporters", "service"}
    service = config["service"]
    # Every component a pipeline names is defined, and every extension used is enabled.
    for extension in service["extensions"]:
        assert extension in config["extensions"]
    pipeline = service["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        for name in pipeline[kind]:
            assert name in config[kind], (kind, name)
    assert pipeline["processors"][0] == "memory_limiter"  # first, as the Collector advises
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["http"]["endpoint"].endswith(":4318")
    # Into loopwatch: OTLP/HTTP protobuf, retried without a time limit, from a queue on disk.
    loopwatch = config["exporters"]["otlphttp/loopwatch"]
    assert loopwatch["encoding"] == "proto"
    assert loopwatch["retry_on_failure"]["enabled"] is True
    assert loopwatch["retry_on_failure"]["max_elapsed_time"] == 0
    queue = loopwatch["sending_queue"]
    assert queue["enabled"] is True and queue["storage"] in service["extensions"]
    assert queue["storage"].startswith("file_storage")
    assert loopwatch["headers"]["Authorization"].startswith("Bearer ${env:")
    # Fan-out: at least one more exporter in the same pipeline.
    assert len(pipeline["exporters"]) >= 2
    batch = config["processors"]["batch"]
    assert batch["send_batch_max_size"] * 1000 < 20 << 20  # well under serve's body limit


def test_promtool_accepts_the_prometheus_config_and_the_shipped_rules() -> None:
    promtool = require_program("promtool")
    result = subprocess.run(
        [promtool, "check", "config", str(DEPLOY / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "12 rules found" in result.stdout + result.stderr


@pytest.fixture
def serve_and_prometheus(tmp_path: Path) -> Iterator[tuple[ServeProcess, PrometheusServer]]:
    require_program("prometheus")  # before serve starts: skipped (or failed in CI) at once
    server = ServeProcess(tmp_path / "p.duckdb")
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    config["global"]["scrape_interval"] = "1s"
    config["rule_files"] = [str(rules_path())]
    config["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{server.metrics}"]}]
    try:
        with PrometheusServer(tmp_path, config) as prom:
            yield server, prom
    finally:
        server.kill()


@pytest.mark.slow
def test_prometheus_scrapes_the_fleet_from_serve(
    serve_and_prometheus: tuple[ServeProcess, PrometheusServer],
) -> None:
    server, prom = serve_and_prometheus
    for i in range(3):
        assert post_traces(server.otlp, protobuf_body(make_spans(10, prefix=f"p{i}")))[0] == 200
    deadline = time.monotonic() + 60
    value = None
    while time.monotonic() < deadline:
        found = prom.results("sum(loopwatch_runs_total)")
        if found:
            value = float(found[0]["value"][1])
            if value == 30:
                break
        time.sleep(0.5)
    assert value == 30
    rules = prom.query('count(up{job="loopwatch"} == 1)')
    assert rules and float(rules[0]["value"][1]) == 1


def test_the_load_balancing_collector_routes_by_trace_id_to_node_collectors() -> None:
    config = yaml.safe_load(
        (DEPLOY / "otel-collector-loadbalancing.yaml").read_text(encoding="utf-8")
    )
    service = config["service"]
    for extension in service["extensions"]:
        assert extension in config["extensions"]
    pipeline = service["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        for name in pipeline[kind]:
            assert name in config[kind], (kind, name)
    lb = config["exporters"]["load_balancing"]
    assert lb["routing_key"] == "traceID"
    otlp = lb["protocol"]["otlp"]
    assert otlp["retry_on_failure"]["max_elapsed_time"] == 0
    assert otlp["sending_queue"]["storage"] in service["extensions"]
    # The backends are the node Collectors' gRPC receivers (otel-collector.yaml listens there).
    node = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text(encoding="utf-8"))
    grpc_port = node["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].rsplit(":", 1)[1]
    hostnames = lb["resolver"]["static"]["hostnames"]
    assert len(hostnames) >= 2 and all(h.endswith(":" + grpc_port) for h in hostnames)
