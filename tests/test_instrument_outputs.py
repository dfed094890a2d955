"""instrument() takes its outputs the OpenTelemetry way, and finds the store without importing it.

Real SDK processors and exporters, a real DuckDB file; the layer rule is read from the source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from loopwatch.instrumentation.runtime.drops import reset_drops
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.observer import set_observer_factory
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.telemetry import instrument
from loopwatch.instrumentation.telemetry.stores import STORE_ENTRY_POINT_GROUP, find_store
from loopwatch.instrumentation.testing import FakeModel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("LOOPWATCH_DB", "LOOPWATCH_METRICS_PORT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    reset_drops()
    yield
    set_observer_factory(None)


def _names(spans: tuple[object, ...]) -> list[str]:
    return sorted(str(getattr(s, "name", "")) for s in spans)


def test_no_instrumentation_module_imports_the_layers_above() -> None:
    """Not even inside a function: the store is handed in or found by entry point."""
    found = []
    for path in sorted((ROOT / "instrumentation").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} {n}"
                for n in names
                if n.startswith(("loopwatch.queries", "loopwatch.dashboard"))
            ]
    assert found == []


def test_the_store_is_registered_as_an_entry_point() -> None:
    from loopwatch.queries.store.exporter import DUCKDB_STORE

    (entry,) = entry_points(group=STORE_ENTRY_POINT_GROUP, name="duckdb")
    assert entry.value == "loopwatch.queries.store.exporter:DUCKDB_STORE"
    assert find_store() is DUCKDB_STORE
    with pytest.raises(ImportError, match=r"needs the 'store' extra"):
        find_store("no-such-store")


def test_processors_and_an_exporter_handed_in_get_every_span_once() -> None:
    provider = TracerProvider()
    given, wrapped = InMemorySpanExporter(), InMemorySpanExporter()
    handle = instrument(
        tracer_provider=provider,
        span_processors=[SimpleSpanProcessor(given)],
        exporter=wrapped,
    )
    result = run(FakeModel(["hi"]), ToolRegistry(), "hello")
    assert result.ok and handle.force_flush()
    expected = ["chat fake", "invoke_agent agent", "step 1"]
    assert _names(given.get_finished_spans()) == expected
    assert _names(wrapped.get_finished_spans()) == expected

    # A second call replaces the first wiring: the handed-in outputs are shut down with it.
    again = InMemorySpanExporter()
    second = instrument(tracer_provider=provider, span_processors=[SimpleSpanProcessor(again)])
    run(FakeModel(["hi"]), ToolRegistry(), "hello")
    second.shutdown()
    assert len(given.get_finished_spans()) == len(wrapped.get_finished_spans()) == 3
    assert _names(again.get_finished_spans()) == expected


def test_the_store_handed_in_as_a_processor_writes_the_file(tmp_path: Path) -> None:
    from loopwatch.queries.store import connect_read_only
    from loopwatch.queries.store.exporter import DuckDBSpanExporter, store_processor

    db = tmp_path / "handed.duckdb"
    handle = instrument(
        tracer_provider=TracerProvider(),
        span_processors=[store_processor(DuckDBSpanExporter(db))],
    )
    run(FakeModel(["hi"]), ToolRegistry(), "hello", task_type="handed")
    assert handle.force_flush()
    handle.shutdown()
    con = connect_read_only(db)
    try:
        rows = con.execute("select task_type, stop_reason from runs").fetchall()
    finally:
        con.close()
    assert rows == [("handed", "completed")]


def test_outputs_of_the_wrong_kind_are_refused_at_the_call() -> None:
    with pytest.raises(TypeError, match="span_processors items must be SpanProcessors"):
        wrong: list[object] = [InMemorySpanExporter()]
        instrument(tracer_provider=TracerProvider(), span_processors=wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exporter must be a SpanExporter"):
        instrument(tracer_provider=TracerProvider(), exporter=object())  # type: ignore[arg-type]
