"""Soak: ``loopwatch serve`` at a steady rate, retention and rollups on (the archive with
``--archive``); memory and disk sampled over time (docs/store.md, *Retention*).

The issue asks for 10 minutes (the default); ``--seconds 120`` is the short version. Retention
windows are shortened (``--keep-spans``, ``--keep-runs``) so that deletion starts inside the
soak and the disk can be seen to level off.

    python benchmarks/bench_soak.py [--seconds 600] [--rate 2000] [--keep-spans 60s]
"""

from __future__ import annotations

import argparse
import http.client
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def disk_mb(*paths: Path) -> float:
    total = 0
    for p in paths:
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.exists():
            total += p.stat().st_size
    return total / 1e6


def post(
    con: http.client.HTTPConnection, port: int, body: bytes
) -> tuple[http.client.HTTPConnection, int]:
    """POST one body; a dropped keep-alive connection is opened again and the body re-sent
    (serve recognises a request it committed before)."""
    for _ in range(5):
        try:
            con.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            response = con.getresponse()
            response.read()
            return con, response.status
        except (OSError, http.client.HTTPException):
            con.close()
            con = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    return con, 0


def describe(db: Path) -> None:
    """Rows per table and DuckDB's block use (live vs free) of the store after the soak."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone() for t in tables}
        print("rows:", {t: c[0] for t, c in counts.items() if c})
        size = con.execute(
            "SELECT total_blocks, used_blocks, free_blocks, database_size"
            " FROM pragma_database_size()"
        ).fetchone()
        print("blocks total / used / free, size:", size)
    finally:
        con.close()


def main() -> int:
    from bench_serve_fleet import start_server
    from bench_store import emit_runs, make_provider
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--rate", type=int, default=2000, help="spans per second sent")
    parser.add_argument("--keep-spans", default="60s")
    parser.add_argument("--keep-runs", default="120s")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument(
        "--archive",
        action="store_true",
        help="archive too (no day is sealed within a soak, and retention never deletes a day "
        "not archived: with it, nothing is deleted during the soak)",
    )
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        db, archive = Path(tmp) / "soak.duckdb", Path(tmp) / "archive"
        archiving = ("--archive", str(archive), "--node", "soak") if args.archive else ()
        proc, port, _ = start_server(
            db, "--keep-spans", args.keep_spans, "--keep-runs", args.keep_runs,
            "--rollup-every-s", "10", *archiving,
        )  # fmt: skip
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        sent = refused = 0
        t0 = next_sample = time.monotonic()
        print("   t (s)   spans sent   RSS (MB)   disk: store + log + archive (MB)")
        try:
            while (now := time.monotonic()) - t0 < args.seconds:
                provider, collect = make_provider()
                emit_runs(provider, args.rate // 4, rng)
                spans = collect.spans
                for i in range(0, len(spans), 512):
                    body = encode_spans(spans[i : i + 512]).SerializeToString()
                    con, status = post(con, port, body)
                    if status == 200:
                        sent += len(spans[i : i + 512])
                    else:
                        refused += 1
                if now >= next_sample:
                    wal = db.with_name(db.name + ".wal")
                    print(
                        f"{now - t0:8.0f} {sent:12,} {rss_mb(proc.pid):10.0f} "
                        f"{disk_mb(db, wal, archive):12.1f}",
                        flush=True,
                    )
                    next_sample += args.sample_s
                time.sleep(max(0.0, 0.25 - (time.monotonic() - now)))
        finally:
            con.close()
            proc.terminate()
            proc.wait(120)
        describe(db)
    print(f"requests not answered 200: {refused}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
