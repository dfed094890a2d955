"""Nudges are recorded: on the run span (real OTel SDK), in the metrics (promtool-checked), in
the store's runs table (and upgraded files), and in the queries the Runs and Loops pages read."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import duckdb
from conftest import require_program
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor
from loopwatch.instrumentation.telemetry.tracing import OTelObserverFactory
from loopwatch.instrumentation.testing import FakeModel, tool_call
from loopwatch.queries.analysis.gateway import run_query
from loopwatch.queries.store import SCHEMA_VERSION, Store
from loopwatch.queries.store.columns import SpanBatch, records_from_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

NUDGE = LoopLimits(on_stuck="nudge")


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    def read_file(path: str) -> str:
        """Read a file."""
        return json.dumps({"error": f"no such file {path!r}", "code": "NOT_FOUND"})

    @registry.tool
    def ls(path: str = ".") -> str:
        """List a folder."""
        return f"{path}: a.ts b.ts"

    return registry


def _runs(tp: TracerProvider) -> None:
    factory = OTelObserverFactory(tp)
    read = lambda: tool_call("read_file", path="src/foo.ts")  # noqa: E731
    # recovered: nudged at step 2, then listed the folder and answered
    run(FakeModel([read(), read(), tool_call("ls"), "b.ts"]), _registry(), "x", limits=NUDGE,
        task_type="coding", observer_factory=factory, run_id="recovered")  # fmt: skip
    # stopped anyway: nudged at step 2, repeated at step 3
    run(FakeModel([read()], then=read()), _registry(), "x", limits=NUDGE, task_type="coding",
        observer_factory=factory, run_id="ignored", raise_on_stop=False)  # fmt: skip
    # never nudged
    run(FakeModel(["done"]), _registry(), "x", task_type="coding", observer_factory=factory,
        run_id="plain")  # fmt: skip


def _run_spans(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {
        str(s.attributes[sc.RUN_ID]): s
        for s in spans
        if s.attributes and s.attributes.get(sc.GEN_AI_OPERATION_NAME) == sc.OP_INVOKE_AGENT
    }


def test_nudges_reach_the_span_the_metrics_and_the_store(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    processor = MetricsSpanProcessor()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tp.add_span_processor(processor)
    _runs(tp)
    spans = exporter.get_finished_spans()
    runs = _run_spans(spans)
    assert runs["recovered"].attributes[sc.NUDGES] == 1  # type: ignore[index]
    assert tuple(runs["ignored"].attributes[sc.NUDGE_DETECTORS]) == (  # type: ignore[index]
        "repeated_action",
    )
    assert sc.NUDGES not in (runs["plain"].attributes or {})
    nudge_events = [e for s in spans for e in s.events if e.name == sc.EVENT_NUDGE]
    assert [e.attributes[sc.NUDGE_DETECTOR] for e in nudge_events] == ["repeated_action"] * 2  # type: ignore[index]

    body = generate_latest(processor.registry).decode()
    line = 'loopwatch_nudges_total{detector="repeated_action",task_type="coding"} 2.0'
    assert line in body
    promtool = require_program("promtool")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr

    db = tmp_path / "nudges.duckdb"
    with Store(db) as store:
        store.write(SpanBatch.from_records(records_from_spans(spans)))
        got = store.connection.execute("SELECT run_id, nudges FROM runs ORDER BY run_id")
        assert got.fetchall() == [("ignored", 1), ("plain", None), ("recovered", 1)]
        con = store.connection
        nudged = run_query(con, "runs_search", {"nudged": True}).records()
        assert sorted(r["run_id"] for r in nudged) == ["ignored", "recovered"]
        assert {r["run_id"]: r["nudges"] for r in run_query(con, "runs_search").records()} == {
            "ignored": 1,
            "plain": 0,
            "recovered": 1,
        }
        (row,) = run_query(con, "nudge_recoveries").records()
        assert (row["task_type"], row["nudged_runs"], row["recovered"], row["stopped_anyway"]) == (
            "coding",
            2,
            1,
            1,
        )


def test_a_version_2_store_gets_the_nudges_column(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    _runs(tp)
    path = tmp_path / "v2.duckdb"
    with Store(path) as store:
        store.write(SpanBatch.from_records(records_from_spans(exporter.get_finished_spans())))
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE runs DROP COLUMN nudges")
    con.execute("UPDATE schema_version SET version = 2")
    con.close()
    with Store(path) as store:
        got = store.connection.execute("SELECT run_id, nudges FROM runs ORDER BY run_id")
        assert got.fetchall() == [("ignored", 1), ("plain", None), ("recovered", 1)]
        version = store.connection.execute("SELECT version FROM schema_version").fetchall()
        assert version == [(SCHEMA_VERSION,)] == [(5,)]
