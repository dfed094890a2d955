"""Each run's peak spend rate kept in ``runs`` (schema version 5; docs/queries.md "Spend rate"):
written with the run through the real exporter and store, filled by the upgrade of a version-4
file, and equal to what the ``spend_rate`` query computes from the spans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from loopwatch.instrumentation.runtime import semconv as sc
from loopwatch.queries.analysis.gateway import run_query
from loopwatch.queries.analysis.rates import run_rates
from loopwatch.queries.store import SCHEMA_VERSION
from loopwatch.queries.store.database import Store, connect_read_only
from loopwatch.queries.store.exporter import DuckDBSpanExporter
from loopwatch.queries.store.spend_peaks import PEAK_COLUMNS
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

T0 = 1_790_000_000 * 10**9
S = 10**9

# run id → (wall seconds, [(seconds at the call's end, cost, tokens)])
RUNS: dict[str, tuple[float, list[tuple[float, float, int]]]] = {
    # $0.90 of $1 by 30 s: its peak ($0.90 a minute) is far above its average ($0.10)
    "burst": (600.0, [(30.0, 0.9, 900), (590.0, 0.1, 100)]),
    "even": (240.0, [(60.0, 0.1, 100), (120.0, 0.1, 100), (180.0, 0.1, 100), (239.0, 0.1, 100)]),
    "short": (10.0, [(4.0, 0.05, 40), (9.0, 0.05, 60)]),
    "no calls": (100.0, []),
}


def _emit(tp: TracerProvider) -> None:
    """The runs as an agent's OTel SDK ends them: model-call spans before their run span."""
    tracer = tp.get_tracer("test")
    for i, (run_id, (wall, calls)) in enumerate(RUNS.items()):
        start = T0 + i * 1000 * S
        cost = sum(c for _, c, _ in calls)
        run = tracer.start_span(
            "invoke_agent shop", start_time=start,
            attributes={sc.GEN_AI_OPERATION_NAME: "invoke_agent", sc.RUN_ID: run_id,
                        sc.TASK_TYPE: "shop", sc.STOP_REASON: "completed", sc.OUTCOME: "success",
                        sc.COST_USD: cost},
        )  # fmt: skip
        for j, (at, c, tokens) in enumerate(calls):
            end = start + int(at * S)
            call = tracer.start_span(
                "chat m", context=set_span_in_context(run), start_time=end - S // 2,
                attributes={sc.GEN_AI_OPERATION_NAME: "chat", sc.RUN_ID: run_id, sc.COST_USD: c,
                            sc.GEN_AI_USAGE_INPUT_TOKENS: tokens - 10,
                            sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10, sc.TASK_TYPE: "shop",
                            "loopwatch.step": j + 1},
            )  # fmt: skip
            call.end(end_time=end)
        run.end(end_time=start + int(wall * S))


def _write_runs(path: Path, batch_size: int) -> None:
    """The runs exported ``batch_size`` spans a batch into the store's own exporter."""
    tp = TracerProvider()
    processor = BatchSpanProcessor(DuckDBSpanExporter(path), max_export_batch_size=batch_size,
                                   schedule_delay_millis=60_000)  # fmt: skip
    tp.add_span_processor(processor)
    _emit(tp)
    processor.force_flush()
    tp.shutdown()


def _stored(path: Path) -> dict[str, tuple[Any, ...]]:
    con = connect_read_only(path)
    try:
        rows = con.execute(f"SELECT run_id, {', '.join(PEAK_COLUMNS)} FROM runs").fetchall()
    finally:
        con.close()
    return {r[0]: tuple(r[1:]) for r in rows}


def _rates_from_spans(path: Path) -> dict[str, tuple[Any, ...]]:
    """The ``spend_rate`` query's rates with the stored peaks cleared: read from the spans."""
    copy = path.with_name("spans-only.duckdb")
    copy.write_bytes(path.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute(f"UPDATE runs SET {', '.join(f'{c} = NULL' for c in PEAK_COLUMNS)}")
    con.close()
    return _rates(copy)


def _rates(path: Path) -> dict[str, tuple[Any, ...]]:
    con = connect_read_only(path)
    try:
        return _rates_of(con)
    finally:
        con.close()


def _rates_of(con: Any) -> dict[str, tuple[Any, ...]]:
    rates = run_rates(con)
    pairs = zip(rates.cost_per_min, rates.tokens_per_min, strict=True)
    return dict(zip(rates.run_id, pairs, strict=True))


@pytest.mark.parametrize("batch_size", [1, 3, 512])
def test_the_exporter_writes_each_runs_peak_as_the_spans_give_it(
    tmp_path: Path, batch_size: int
) -> None:
    """Batches of 1 and 3 spans: a run's calls reach the store in batches before its run span."""
    path = tmp_path / "live.duckdb"
    _write_runs(path, batch_size)
    stored = _stored(path)
    assert stored["burst"] == pytest.approx((0.9, 900.0))
    assert stored["short"] == pytest.approx((0.1, 100.0))  # under a minute: a minute's spend
    assert stored["no calls"] == (0.0, 0.0)  # measured: no model call recorded a spend
    got, from_spans = _rates(path), _rates_from_spans(path)
    assert got == from_spans  # the column equals the span pass, value for value
    assert got["burst"] == pytest.approx((0.9, 900.0))
    assert got["even"] == pytest.approx((0.4 / 239 * 60, 400 / 239 * 60))  # at its last call


def test_a_version_4_store_gets_the_peaks_when_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "v4.duckdb"
    _write_runs(path, 512)
    want = _rates(path)
    con = duckdb.connect(str(path))
    for column in PEAK_COLUMNS:
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    con.execute("UPDATE schema_version SET version = 4")
    con.close()
    with pytest.raises(Exception, match="loopwatch upgrade"):
        connect_read_only(path)  # read-only opens cannot upgrade: they say how
    Store(path).close()
    con = connect_read_only(path)
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    con.close()
    assert _stored(path)["burst"] == pytest.approx((0.9, 900.0))
    assert _rates(path) == want


def test_imported_runs_are_not_measured(tmp_path: Path) -> None:
    from loopwatch.queries.store.columns import SpanBatch, SpanRecord

    path = tmp_path / "import.duckdb"
    with Store(path) as store:
        record = SpanRecord(
            trace_id="a" * 32, span_id="b" * 16, name="invoke_agent shop", start_ns=T0,
            end_ns=T0 + S, attributes={sc.GEN_AI_OPERATION_NAME: "invoke_agent",
                                       sc.RUN_ID: "imported", sc.COST_USD: 1.0},
        )  # fmt: skip
        store.write(SpanBatch.from_records([record], source="import"))
    assert _stored(path) == {"imported": (None, None)}


@pytest.mark.parametrize("query", ["success_usage", "spend_rate"])
def test_the_newest_runs_are_kept_exactly_with_ties_at_the_boundary(
    tmp_path: Path, query: str
) -> None:
    """Five runs started at one instant straddle max_runs: the query keeps every newer run and
    as many of the tied ones as make max_runs, never more or fewer."""
    path = tmp_path / "ties.duckdb"
    with Store(path) as store:
        con = store.connection
        starts = [T0 + k * S for k in range(10)] + [T0 + 20 * S] * 5
        starts += [T0 + 30 * S + k * S for k in range(4)]
        con.executemany(
            "INSERT INTO runs (run_id, task_type, stop_reason, outcome, wall_s, cost_usd,"
            " started_at, start_ns, end_ns, rate_cost_per_min, rate_tokens_per_min)"
            " VALUES (?, 'shop', 'completed', 'success', 60.0, 0.1, make_timestamp(? // 1000),"
            " ?, ?, 0, 0)",
            [(f"r{i:02d}", s, s, s + 60 * S) for i, s in enumerate(starts)],
        )
    con = connect_read_only(path)
    try:
        for max_runs in (3, 4, 6, 7, 9, 19, 30):
            res = run_query(con, query, {"max_runs": max_runs})
            ids = res.column("run_id")
            assert len(ids) == min(max_runs, len(starts))
            newest = sorted(range(len(starts)), key=lambda i: -starts[i])
            boundary = starts[newest[min(max_runs, len(starts)) - 1]]
            assert {f"r{i:02d}" for i, s in enumerate(starts) if s > boundary} <= set(ids)
            assert all(starts[int(i[1:])] >= boundary for i in ids)
    finally:
        con.close()


def test_runs_whose_peaks_are_pending_read_the_same_rate_from_their_spans(tmp_path: Path) -> None:
    """The writer fills the peaks of many runs at once; until then readers read the spans."""
    done = tmp_path / "done.duckdb"
    _write_runs(done, 512)
    want = _rates(done)
    from loopwatch.queries.store.columns import SpanBatch

    con = duckdb.connect(str(done), read_only=True)
    spans = con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
    con.close()
    assert spans == sum(1 + len(calls) for _, calls in RUNS.values())
    tp = TracerProvider()
    exporter = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    path = tmp_path / "pending.duckdb"
    with Store(path) as store:
        _emit(tp)
        store.write(SpanBatch.from_sdk_spans(exporter.get_finished_spans()))
        assert store.peaks.runs == len(RUNS)  # not due yet: 4 runs, well within 5 s
        got = store.cursor().execute(f"SELECT {PEAK_COLUMNS[0]} FROM runs").fetchall()
        assert got == [(None,)] * len(RUNS)
        pending = _rates_of(store.cursor())
    assert pending == want
    assert _stored(path)["burst"] == pytest.approx((0.9, 900.0))  # filled when it closed
    assert _rates(path) == want
