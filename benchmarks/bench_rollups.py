"""A 90-day chart from rollups at the equivalent of 100M runs (docs/queries.md, *Long windows*).

Builds a store shaped as 100M runs over 90 days would leave it under ``serve``: the day rollups
of 89 whole days (``rollup_runs``: per day, task type, stop reason and outcome; ``rollup_sketches``:
per day, task type and measure, the sketch bins such a spread of values fills) and today's runs
in ``runs`` (100M / 90, half a day of them), then times the two long-window reads the charts make
(``runs_daily`` and ``usage_quantiles``) over 90 days, side by side with the same figures from
raw runs at a smaller size (``--raw-runs``) for scale. Prints seconds; no assert.

    python benchmarks/bench_rollups.py [--runs 100000000] [--task-types 50] [--raw-runs 2000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

STOPS = [
    ("completed", "success"), ("max_steps", "limit"), ("token_budget", "limit"),
    ("timeout", "limit"), ("repeated_action", "stuck"), ("repeated_error", "stuck"),
    ("no_progress", "stuck"), ("error", "error"),
]  # fmt: skip


def build(db: Path, runs: int, task_types: int, today_runs: int) -> None:
    from loopwatch.queries.store import Store
    from loopwatch.queries.store.rollups import SKETCH_MEASURES, ensure_rollup_tables

    now = datetime.now(UTC).replace(tzinfo=None)
    today = datetime(now.year, now.month, now.day)
    per_cell = runs // (90 * task_types * len(STOPS))
    with Store(db) as store:
        con = store.connection
        ensure_rollup_tables(con)
        stops = ", ".join(f"('{r}', '{o}')" for r, o in STOPS)
        con.execute(
            f"""INSERT INTO rollup_runs
            SELECT 'day', ?::TIMESTAMP - to_days(d::INTEGER), 'task-' || t, s.r, s.o, NULL,
                   {per_cell}, {per_cell // 2}, {per_cell} * 8.0, {per_cell} * 5.0,
                   {per_cell} * 3.0, {per_cell} * 9000.0, {per_cell} * 7000.0, {per_cell} * 2000.0,
                   {per_cell} * 0.02, {per_cell} * 30.0
            FROM range(1, 90) d(d), range(?) tt(t), (VALUES {stops}) s(r, o)""",
            [today, task_types],
        )
        # ~250 filled bins per measure and day: values spread over ~2 orders of magnitude.
        measures = ", ".join(f"('{m}')" for m in SKETCH_MEASURES)
        con.execute(
            f"""INSERT INTO rollup_sketches
            SELECT 'day', ?::TIMESTAMP - to_days(d::INTEGER), 'task-' || t, m.m, b::INTEGER,
                   greatest(1, {per_cell * len(STOPS)} // 250)
            FROM range(1, 90) d(d), range(?) tt(t), (VALUES {measures}) m(m),
                 range(100, 350) bb(b)""",
            [today, task_types],
        )
        con.execute(
            "INSERT INTO rollup_state VALUES ('day', ?), ('hour', ?), ('minute', ?)",
            [today, now.replace(minute=0, second=0, microsecond=0), now],
        )
        insert_runs(con, today, today_runs, task_types)
        store.checkpoint()


def insert_runs(con: object, start: datetime, n: int, task_types: int, days: float = 0.5) -> None:
    stops = ", ".join(f"('{r}', '{o}')" for r, o in STOPS)
    span_s = int(days * 86400)
    con.execute(
        f"""INSERT INTO runs BY NAME
        SELECT 'r' || i AS run_id, 't' || i AS trace_id, 's' || i AS span_id, 'bench' AS service,
               'task-' || (i % ?) AS task_type, ?::TIMESTAMP + to_seconds(i % ?) AS started_at,
               0 AS start_ns, 0 AS end_ns, s.r AS stop_reason, s.o AS outcome,
               (i % 20)::DOUBLE AS steps, (i % 3000 + 10)::DOUBLE AS tokens,
               (i % 60 + 1)::DOUBLE AS wall_s, (i % 100) / 1000.0 AS cost_usd, 'bench' AS source
        FROM range(?) r(i), (SELECT * FROM (VALUES {stops}) v(r, o) LIMIT 1) s""",
        [task_types, start, span_s, n],
    )


def timed(label: str, fn: object, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn.__call__()
        best = min(best, time.perf_counter() - t0)
    print(f"{label:58} {best:7.3f} s (best of {repeat})", flush=True)
    return best


def main() -> int:
    from loopwatch.queries.analysis.longwindow import runs_daily, usage_quantiles
    from loopwatch.queries.store import Store

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=100_000_000)
    parser.add_argument("--task-types", type=int, default=50)
    parser.add_argument("--raw-runs", type=int, default=2_000_000)
    args = parser.parse_args()
    today_runs = args.runs // 90 // 2
    since = (datetime.now(UTC) - timedelta(days=90)).replace(tzinfo=None)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "rollups.duckdb"
        t0 = time.perf_counter()
        build(db, args.runs, args.task_types, today_runs)
        print(
            f"store as {args.runs:,} runs over 90 days leave it: {db.stat().st_size / 1e6:.0f} MB"
            f" ({today_runs:,} runs of today in runs), built in {time.perf_counter() - t0:.0f} s"
        )
        with Store(db, read_only=True) as store:
            con = store.connection
            a = timed("90-day runs_daily (rollups + today)", lambda: runs_daily(con, since=since))
            b = timed(
                "90-day p50/p95/p99 tokens (merged sketches + today)",
                lambda: usage_quantiles(con, "tokens", (0.5, 0.95, 0.99), since=since),
            )
        raw = Path(tmp) / "raw.duckdb"
        with Store(raw) as store:
            insert_runs(
                store.connection,
                datetime.now(UTC).replace(tzinfo=None) - timedelta(days=90),
                args.raw_runs,
                args.task_types,
                days=90,
            )
            store.checkpoint()
        with Store(raw, read_only=True) as store:
            con = store.connection
            c = timed(
                f"the same from {args.raw_runs:,} raw runs (no rollups)",
                lambda: runs_daily(con, since=since),
            )
            d = timed(
                f"quantiles from {args.raw_runs:,} raw runs",
                lambda: usage_quantiles(con, "tokens", (0.5, 0.95, 0.99), since=since),
            )
        per_m = (c + d) / (args.raw_runs / 1e6)
        print(
            f"rollups at {args.runs / 1e6:.0f}M runs: {a + b:.2f} s for both reads; raw runs: "
            f"{per_m:.2f} s per million runs (~{per_m * args.runs / 1e6:.0f} s at "
            f"{args.runs / 1e6:.0f}M, extrapolated linearly)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
