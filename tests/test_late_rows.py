"""Late rows (docs/store.md, *Late rows*): runs that arrive hours or days after they started,
through the store's real write path, still reach the rollups (long-window figures equal the raw
figures) and the archive (one more part of their day, each run read once), and retention keeps
them until they are archived."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
from loopwatch.queries.analysis.gateway import run_query
from loopwatch.queries.analysis.longwindow import runs_daily
from loopwatch.queries.store import Store
from loopwatch.queries.store.archive import Archiver, ArchiveTarget, sync
from loopwatch.queries.store.columns import SpanBatch
from loopwatch.queries.store.late import LateRows, ensure_late_tables
from loopwatch.queries.store.retention import Retention, RetentionPolicy
from loopwatch.queries.store.rollups import late_before, roll_up

NOW = datetime(2026, 1, 31, 1, 30)  # early in the day: 3 h ago is yesterday, a whole day
EPOCH = datetime(1970, 1, 1)


def _ns(ts: datetime) -> int:
    return int((ts - EPOCH).total_seconds() * 1e6) * 1000


def _batch(prefix: str, starts: list[datetime], *, tokens: int = 100) -> SpanBatch:
    """Runs (one run span each) starting at ``starts``, as serve's ingest would write them."""
    runs: list[dict[str, Any]] = []
    spans: list[dict[str, Any]] = []
    for i, start in enumerate(starts):
        run_id = f"{prefix}-{i}"
        begin, end = _ns(start), _ns(start) + 7 * 10**9
        common = {"start_ns": begin, "end_ns": end}
        runs.append(
            {
                "run_id": run_id,
                "task_type": ("triage", "coding")[i % 2],
                "stop_reason": ("completed", "max_steps")[i % 3 == 0],
                "outcome": "success" if i % 3 else "limit",
                "source": "otel",
                "tokens": tokens + i,
                "cost_usd": 0.01 * (i + 1),
                "wall_s": 7.0,
                "steps": 3 + i % 4,
                **common,
            }
        )
        spans.append(
            {
                "trace_id": f"t-{run_id}",
                "span_id": f"s-{run_id}",
                "name": "invoke_agent",
                "kind": "INTERNAL",
                "status_code": "UNSET",
                "run_id": run_id,
                **common,
            }
        )
    return SpanBatch.from_rows(spans=spans, runs=runs)


def _spread(start: datetime, hours: float, n: int) -> list[datetime]:
    return [start + timedelta(hours=hours * i / n) for i in range(n)]


def _pass(store: Store, now: datetime) -> None:
    """One housekeeping pass of rollups, as serve runs it: the late instant moves (under the
    write lock) before the pass reads the store."""
    late = store.late

    def move(con: Any) -> None:
        if late is not None:
            late.rollup_before_ns = _ns(late_before(now))

    store.run_write(move)
    roll_up(store.connection, now)


def _tracked(path: Path) -> Store:
    store = Store(path)
    store.late = LateRows()
    store.run_write(ensure_late_tables)
    return store


def _daily(
    con: duckdb.DuckDBPyConnection, since: str = "2026-01-01", until: str = "2026-02-01"
) -> tuple[list[Any], list[Any]]:
    window = {"since": since, "until": until}
    rolled = runs_daily(con, **window)
    raw = run_query(con, "runs_daily_raw", window, max_rows=1_000_000)
    rows = [
        [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in result.rows]
        for result in (rolled, raw)
    ]
    return rows[0], rows[1]


def _hourly(con: duckdb.DuckDBPyConnection) -> tuple[list[Any], list[Any]]:
    rolled = con.execute(
        "SELECT bucket, sum(runs) FROM rollup_runs WHERE period = 'hour' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    raw = con.execute(
        "SELECT time_bucket(INTERVAL 1 HOUR, started_at) AS h, count(*) FROM runs"
        " WHERE started_at < (SELECT rolled_until FROM rollup_state WHERE period = 'hour')"
        " GROUP BY 1 ORDER BY 1"
    ).fetchall()
    return rolled, raw


def test_runs_hours_and_days_late_reach_the_rollups(tmp_path: Path) -> None:
    tracked, untracked = _tracked(tmp_path / "tracked.duckdb"), Store(tmp_path / "plain.duckdb")
    try:
        for store in (tracked, untracked):
            store.write(_batch("ontime", _spread(NOW - timedelta(days=3), 72, 400)))
            _pass(store, NOW)
            # 3 h late (yesterday, a whole day rolled up) and 2 days late, with fresh runs
            store.write(_batch("late3h", _spread(NOW - timedelta(hours=3), 0.5, 30), tokens=900))
            store.write(_batch("late2d", _spread(NOW - timedelta(days=2), 1.5, 40), tokens=50))
            store.write(_batch("fresh", _spread(NOW, 0.2, 10)))
            _pass(store, NOW + timedelta(minutes=10))
        rolled, raw = _daily(tracked.connection)
        assert rolled == raw
        assert sum(r[4] for r in rolled) == 400 + 30 + 40 + 10
        hours_rolled, hours_raw = _hourly(tracked.connection)
        assert hours_rolled == hours_raw
        [(marks,)] = tracked.connection.execute("SELECT count(*) FROM rollup_dirty").fetchall()
        assert marks == 0  # every marked hour was rolled again
        # the same arrivals without the marks: the long-window figures miss the late runs
        rolled, raw = _daily(untracked.connection)
        assert sum(r[4] for r in rolled) == 400 + 10 < sum(r[4] for r in raw)
    finally:
        tracked.close()
        untracked.close()


def _marking(store: Store) -> Any:
    late = store.late
    assert late is not None

    def mark(instants: dict[str, int]) -> None:
        store.run_write(lambda con: late.archive_before_ns.update(instants))

    return mark


def test_rows_after_their_day_was_archived_go_to_another_part(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    target = ArchiveTarget.parse(str(archive))
    archiver = Archiver(target, "node-a", lag_s=3600)
    day = (NOW - timedelta(days=2)).date()
    now = NOW + timedelta(hours=2)  # yesterday sealed too
    with _tracked(tmp_path / "a.duckdb") as store:
        store.write(_batch("ontime", _spread(NOW - timedelta(days=3), 72, 300)))
        while archiver.seal(store.connection, now, mark_late=_marking(store)):
            pass
        # late: new runs of an archived day, and one archived run sent again (replaced)
        store.write(_batch("late", _spread(datetime.combine(day, datetime.min.time()), 2, 20)))
        again = _batch("ontime", [NOW - timedelta(days=3)], tokens=7777)
        store.write(SpanBatch(spans=None, runs=again.runs, count=0))
        # retention keeps a day, but no row of a day whose late rows are not archived yet
        keep = Retention(RetentionPolicy(keep_spans_s=86400.0, keep_runs_s=86400.0))
        until = archiver.archived_until(store.connection, now)
        assert until == datetime.combine(day - timedelta(days=1), datetime.min.time())
        now_s = (now - EPOCH).total_seconds()
        assert keep.step(store.connection, now_s, keep_after_ns=_ns(until)) == 0
        assert archiver.seal(store.connection, now, mark_late=_marking(store)) == 3
        assert archiver.seal(store.connection, now) == 0
        [(total,)] = store.connection.execute("SELECT count(*) FROM runs").fetchall()
    parts = sorted(p.name for p in (archive / "runs" / f"date={day}" / "node=node-a").iterdir())
    assert parts == ["part-0.parquet", "part-1.parquet"]
    reader = tmp_path / "reader.duckdb"
    sync(target, reader)
    with Store(reader, read_only=True) as store:
        [(runs, distinct, tokens)] = store.connection.execute(
            "SELECT count(*), count(DISTINCT run_id),"
            " max(tokens) FILTER (run_id = 'ontime-0') FROM runs"
        ).fetchall()
        [(spans,)] = store.connection.execute("SELECT count(*) FROM spans").fetchall()
    starts = _spread(NOW - timedelta(days=3), 72, 300)
    sealed = sum(1 for t in starts if t.date() < now.date())
    assert runs == distinct == sealed + 20
    assert tokens == 7777  # the run sent again replaced its archived row
    assert spans == sealed + 20
    # plain engines: the later part's runs are new rows but for the one sent again
    rows = ds.dataset(str(archive / "runs"), format="parquet", partitioning="hive").to_table()
    assert rows.num_rows == sealed + 20 + 1
    assert total == 300 + 20
    assert day == date(2026, 1, 29)


def _run_spans_body(prefix: str, starts: list[datetime]) -> bytes:
    """OTLP protobuf of one run span per start (as an agent's spool would send them late)."""
    from loopwatch.instrumentation import semconv as sc
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.test_serve import protobuf_body

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("late")
    for i, start in enumerate(starts):
        span = tracer.start_span(
            "invoke_agent a",
            start_time=_ns(start),
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.STOP_REASON: "completed",
                sc.RUN_ID: f"{prefix}-{i}",
                sc.TASK_TYPE: "late",
            },
        )
        span.end(end_time=_ns(start) + 5 * 10**9)
    provider.shutdown()
    return protobuf_body(list(memory.get_finished_spans()))


def _wait_metric(port: int, name: str, want: float) -> None:
    import time

    from tests.serving import metric_sum

    deadline = time.monotonic() + 120
    while metric_sum(port, name) < want:
        assert time.monotonic() < deadline, f"{name} did not reach {want}"
        time.sleep(0.2)


def test_serve_rolls_up_and_archives_runs_that_arrive_days_late(tmp_path: Path) -> None:
    """A real serve with rollups and an archive: runs posted 2 days and 3 hours after they
    started reach the day rollups and a second part of their archived day."""
    from loopwatch.queries.ingest.synthetic import generate_fleet

    from tests.serving import ServeProcess, metric_sum, post_traces

    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    db, archive = tmp_path / "a.duckdb", tmp_path / "archive"
    with Store(db) as store:
        generate_fleet(store.connection, runs_per_type=50, seed=9, end=now, span=timedelta(days=3))
    sealed = (now - timedelta(hours=1)).date()
    [(days,)] = _rows(
        db, "SELECT count(DISTINCT started_at::DATE) FROM runs WHERE started_at::DATE < ?", sealed
    )
    late = _spread(datetime.combine(sealed - timedelta(days=2), datetime.min.time()), 6, 12)
    late += _spread(now - timedelta(hours=3), 0.5, 6)
    late_days = {t.date() for t in late if t.date() < sealed}
    server = ServeProcess(
        db, "--archive", str(archive), "--node", "a", "--keep-spans", "forever",
        "--keep-runs", "forever", "--rollup-every-s", "1",
    )  # fmt: skip
    try:
        _wait_metric(server.metrics, "loopwatch_archive_files_total", 2 * days)
        assert post_traces(server.otlp, _run_spans_body("late", late))[0] == 200
        _wait_metric(server.metrics, "loopwatch_archive_files_total", 2 * (days + len(late_days)))
        passes = metric_sum(server.metrics, "loopwatch_rollup_passes_total")
        _wait_metric(server.metrics, "loopwatch_rollup_passes_total", passes + 2)
    finally:
        server.stop()
    with Store(db, read_only=True) as store:
        window = (now - timedelta(days=10)).isoformat(), (now + timedelta(days=1)).isoformat()
        rolled, raw = _daily(store.connection, *window)
        assert rolled == raw
        assert sum(r[4] for r in rolled if r[1] == "late") == len(late)
    target = ArchiveTarget.parse(str(archive))
    sync(target, tmp_path / "reader.duckdb")
    [(runs, distinct, late_runs)] = _rows(
        tmp_path / "reader.duckdb",
        "SELECT count(*), count(DISTINCT run_id), count(*) FILTER (task_type = 'late') FROM runs",
    )
    [(want,)] = _rows(db, "SELECT count(*) FROM runs WHERE started_at::DATE < ?", sealed)
    assert runs == distinct == want
    assert late_runs == sum(1 for t in late if t.date() < sealed) > 0
    parts = {p.name for p in archive.rglob("part-1.parquet")}
    assert parts == {"part-1.parquet"}


def _rows(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with Store(db, read_only=True) as store:
        return store.connection.execute(sql, list(params)).fetchall()
