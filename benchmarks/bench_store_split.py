"""Where store ingest time goes, and what a second process would change (measured in one run).

1. Split: per span, at the exporter's batch size, the cost of each stage of
   ``Store.write_spans`` on freshly ended spans (as the exporter sees them): SDK spans to
   records, records to Arrow, the ``runs`` rows, and DuckDB's insert + commit.
2. Two processes: the same conversion in this process, each batch sent as Arrow IPC over a
   pipe to a writer process that inserts and commits it (the same SQL the store runs) while
   this process converts the next batch; one batch in flight. Blocks of batches take turns
   with the in-process ``Store.write_spans`` so noise hits both alike.

The second design is not what file mode does (DESIGN §6: one process writes the file); it is
measured so that the 100k spans/s question has numbers, see docs/store.md.

    python benchmarks/bench_store_split.py [--quick] [--batch B] [--blocks N]
"""

from __future__ import annotations

import argparse
import gc
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import pyarrow as pa
from bench_store import emit_runs, make_provider
from loopwatch.queries.exporter import STORE_CHECKPOINT_MB, STORE_THREADS
from loopwatch.queries.store import Store, records_from_spans, runs_table, spans_table
from opentelemetry.sdk.trace import ReadableSpan

_FRAME = struct.Struct("<QQ")  # bytes of the spans table, bytes of the runs table (0: none)
_INSERT_SPANS = "INSERT INTO spans BY NAME SELECT * FROM spans_batch"
# What Store runs for a batch whose run ids are new (as here).
_INSERT_RUNS = (
    "INSERT INTO runs BY NAME "
    "SELECT *, make_timestamp(start_ns // 1000) AS started_at FROM runs_batch"
)


def _ipc(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def writer_main(path: str) -> None:
    """The writer process: one transaction per framed batch, ``ok`` once committed."""
    store = Store(path, threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB)
    store.warm_up()
    con = store.connection
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    while header := inp.read(_FRAME.size):
        spans_len, runs_len = _FRAME.unpack(header)
        # DuckDB finds spans_batch and runs_batch among this frame's locals.
        spans_batch = pa.ipc.open_stream(pa.py_buffer(inp.read(spans_len))).read_all()
        runs_batch = (
            pa.ipc.open_stream(pa.py_buffer(inp.read(runs_len))).read_all() if runs_len else None
        )
        runs_sql = f"{_INSERT_RUNS}; " if runs_batch is not None else ""
        con.execute(f"BEGIN; {_INSERT_SPANS}; {runs_sql}COMMIT")
        del spans_batch, runs_batch
        out.write(b"ok\n")
        out.flush()
    store.close()


def _convert(spans: list[ReadableSpan]) -> tuple[pa.Table, pa.Table | None]:
    records = records_from_spans(spans)
    return spans_table(records), runs_table(records)


def _fresh_batches(n: int, size: int, rng: random.Random) -> list[list[ReadableSpan]]:
    provider, collect = make_provider()
    batches = []
    for _ in range(n):
        collect.spans.clear()
        emit_runs(provider, size, rng)
        batches.append(collect.spans[:size])
    return batches


def _split(batches: list[list[ReadableSpan]], store: Store) -> dict[str, float]:
    """Seconds per stage, summed over the batches, each written through ``store``."""
    spent = dict.fromkeys(("records", "arrow", "runs", "commit"), 0.0)
    con = store.connection
    for spans in batches:
        t0 = time.perf_counter()
        records = records_from_spans(spans)
        t1 = time.perf_counter()
        spans_batch = spans_table(records)
        t2 = time.perf_counter()
        runs_batch = runs_table(records)
        t3 = time.perf_counter()
        con.execute(f"BEGIN; {_INSERT_SPANS}; {_INSERT_RUNS}; COMMIT")
        t4 = time.perf_counter()
        for key, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[key] += dt
        del spans_batch, runs_batch
    return spent


def _in_process(batches: list[list[ReadableSpan]], store: Store) -> float:
    t0 = time.perf_counter()
    for spans in batches:
        store.write_spans(spans)
    return time.perf_counter() - t0


def _two_process(batches: list[list[ReadableSpan]], stdin: IO[bytes], stdout: IO[bytes]) -> float:
    t0 = time.perf_counter()
    in_flight = 0
    for spans in batches:
        spans_batch, runs_batch = _convert(spans)
        first = _ipc(spans_batch)
        second = _ipc(runs_batch) if runs_batch is not None else b""
        if in_flight:
            if stdout.readline() != b"ok\n":
                raise RuntimeError("writer process failed")
            in_flight -= 1
        stdin.write(_FRAME.pack(len(first), len(second)))
        stdin.write(first)
        stdin.write(second)
        stdin.flush()
        in_flight += 1
    while in_flight:
        if stdout.readline() != b"ok\n":
            raise RuntimeError("writer process failed")
        in_flight -= 1
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--blocks", type=int, default=6, help="blocks per side")
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        writer_main(args.writer)
        return
    per_block = 3 if args.quick else 8
    blocks = 2 if args.quick else args.blocks
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="bench_split_") as tmp:
        work = Path(tmp)
        store = Store(work / "in.duckdb", threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB)
        split_store = Store(
            work / "split.duckdb", threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB
        )
        writer = subprocess.Popen(
            [sys.executable, __file__, "--writer", str(work / "two.duckdb")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert writer.stdin is not None and writer.stdout is not None
        if writer.stdout.readline() != b"ready\n":
            raise SystemExit("the writer process did not start")
        # Warm-up: one-time imports and first-insert costs on every side.
        warm = _fresh_batches(1, args.batch, rng)
        _in_process(warm, store)
        _split(warm, split_store)
        _two_process(warm, writer.stdin, writer.stdout)
        totals = {"in-process": 0.0, "two processes": 0.0}
        stages = dict.fromkeys(("records", "arrow", "runs", "commit"), 0.0)
        spans_per_side = 0
        for block in range(blocks):
            order = ["in-process", "two processes"]
            if block % 2:
                order.reverse()
            for side in order:
                batches = _fresh_batches(per_block, args.batch, rng)
                gc.collect()
                gc.disable()
                try:
                    if side == "in-process":
                        totals[side] += _in_process(batches, store)
                    else:
                        totals[side] += _two_process(batches, writer.stdin, writer.stdout)
                finally:
                    gc.enable()
            split_batches = _fresh_batches(per_block, args.batch, rng)
            gc.collect()
            gc.disable()
            try:
                for key, dt in _split(split_batches, split_store).items():
                    stages[key] += dt
            finally:
                gc.enable()
            spans_per_side += per_block * args.batch
        writer.stdin.close()
        writer.wait()
        store.close()
        split_store.close()
    n = spans_per_side
    print(f"batch {args.batch}, {n:,} fresh spans per side")
    print("per span, µs: " + ", ".join(f"{k} {v / n * 1e6:.2f}" for k, v in stages.items()))
    conversion = stages["records"] + stages["arrow"] + stages["runs"]
    print(
        f"conversion {conversion / n * 1e6:.2f} µs against DuckDB insert + commit "
        f"{stages['commit'] / n * 1e6:.2f} µs"
    )
    in_rate = n / totals["in-process"]
    two_rate = n / totals["two processes"]
    print(f"{'in-process Store.write_spans':<34} {in_rate:>10,.0f} spans/s")
    print(f"{'two processes, one batch in flight':<34} {two_rate:>10,.0f} spans/s")
    print(f"ratio two processes / in-process: {two_rate / in_rate:.2f}")


if __name__ == "__main__":
    main()
