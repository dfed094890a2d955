"""Median time of every named query on stores of 1M and 10M spans (about 100k and 1M runs).

    python benchmarks/bench_queries.py            # 1M and 10M spans
    python benchmarks/bench_queries.py --quick    # 1M spans only
    python benchmarks/bench_queries.py --store q-1000000.duckdb --report-only
                                                  # `loopwatch report` on a store built before

Rows are generated with DuckDB SQL (range + hash) straight into files with the store's schema,
in time order as a store is written: 20 task types over 7 days, 10 spans a run (run, 3 steps,
3 model calls, 3 tool calls), 20% limit stops, 5% repeated_error stops, 10% tool errors, and 10%
of runs looping on one call with the same result (their runs.max_same_call is 3; every other call
has its own arguments). Each query runs once to warm
up, then ``--repeat`` times through the gateway, with a 7-day window and all task types (the
widest a dashboard asks). Target: every query the dashboard runs at most 250 ms at 10M spans.

Then the limits analysis as pages and ``report`` call it (``analyze_file``: ``limit_stats``, the
successful runs of every task type, the limits file fit per task type), side by side in the
same run: ``full`` (the file judged as a whole with its back-test), ``no-backtest`` and
``no-fit`` (verdicts from ``limit_stats`` alone), with the ratios printed; and ``loopwatch
report`` on the store, in a new process (start-up and imports included), median of three, with
the CPU seconds of that process (user + system, all its threads: a figure the machine's load
does not inflate much) and the load average beside it.
Targets: report < 2 s; the back-test must not double the analysis.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
from loopwatch.queries.analysis import recommend, recommendations
from loopwatch.queries.analysis.gateway import query_names, run_query
from loopwatch.queries.analysis.recommendations import analyze_file, analyze_limits, what_if
from loopwatch.queries.store.errors import SCHEMA_VERSION
from loopwatch.queries.store.spend_peaks import LIVE_RUNS, fill_peaks_sql

TARGET_MS = 250.0
END = datetime(2026, 11, 8)
SPANS_PER_RUN = 10
# queries the dashboard does not run on every page view
NOT_DASHBOARD = {"detector_replay", "detector_replay_spans"}

RUNS_SQL = """
INSERT INTO runs BY NAME
SELECT
    md5(i::VARCHAR) AS run_id,
    md5(i::VARCHAR) AS trace_id,
    substr(md5('s' || i::VARCHAR), 1, 16) AS span_id,
    'tt_' || (i % 20)::VARCHAR AS task_type,
    'agent' AS agent_name,
    'bench' AS service,
    $end::TIMESTAMP - INTERVAL 7 DAY
        + to_microseconds((i * 604800000000 // $n + hash(i, 1) % 60000000)::BIGINT) AS started_at,
    CASE WHEN u < 0.80 THEN 'completed' WHEN u < 0.90 THEN 'max_steps'
         WHEN u < 0.95 THEN 'repeated_error' WHEN u < 0.98 THEN 'token_budget'
         ELSE 'timeout' END AS stop_reason,
    CASE WHEN u < 0.80 THEN 'success' WHEN u < 0.90 THEN 'limit' WHEN u < 0.95 THEN 'stuck'
         ELSE 'limit' END AS outcome,
    CASE WHEN u < 0.80 THEN NULL WHEN u < 0.90 THEN 'steps' WHEN u < 0.95 THEN NULL
         WHEN u < 0.98 THEN 'tokens' ELSE 'wall_s' END AS limit_name,
    'v' || (i % 3)::VARCHAR AS limits_version,
    CASE WHEN u >= 0.80 AND u < 0.90 THEN 12 ELSE 2 + hash(i, 2) % 9 END::DOUBLE AS steps,
    steps AS model_calls,
    steps - 1 AS tool_calls,
    steps * (800 + hash(i, 3) % 400) AS tokens,
    tokens * 2e-6 AS cost_usd,
    steps * (1.5 + (hash(i, 4) % 1000) / 1000.0) AS wall_s,
    epoch_ns(started_at) AS start_ns,
    start_ns + (wall_s * 1e9)::BIGINT AS end_ns,
    (tokens * 0.8)::BIGINT AS input_tokens,
    (tokens * 0.2)::BIGINT AS output_tokens,
    12.0 AS limit_steps,
    CASE WHEN i % 2 = 0 THEN 20000.0 END AS limit_tokens,
    60.0 AS limit_wall_s,
    CASE WHEN hash(i, 8) % 10 = 0 THEN 0 ELSE 1 + hash(i, 5) % 3 END::INTEGER AS recent_new_calls,
    (hash(i, 6) % 4)::INTEGER AS max_same_error,
    CASE WHEN hash(i, 8) % 10 = 0 THEN 3 ELSE 1 END::INTEGER AS max_same_call,
    'otel' AS source
FROM (SELECT range AS i, (hash(range, 0) % 1000000) / 1000000.0 AS u FROM range($lo, $hi));
"""

SPANS_SQL = """
INSERT INTO spans BY NAME
SELECT
    md5(r::VARCHAR) AS trace_id,
    substr(md5(i::VARCHAR), 1, 16) AS span_id,
    CASE WHEN j = 0 THEN NULL ELSE substr(md5(('s' || r)::VARCHAR), 1, 16) END AS parent_span_id,
    CASE WHEN j = 0 THEN 'invoke_agent agent' WHEN j % 3 = 1 THEN 'step ' || (1 + j // 3)::VARCHAR
         WHEN j % 3 = 2 THEN 'chat model' ELSE 'execute_tool ' || tool END AS name,
    CASE WHEN j % 3 = 2 THEN 'CLIENT' ELSE 'INTERNAL' END AS kind,
    epoch_ns($end::TIMESTAMP - INTERVAL 7 DAY)
        + (r * 604800000000 // $n + hash(r, 1) % 60000000)::BIGINT * 1000
        + j * 100000000 AS start_ns,
    start_ns + 50000000 AS end_ns,
    CASE WHEN is_tool AND err THEN 'ERROR' ELSE 'UNSET' END AS status_code,
    'bench' AS service,
    CASE WHEN j = 0 THEN 'invoke_agent' WHEN j % 3 = 2 THEN 'chat'
         WHEN j % 3 = 0 THEN 'execute_tool' END AS operation,
    md5(r::VARCHAR) AS run_id,
    'tt_' || (r % 20)::VARCHAR AS task_type,
    CASE WHEN j > 0 THEN 1 + (j - 1) // 3 END AS step,
    CASE WHEN j % 3 = 2 THEN 'model' END AS model,
    CASE WHEN is_tool THEN tool END AS tool_name,
    CASE WHEN is_tool THEN CASE WHEN err THEN 'error' ELSE 'ok' END END AS tool_status,
    CASE WHEN NOT is_tool THEN NULL
         WHEN looping THEN substr(md5('loop' || (r % 50)::VARCHAR), 1, 16)
         ELSE substr(md5(tool || r::VARCHAR || '-' || j::VARCHAR), 1, 16) END AS tool_fingerprint,
    CASE WHEN NOT is_tool THEN NULL
         WHEN looping THEN substr(md5('same' || (r % 50)::VARCHAR), 1, 16)
         ELSE substr(md5('r' || r::VARCHAR || '-' || j::VARCHAR), 1, 16) END AS result_fingerprint,
    CASE WHEN is_tool AND err THEN 'NOT_FOUND' END AS error_code,
    CASE WHEN is_tool AND err THEN substr(md5(tool || 'NOT_FOUND'), 1, 16) END AS error_fingerprint,
    CASE WHEN j % 3 = 1 THEN 'continue' END AS guard_decision,
    CASE WHEN j % 3 = 2 THEN 700 + hash(i) % 300 END AS input_tokens,
    CASE WHEN j % 3 = 2 THEN 200 + hash(i) % 100 END AS output_tokens
FROM (
    SELECT range AS i, range // 10 AS r, range % 10 AS j,
        hash(range // 10, 8) % 10 = 0 AS looping,
        CASE WHEN looping THEN 'search'
             ELSE ['search', 'read_file', 'lookup', 'write_file', 'http_get'][
                 (1 + hash(range, 2) % 5)::INT]
        END AS tool,
        hash(range, 3) % 10 = 0 AS err,
        range % 10 IN (3, 6, 9) AS is_tool
    FROM range($lo, $hi)
);
"""


def build_store(path: Path, n_runs: int, chunk: int = 1_000_000) -> float:
    """Write ``n_runs`` runs and 10 spans each into a new store file; returns seconds taken."""
    start = time.perf_counter()
    con = duckdb.connect(str(path))
    con.execute("SET enable_progress_bar = false")
    schema_file = resources.files("loopwatch.queries.store").joinpath("schema.sql")
    schema = schema_file.read_text(encoding="utf-8")
    con.execute(schema)
    con.execute("INSERT INTO schema_version (version) VALUES (?)", [SCHEMA_VERSION])
    for lo in range(0, n_runs, chunk):
        con.execute(RUNS_SQL, {"lo": lo, "hi": min(lo + chunk, n_runs), "end": END, "n": n_runs})
    n_spans = n_runs * SPANS_PER_RUN
    for lo in range(0, n_spans, chunk):
        con.execute(SPANS_SQL, {"lo": lo, "hi": min(lo + chunk, n_spans), "end": END, "n": n_runs})
    # each run's peak spend rate, as the store's writer keeps it when it writes a run
    con.execute(fill_peaks_sql(LIVE_RUNS))
    con.execute("CHECKPOINT")
    con.close()
    return time.perf_counter() - start


WINDOWS = {"7d": timedelta(days=7), "24h": timedelta(hours=24)}
"""The whole store, and the last day (what a dashboard page shows by default)."""


def _params(name: str, run_id: str, window: timedelta) -> dict[str, Any]:
    span: dict[str, Any] = {"since": END - window, "until": END}
    special: dict[str, dict[str, Any]] = {
        "usage_histogram": {**span, "budget": "steps"},
        "what_if": {
            **span,
            "task_type": "tt_1",
            "budget": "steps",
            "candidates": [float(v) for v in range(1, 21)],
        },
        "usage_range": {**span, "task_type": "tt_1", "budget": "steps"},
        "run_steps": {"run_id": run_id},
        "repeated_error_alert": {"now": END},
    }
    return special.get(name, span)


FITS = ("full", "no-backtest", "no-fit")
REPORT_TARGET_S = 2.0


@contextlib.contextmanager
def fit_variant(name: str) -> Iterator[None]:
    """The limits analysis as shipped, without the back-test, or without any file fit."""
    saved = (recommend._backtest, recommendations.fit_limits)
    if name == "no-backtest":
        recommend._backtest = lambda *a, **k: None  # type: ignore[assignment]
    elif name == "no-fit":
        recommendations.fit_limits = lambda *a, **k: {}  # type: ignore[assignment]
    try:
        yield
    finally:
        recommend._backtest, recommendations.fit_limits = saved


def report_seconds(path: Path, repeat: int = 3) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system of the child) of ``loopwatch report
    --db PATH`` in a new process."""
    times, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "loopwatch.dashboard.cli", "report", "--db", str(path)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times), statistics.median(cpus)


def _report_line(n: int, wall: float, cpu: float) -> str:
    verdict = "meets" if wall < REPORT_TARGET_S else "misses"
    return (
        f"loopwatch report at {n:,} runs: {wall:.2f} s, {cpu:.2f} s CPU ({verdict} the "
        f"{REPORT_TARGET_S:g} s target; load average {os.getloadavg()[0]:.1f})"
    )


def check_version(path: Path, upgrade: bool) -> None:
    """Refuse a store of an earlier schema version (``loopwatch report`` would), or upgrade it."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        found = int(con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0])
    finally:
        con.close()
    if found == SCHEMA_VERSION:
        return
    if not upgrade:
        sys.exit(
            f"{path} has store schema version {found}, not {SCHEMA_VERSION}: copy it and run "
            "`loopwatch upgrade COPY` (bench_queries.py --store COPY --upgrade does that)"
        )
    from loopwatch.queries.store.database import Store

    t = time.perf_counter()
    Store(path).close()
    print(f"upgraded {path} from schema version {found} in {time.perf_counter() - t:.1f} s")


def _runs_in(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM runs").fetchall()[0][0])
    finally:
        con.close()


def _median_ms(fn: Any, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def bench_file(path: Path, repeat: int) -> dict[str, dict[str, float]]:
    """{query: {window: median ms}} for every named query and the analysis calls."""
    con = duckdb.connect(str(path), read_only=True)
    con.execute("SET enable_progress_bar = false")
    run_id = con.execute("SELECT run_id FROM runs LIMIT 1").fetchall()[0][0]
    out: dict[str, dict[str, float]] = {}
    for name in query_names():
        out[name] = {}
        for label, window in WINDOWS.items():
            params = _params(name, run_id, window)
            times = [
                run_query(con, name, params, timeout_s=300).elapsed_ms for _ in range(repeat + 1)
            ]
            out[name][label] = statistics.median(times[1:])
    for label, window in WINDOWS.items():
        since = END - window
        out.setdefault("analyze_limits()", {})[label] = _median_ms(
            lambda since=since: analyze_limits(con, since=since, until=END), repeat
        )
        out.setdefault("what_if() default candidates", {})[label] = _median_ms(
            lambda since=since: what_if(con, "tt_1", "steps", since=since, until=END), repeat
        )
        for fit in FITS:
            with fit_variant(fit):
                out.setdefault(f"analyze_file() {fit}", {})[label] = _median_ms(
                    lambda since=since: analyze_file(con, since=since, until=END, include_off=True),
                    repeat,
                )
    con.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M spans only")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per query (median)")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the store files")
    parser.add_argument(
        "--keep", default=None, help="keep the stores in this folder and reuse them next time"
    )
    parser.add_argument(
        "--store",
        type=Path,
        action="append",
        default=None,
        help="measure this store (built by this script before; opened read-only) instead of "
        "building them; repeat for several",
    )
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="with --store: upgrade a store of an earlier schema version in place first (as "
        "`loopwatch upgrade` does; give it a copy), instead of refusing it",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="only `loopwatch report` (no query table)"
    )
    args = parser.parse_args()
    if args.store:
        for path in args.store:
            check_version(path, args.upgrade)
            n = _runs_in(path)
            if not args.report_only:
                _print_results({n: bench_file(path, args.repeat)}, [n])
            print(_report_line(n, *report_seconds(path)), flush=True)
        return
    sizes = [100_000] if args.quick else [100_000, 1_000_000]
    tmp = tempfile.TemporaryDirectory(prefix="loopwatch-bench-", dir=args.dir)
    keep = Path(args.keep) if args.keep else None
    results: dict[int, dict[str, dict[str, float]]] = {}
    reports: dict[int, tuple[float, float]] = {}
    try:
        for n in sizes:
            path = (keep or Path(tmp.name)) / f"store-{n}.duckdb"
            if not path.exists():
                secs = build_store(path, n)
                size_mb = path.stat().st_size / 1e6
                print(
                    f"built {n:,} runs / {n * SPANS_PER_RUN:,} spans in {secs:.1f} s "
                    f"({size_mb:,.0f} MB)",
                    flush=True,
                )
            if not args.report_only:
                results[n] = bench_file(path, args.repeat)
            reports[n] = report_seconds(path)
            print(_report_line(n, *reports[n]), flush=True)
            if keep is None:
                path.unlink()
    finally:
        tmp.cleanup()
    if results:
        _print_results(results, sizes)
    for n in sizes:
        print(_report_line(n, *reports[n]))


def _print_results(results: dict[int, dict[str, dict[str, float]]], sizes: list[int]) -> None:
    names = list(results[sizes[0]])
    cols = [(n, w) for n in sizes for w in WINDOWS]
    header = "query".ljust(30) + "".join(
        f"{n * SPANS_PER_RUN // 1_000_000}M spans {w}".rjust(16) for n, w in cols
    )
    print()
    print(header)
    print("-" * len(header))
    worst = {w: 0.0 for w in WINDOWS}
    over: list[str] = []
    for name in names:
        line = name.ljust(30) + "".join(f"{results[n][name][w]:13.1f} ms" for n, w in cols)
        if name not in NOT_DASHBOARD:
            for w in WINDOWS:
                big = results[sizes[-1]][name][w]
                worst[w] = max(worst[w], big)
                if big > TARGET_MS:
                    over.append(f"{name} ({w})")
        print(line)
    largest = sizes[-1] * SPANS_PER_RUN // 1_000_000
    print()
    for w in WINDOWS:
        verdict = "meets" if worst[w] <= TARGET_MS else "misses"
        print(
            f"slowest dashboard query at {largest}M spans, {w} window: {worst[w]:.1f} ms "
            f"({verdict} the {TARGET_MS:.0f} ms target)"
        )
    if over:
        print("over target: " + ", ".join(over))
    print()
    for n in sizes:
        for w in WINDOWS:
            full = results[n]["analyze_file() full"][w]
            ratios = ", ".join(
                f"full / {f} {full / results[n][f'analyze_file() {f}'][w]:.2f}" for f in FITS[1:]
            )
            print(f"analyze_file() at {n:,} runs, {w}: {full:.0f} ms; {ratios}")


if __name__ == "__main__":
    main()
