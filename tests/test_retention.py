"""Retention per table (docs/store.md, *Retention*): a simulated month on a real store file, and a
real ``loopwatch serve`` deleting expired rows in the background while it ingests."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store import Store
from loopwatch.queries.store.retention import (
    Retention,
    RetentionPolicy,
    compact,
    parse_duration,
)

from tests.serving import ServeProcess, metric_sum, post_traces, store_rows

DAY = 86400.0
EPOCH = datetime(1970, 1, 1)


def _month(db: Path, policy: RetentionPolicy, days: int = 30) -> list[tuple[int, int, int]]:
    """Each simulated day: that day's runs and spans written, retention run, checkpoint;
    (spans, runs, file bytes) after each day."""
    store = Store(db)
    retention = Retention(policy)
    first = datetime(2026, 1, 1)
    after: list[tuple[int, int, int]] = []
    try:
        for d in range(days):
            end = first + timedelta(days=d + 1)
            generate_fleet(
                store.connection,
                runs_per_type=60,
                seed=d,
                end=end,
                span=timedelta(days=1),
                spans=True,
            )
            retention.run_until_done(store.connection, now_s=(end - EPOCH).total_seconds())
            store.checkpoint()
            spans, runs = store.connection.execute(
                "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM runs)"
            ).fetchone() or (0, 0)
            after.append((int(spans), int(runs), db.stat().st_size))
    finally:
        store.close()
    return after


def test_a_month_keeps_the_windows_and_the_disk_stays_flat(tmp_path: Path) -> None:
    policy = RetentionPolicy(keep_spans_s=7 * DAY, keep_runs_s=14 * DAY, batch_rows=5_000)
    days = _month(tmp_path / "month.duckdb", policy)
    spans_per_day = days[0][0]
    runs_per_day = days[0][1]
    # Windows hold: from then on, about 7 days of spans and 14 of runs (runs start uniformly
    # within their day, so the oldest day is cut part-way).
    for spans, runs, _ in days[16:]:
        assert 6 * spans_per_day <= spans <= 7.2 * spans_per_day
        assert 13 * runs_per_day <= runs <= 14.2 * runs_per_day
    sizes = [size for _, _, size in days]
    # Flat after the window: the last week's file is no larger than a quarter over the file at
    # the end of the run window, while without retention it would have doubled by then.
    assert max(sizes[23:]) <= sizes[15] * 1.25, sizes


def test_without_retention_the_same_month_grows(tmp_path: Path) -> None:
    days = _month(tmp_path / "all.duckdb", RetentionPolicy(None, None), days=12)
    assert days[-1][0] > 10 * days[0][0]  # nothing deleted
    assert days[-1][2] > 1.6 * days[5][2]  # what the flat figure above is compared against


def test_deleting_keeps_the_file_size_and_compact_gives_space_back(tmp_path: Path) -> None:
    db = tmp_path / "big.duckdb"
    with Store(db) as store:
        generate_fleet(
            store.connection, runs_per_type=300, spans=True, seed=1, span=timedelta(days=10)
        )
        store.checkpoint()
        full = db.stat().st_size
        Retention(RetentionPolicy(keep_spans_s=DAY, keep_runs_s=None)).run_until_done(
            store.connection
        )
        store.checkpoint()
        # DuckDB marks the blocks free for reuse; the file does not shrink.
        assert db.stat().st_size == full
    sizes = compact(db, tmp_path / "small.duckdb")
    assert sizes["before"] == full and sizes["after"] < 0.7 * full
    with Store(tmp_path / "small.duckdb", read_only=True) as small:
        [(spans, runs)] = small.connection.execute(
            "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM runs)"
        ).fetchall()
    assert spans > 0 and runs == 4 * 300 + 12


def test_durations() -> None:
    assert parse_duration("7d") == 7 * DAY
    assert parse_duration("12h") == 12 * 3600
    assert parse_duration("forever") is None
    for bad in ("7", "-1d", "0d", "7 days", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    proc = subprocess.run(
        [sys.executable, "-m", "loopwatch.dashboard.cli", "serve", "--keep-spans", "7 days"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "not a duration" in proc.stderr


def test_serve_deletes_in_the_background_while_it_ingests(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from tests.test_serve import make_spans

    db = tmp_path / "live.duckdb"
    now = datetime.now(UTC).replace(tzinfo=None)
    with Store(db) as store:  # 30 days of history, the oldest past both windows
        for d in range(30):
            generate_fleet(
                store.connection,
                runs_per_type=60,
                seed=d,
                end=now - timedelta(days=d),
                span=timedelta(days=1),
                spans=True,
            )
        old = store.connection.execute(
            "SELECT (SELECT count(*) FROM spans WHERE start_ns < ?),"
            " (SELECT count(*) FROM runs WHERE start_ns < ?)",
            [int((time.time() - 20 * DAY) * 1e9), int((time.time() - 25 * DAY) * 1e9)],
        ).fetchone()
    assert old is not None and old[0] > 0 and old[1] > 0
    serve = ServeProcess(db, "--keep-spans", "20d", "--keep-runs", "25d")
    answers = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            spans = make_spans(5, prefix=f"post{len(answers)}", service="test-agent")
            body = encode_spans(spans).SerializeToString()
            answers.append(post_traces(serve.otlp, body)[0])
            deleted = (
                metric_sum(serve.metrics, "loopwatch_retention_deleted_rows_total", table="spans"),
                metric_sum(serve.metrics, "loopwatch_retention_deleted_rows_total", table="runs"),
            )
            if len(answers) >= 20 and deleted[0] >= old[0] and deleted[1] >= old[1]:
                break
    finally:
        serve.stop()
    assert set(answers) == {200} and len(answers) >= 20  # ingest went on meanwhile
    assert deleted[0] >= old[0] and deleted[1] >= old[1]
    cutoff_spans = int((time.time() - 20 * DAY) * 1e9)
    cutoff_runs = int((time.time() - 25 * DAY) * 1e9)
    assert store_rows(db, "SELECT count(*) FROM spans WHERE start_ns < ?", [cutoff_spans]) == [(0,)]
    assert store_rows(db, "SELECT count(*) FROM runs WHERE start_ns < ?", [cutoff_runs]) == [(0,)]
    [(posted,)] = store_rows(db, "SELECT count(*) FROM spans WHERE service = 'test-agent'")
    assert posted == 20 * len(answers)
    # Rollups ran in the same background thread: every day kept in runs is rolled up.
    [(days,)] = store_rows(
        db, "SELECT count(DISTINCT bucket) FROM rollup_runs WHERE period = 'day'"
    )
    assert days >= 24
