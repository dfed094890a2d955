"""``bench_serve.py`` with retention, rollups and the archive off, then on, side by side
(docs/serve.md, *With retention, rollups and the archive on*).

The same sender processes and OTLP bodies as ``bench_serve.py``, into a copy of a store holding
10 days of synthetic history (so retention has rows to delete and the archive has sealed days to
write while the spans arrive); rollups run every 2 s instead of every 60 to load them. Prints
spans/s for both, their ratio, and what serve's background thread did meanwhile.

    python benchmarks/bench_serve_fleet.py [--spans 100000] [--senders 2] [--connections 2]
        [--stream native|foreign]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).parent))

from bench_serve import children_kb, health, make_bodies, memory_kb, write_bodies

PHASES: Final = (
    ("off", ("--keep-spans", "forever", "--keep-runs", "forever", "--rollup-every-s", "0")),
    (
        "on",
        ("--keep-spans", "7d", "--keep-runs", "90d", "--rollup-every-s", "2",
         "--archive", "{tmp}/archive", "--node", "bench"),
    ),
)  # fmt: skip


def start_server(db: Path, *extra: str) -> tuple[subprocess.Popen[str], int, int]:
    """``serve --no-ui`` on free ports; (process, OTLP port, metrics port)."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "loopwatch.dashboard.cli", "serve", "--db", str(db),
            "--otlp-port", "0", "--metrics-port", "0", "--no-ui", *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    ports: dict[str, int] = {}
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("serve did not start")
        for label in ("OTLP/HTTP", "metrics"):
            if line.startswith(label):
                ports[label] = int(line.rsplit(":", 1)[1].split("/", 1)[0])
        if line.startswith("store"):
            return proc, ports["OTLP/HTTP"], ports["metrics"]


def housekeeping(port: int) -> dict[str, float]:
    """What serve's background thread did so far, from its /metrics."""
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        con.request("GET", "/metrics")
        text = con.getresponse().read().decode()
    finally:
        con.close()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(
            ("loopwatch_retention_deleted", "loopwatch_rollup_passes", "loopwatch_archive_files")
        ):
            name, value = line.rsplit(" ", 1)
            found[name.removeprefix("loopwatch_")] = float(value)
    return found


def make_history(path: Path, days: int = 10, runs_per_type: int = 150) -> int:
    """A store with ``days`` days of runs and spans ending now; its span count."""
    from loopwatch.queries.ingest.synthetic import generate_fleet
    from loopwatch.queries.store import Store

    now = datetime.now(UTC).replace(tzinfo=None)
    with Store(path) as store:
        for d in range(days):
            generate_fleet(
                store.connection,
                runs_per_type=runs_per_type,
                seed=d,
                end=now - timedelta(days=d),
                span=timedelta(days=1),
                spans=True,
            )
        row = store.connection.execute("SELECT count(*) FROM spans").fetchone()
    return int(row[0]) if row else 0


def bench_spans(db: Path) -> int:
    """The benchmark's spans (service ``bench``; the history's are ``synthetic``)."""
    from loopwatch.queries.store.database import connect_read_only

    con = connect_read_only(db)
    try:
        row = con.execute("SELECT count(*) FROM spans WHERE service = 'bench'").fetchone()
    finally:
        con.close()
    return int(row[0]) if row else 0


def run_phase(
    bodies: Path, history: Path, senders: int, connections: int, extra: tuple[str, ...]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        shutil.copy(history, db)
        proc, port, metrics_port = start_server(db, *(e.replace("{tmp}", tmp) for e in extra))
        try:
            idle_kb = memory_kb(proc.pid, "VmRSS") + children_kb(proc.pid, "VmRSS")
            children = [
                subprocess.Popen(
                    [
                        sys.executable,
                        str(Path(__file__).with_name("bench_serve.py")),
                        "--sender",
                        str(bodies),
                        str(port),
                        str(i),
                        str(senders),
                        str(connections),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(senders)
            ]
            for child in children:
                assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            t0 = time.perf_counter()
            for child in children:
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            results = []
            for child in children:
                assert child.stdout is not None
                results.append(json.loads(child.stdout.readline()))
                child.wait()
            elapsed = time.perf_counter() - t0
            health(port)
            keeper = housekeeping(metrics_port)
            peak_kb = memory_kb(proc.pid, "VmHWM") + children_kb(proc.pid, "VmHWM")
        finally:
            proc.terminate()
            proc.wait(120)
        stored = bench_spans(db)
    return {
        "stored": stored,
        "acknowledged": sum(r["spans"] for r in results),
        "spans_per_s": stored / elapsed,
        "elapsed_s": elapsed,
        "idle_mb": idle_kb / 1024,
        "peak_mb": peak_kb / 1024,
        "housekeeping": keeper,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--connections", type=int, default=2, help="per sender")
    parser.add_argument(
        "--stream",
        choices=("native", "foreign"),
        default="native",
        help="loopwatch's spans, or the same without loopwatch.* attributes (serve rebuilds "
        "their runs, --foreign-grace-s 0.5)",
    )
    args = parser.parse_args()
    foreign = args.stream == "foreign"
    bodies = make_bodies(args.spans, args.batch, foreign=foreign)
    grace = ("--foreign-grace-s", "0.5") if foreign else ()
    n_spans = sum(c for c, _ in bodies)
    rates: dict[str, float] = {}
    lost = 0
    with tempfile.TemporaryDirectory() as tmp:
        path, history = Path(tmp) / "bodies.bin", Path(tmp) / "history.duckdb"
        write_bodies(path, bodies)
        print(f"history: {make_history(history):,} spans over 10 days; {n_spans:,} spans to send")
        for name, flags in PHASES:
            extra = (*flags, *grace)
            load = "/".join(f"{x:.1f}" for x in os.getloadavg())
            r = run_phase(path, history, args.senders, args.connections, extra)
            rates[name] = r["spans_per_s"]
            lost += n_spans - r["stored"]
            print(
                f"{name:4}: {r['stored']:,} of {n_spans:,} spans committed in "
                f"{r['elapsed_s']:.2f} s = {r['spans_per_s']:,.0f} spans/s; memory idle "
                f"{r['idle_mb']:.0f} MB, peak {r['peak_mb']:.0f} MB; load average {load}; "
                f"{' '.join(extra)}",
                flush=True,
            )
            print(f"      background work during the run: {r['housekeeping']}")
    print(f"on / off: {rates['on'] / rates['off']:.2f}; lost {lost}")
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
