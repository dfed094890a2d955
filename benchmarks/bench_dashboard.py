"""Time to render each dashboard page at 100k and 1M runs, and how much a live refresh delays
ingest.

    python benchmarks/bench_dashboard.py                 # 100k and 1M runs
    python benchmarks/bench_dashboard.py --sizes 100000  # 100k only
    python benchmarks/bench_dashboard.py --dir /tmp/lw   # keep the generated stores there

Stores are filled by ``loopwatch.queries.ingest.synthetic.generate_fleet`` (four task types
with known verdicts over 7 days, with run, step, model and tool spans: about 18 spans a run)
and reused when ``--dir`` already holds them. Each page is rendered by Streamlit's ``AppTest``
(the page script, every query through the gateway, every Plotly figure built, as a browser
session would cause) with the widest window (7 days) and every task type: once cold (a new
session, with the results pages share across sessions forgotten: the first viewer after a
write), once in a second new session (what the first one computed is shared), then ``--repeat``
times warm; the median is printed. Target: ≤ 2 s per page at 1M runs.

Side by side, in the same run (``--fit``): ``full`` (the limits file judged as a whole with its
back-test, as shipped), ``no-backtest`` (the same without the back-test) and ``no-fit`` (no
limits file fit at all: verdicts from ``limit_stats`` only). Printed: each page's cold time per
variant and the ratios full / no-backtest and full / no-fit (target: the back-test must not
double a page's time).

Ingest: in one process, as ``loopwatch serve`` runs them, a writer thread inserts a batch of runs
every 50 ms on its own cursor (one Arrow insert in one transaction, like an OTLP request), first
alone, then while the Overview page refreshes on another cursor of the same store (back to back,
and once a second), with Python's default switch interval (5 ms) and with the 1 ms ``serve`` sets
when it serves the dashboard (``loopwatch.dashboard.app.ui.share_gil_with_ingest``). Printed side by
side: the writer's batch latency (median, p99, max, batches over 100 ms). Target: a refresh adds
at most 200 ms to any batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

try:
    from loopwatch.dashboard.app.shared_memo import clear_shared
except ImportError:  # a checkout before results were shared across sessions (before/after runs)

    def clear_shared() -> None:
        pass


# the limits analysis as shipped, without its back-test, or without any fit (one switch for both
# benchmarks; this script's folder is on sys.path when it runs)
from bench_queries import check_version, fit_variant
from loopwatch.dashboard.app.source import clear_live_store, set_live_store
from loopwatch.dashboard.app.ui import INGEST_SWITCH_INTERVAL_S
from loopwatch.queries.ingest.synthetic import SyntheticRun, generate_fleet, write_runs
from loopwatch.queries.store.database import Store

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app" / "streamlit_app.py"
PAGES = {
    "Overview": None,
    "Limits": "app_pages/limits.py",
    "History": "app_pages/history.py",
    "Loops & errors": "app_pages/loops.py",
    "Runs": "app_pages/runs.py",
}
TARGET_S = 2.0
CHUNK_RUNS = 100_000
INGEST_TARGET_MS = 200.0


def build(path: Path, runs: int) -> float:
    """Fill ``path`` with about ``runs`` runs and their spans; seconds taken (0 if reused: a store
    of an earlier schema version is refused, as the read-only pages would refuse it)."""
    if path.exists():
        check_version(path, upgrade=False)
        return 0.0
    t = time.perf_counter()
    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    end = datetime.now(UTC).replace(tzinfo=None)
    # in chunks of 100k runs (1.8M spans): the generator holds a chunk's rows in memory
    for i, start in enumerate(range(0, runs, CHUNK_RUNS)):
        n = min(CHUNK_RUNS, runs - start)
        generate_fleet(
            tmp,
            runs_per_type=max(50, n // 4),
            sparse_runs=12,
            seed=1 + i,
            spans=True,
            end=end,
            span=timedelta(days=7),
            kinds=("tight", "loose", "looping", "healthy"),
        )
    tmp.rename(path)
    return time.perf_counter() - t


def _app() -> Any:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=600)
    at.query_params["window"] = "7d"
    return at


FITS = ("full", "no-backtest", "no-fit")


def _run(at: Any, page: str | None) -> tuple[float, float]:
    """Wall and CPU seconds (this process, every thread: DuckDB's too) of one render."""
    t, c = time.perf_counter(), time.process_time()
    at.run()
    took, cpu = time.perf_counter() - t, time.process_time() - c
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception}")
    return took, cpu


def _render(page: str | None) -> tuple[Any, float, float]:
    at = _app()
    if page is not None:
        at.switch_page(page)
    return (at, *_run(at, page))


def time_page(page: str | None, repeat: int) -> tuple[float, float, float, float, float]:
    """(cold, second session, warm median) seconds to render ``page``, then the CPU seconds of
    the cold render and the warm median: CPU does not grow with other processes' load."""
    clear_shared()
    at, cold, cold_cpu = _render(page)
    _, second, _ = _render(page)
    warm = [_run(at, page) for _ in range(repeat)]
    return (
        cold,
        second,
        statistics.median(w for w, _ in warm),
        cold_cpu,
        statistics.median(c for _, c in warm),
    )


def _batch(n: int) -> list[SyntheticRun]:
    now = datetime.now(UTC).replace(tzinfo=None)
    return [
        SyntheticRun(
            run_id=uuid.uuid4().hex,
            task_type="ingest",
            started_at=now,
            stop_reason="completed",
            steps=3.0,
            tokens=3000.0,
            cost_usd=0.01,
            limit_steps=10.0,
        )
        for _ in range(n)
    ]


def ingest_latency(
    store: Store, seconds: float, *, refresh: bool, switch_s: float = 0.005, pace_s: float = 0.0
) -> list[float]:
    """Batch insert latencies (ms) over ``seconds``, with the Overview refreshing or not
    (``switch_s``: the interpreter's switch interval, Python's 5 ms or the 1 ms ``serve`` sets
    when it serves the dashboard; ``pace_s``: start a refresh every so many seconds, 0: back to
    back)."""
    sys.setswitchinterval(switch_s)
    stop = threading.Event()
    lat: list[float] = []

    def writer() -> None:
        cur = store.cursor()
        try:
            while not stop.is_set():
                batch = _batch(200)
                t = time.perf_counter()
                write_runs(cur, batch)
                lat.append((time.perf_counter() - t) * 1000)
                stop.wait(0.05)
        finally:
            cur.close()

    w = threading.Thread(target=writer)
    refreshes = 0
    w.start()
    deadline = time.monotonic() + seconds
    try:
        if refresh:
            at = _app()
            while time.monotonic() < deadline:
                started = time.monotonic()
                at.run()
                refreshes += 1
                if pace_s:
                    time.sleep(max(0.0, started + pace_s - time.monotonic()))
        else:
            time.sleep(seconds)
    finally:
        stop.set()
        w.join()
    sys.setswitchinterval(0.005)
    if refresh:
        how = f"every {pace_s:g} s" if pace_s else "back to back"
        print(f"    ({refreshes} Overview refreshes {how}, switch interval {switch_s * 1000:g} ms)")
    return lat


def _p(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


Timings = dict[tuple[int, str], dict[str, tuple[float, float, float, float, float]]]


def _print_pages(results: Timings, sizes: list[int], fits: list[str]) -> None:
    print()
    cols = [(n, f) for n in sizes for f in fits]
    for what, cold, warm in (("cold / warm s", 0, 2), ("CPU cold / warm s", 3, 4)):
        print(f"{f'page ({what})':<24}" + "".join(f"{f'{n:,} {f}':>24}" for n, f in cols))
        for name in PAGES:
            cells = "".join(
                f"{results[c][name][cold]:>15.2f} / {results[c][name][warm]:<6.2f}" for c in cols
            )
            full = results.get((sizes[-1], fits[0]), {}).get(name)
            wall = full is not None and not cold
            verdict = "" if not wall else "ok" if max(full[:3]) <= TARGET_S else "OVER"
            print(f"{name:<24}{cells}   {verdict}")
        print()
    if "full" not in fits:
        return
    for other in (f for f in fits if f != "full"):
        print(f"\ncold time, full / {other} (target for no-backtest: < 2):")
        for n in sizes:
            ratios = "  ".join(
                f"{name} {results[(n, 'full')][name][0] / results[(n, other)][name][0]:.2f}"
                for name in PAGES
            )
            print(f"  {n:>9,} runs: {ratios}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000", help="run counts (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="warm renders per page (default: 3)")
    ap.add_argument("--dir", default=None, help="where to keep the stores (default: a temp dir)")
    ap.add_argument("--ingest-s", type=float, default=8.0, help="seconds per ingest measurement")
    ap.add_argument("--ingest-only", action="store_true", help="skip the page render times")
    ap.add_argument("--no-ingest", action="store_true", help="skip the ingest measurement")
    ap.add_argument(
        "--fit",
        default=",".join(FITS),
        help="limits file fit variants, side by side (default: %(default)s)",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="loopwatch-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")

    fits = [f for f in args.fit.split(",") if f]
    results: Timings = {}
    for n in [] if args.ingest_only else sizes:
        path = base / f"dashboard-{n}.duckdb"
        took = build(path, n)
        print(f"store {path}: " + (f"built in {took:.0f} s" if took else "reused"))
        os.environ["LOOPWATCH_DB"] = str(path)
        for fit in fits:
            results[(n, fit)] = got = {}
            with fit_variant(fit):
                for name, page in PAGES.items():
                    got[name] = time_page(page, args.repeat)
                    cold, second, warm, cold_cpu, warm_cpu = got[name]
                    print(
                        f"  {n:>9,} runs  {fit:<12} {name:<15} cold {cold:6.2f} s   "
                        f"second session {second:6.2f} s   warm {warm:6.2f} s   "
                        f"CPU cold {cold_cpu:5.2f} s warm {warm_cpu:5.2f} s   "
                        f"load {os.getloadavg()[0]:.1f}"
                    )

    for n in sizes:
        build(base / f"dashboard-{n}.duckdb", n)
    if results:
        _print_pages(results, sizes, fits)

    if args.no_ingest:
        return
    # ingest against a live refresh, on the largest store, in this process (as serve runs them)
    path = base / f"dashboard-{sizes[-1]}.duckdb"
    os.environ.pop("LOOPWATCH_DB", None)
    store = Store(path)
    set_live_store(store)
    try:
        print(f"\ningest next to a live refresh ({sizes[-1]:,} runs, batches of 200 runs / 50 ms):")
        alone = ingest_latency(store, args.ingest_s, refresh=False)
        now = INGEST_SWITCH_INTERVAL_S
        runs = [("writer alone", alone)]
        # Python's 5 ms switch interval (as before) against serve's 1 ms: refreshes back to
        # back, and one a second (five viewers at the default 5 s)
        for label, switch_s, pace_s in (
            ("back to back, 5 ms", 0.005, 0.0),
            ("back to back, 1 ms", now, 0.0),
            ("1/s, 5 ms", 0.005, 1.0),
            ("1/s, 1 ms", now, 1.0),
        ):
            lat = ingest_latency(
                store, args.ingest_s, refresh=True, switch_s=switch_s, pace_s=pace_s
            )
            runs.append((label, lat))
    finally:
        clear_live_store()
        store.close()
    for label, lat in runs:
        print(
            f"  {label:<20} batches {len(lat):4d}  median {statistics.median(lat):6.1f} ms"
            f"  p99 {_p(lat, 0.99):6.1f} ms  max {max(lat):6.1f} ms"
            f"  >100 ms: {sum(x > 100 for x in lat)}"
        )
    for label, lat in runs[1:]:
        added = max(lat) - statistics.median(alone)
        verdict = "ok" if added <= INGEST_TARGET_MS else "OVER"
        print(
            f"  worst batch delay added ({label}): {added:.0f} ms "
            f"(target <= {INGEST_TARGET_MS:g} ms: {verdict})"
        )


if __name__ == "__main__":
    main()
