"""Live-mode ingest, end to end: sender processes -> ``loopwatch serve`` over 127.0.0.1 -> DuckDB.

The spans (shaped like an instrumented loop's, as in ``bench_store.py``) are made and serialized
to OTLP protobuf bodies up front, so that span creation in the senders is not what gets measured.
Sender processes replay the bodies over keep-alive connections, as the standard exporter does:
each body is sent until it is answered 200, waiting ``Retry-After`` on 429/503.

1. Throughput: ``--senders`` processes x ``--connections`` each, every body once, once per
   ``serve --decoders`` value (decoding in a thread of the server, then in a separate process).
   Prints spans/s committed end to end (first send to last 200, checked against the store's
   count: no span lost), the server's CPU seconds (its own and its decoder processes', read
   from /proc: per span, the figure that holds still on a shared machine) and its peak memory
   (VmHWM of the server plus its decoder processes).
2. Overload, twice: a fresh server with a small pending limit (``--overload-pending-mb``) and many
   more connections than it can serve at once, then twice as many: prints how many requests were
   pushed back with 503, that everything was still stored, and the server's peak memory (bounded
   by the limit, not by the number of senders: the two peaks should match).

Each throughput phase runs once per ``--housekeeping`` mode, side by side: ``off`` (no rollups,
retention or archive) and ``on`` (rollups every second, sixty times serve's default, retention's
default windows, and ``--archive`` to a directory); the ratio on / off is printed.

Also printed, first: serve's path stage by stage in this process, in CPU seconds
(``serve_stages.py``: decode, Arrow batch, foreign views, commit, metrics, foreign runs, derived
write), per housekeeping mode, with the load average: the figures that hold still on a shared
machine, where the end-to-end ones move with the load. Targets: >= 20k spans/s, nothing lost,
memory bounded under overload.

    python benchmarks/bench_serve.py [--spans N] [--batch B] [--senders S] [--connections C]
        [--streams native,foreign] [--decoders 0,1] [--housekeeping off,on] [--skip-overload]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

PHOENIX_SPANS_PER_S: Final = 150.0
"""Arize Phoenix 20.26 (SQLite) on the same kind of stream: the issue's measured figure, not
re-measured here."""


# --- bodies ----------------------------------------------------------------------------------


def make_bodies(
    n_spans: int, batch: int, seed: int = 1, foreign: bool = False
) -> list[tuple[int, bytes]]:
    """(span count, OTLP protobuf body) of ``n_spans`` spans in bodies of ``batch`` spans;
    ``foreign``: without any ``loopwatch.*`` attribute, as another instrumentation's GenAI
    spans (``invoke_agent``, ``chat``, ``execute_tool``) arrive: serve rebuilds their runs."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_store import emit_runs, make_provider
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    provider, collect = make_provider()
    emit_runs(provider, n_spans, random.Random(seed))
    spans = collect.spans[:n_spans]
    out = []
    for i in range(0, len(spans), batch):
        request = encode_spans(spans[i : i + batch])
        if foreign:
            _strip_loopwatch(request)
        out.append((len(spans[i : i + batch]), bytes(request.SerializeToString())))
    return out


def _strip_loopwatch(request: Any) -> None:
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                keep = [kv for kv in span.attributes if not kv.key.startswith("loopwatch.")]
                del span.attributes[:]
                span.attributes.extend(keep)


def count_runs(bodies: list[tuple[int, bytes]]) -> int:
    """Run spans (``invoke_agent``) among the bodies."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    n = 0
    for _, body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                n += sum(1 for sp in ss.spans if sp.name.startswith("invoke_agent"))
    return n


def foreign_runs(port: int) -> int:
    """Runs rebuilt from foreign spans so far (the JSON API's runs_by_source)."""
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        con.request("GET", "/api/v1/queries/runs_by_source?max_rows=10000")
        rows = json.loads(con.getresponse().read())["rows"]
    finally:
        con.close()
    return sum(int(r["runs"]) for r in rows if r["source"] == "foreign")


_LEN: Final = struct.Struct("<I")


def write_bodies(path: Path, bodies: list[tuple[int, bytes]]) -> None:
    with path.open("wb") as f:
        for count, body in bodies:
            f.write(_LEN.pack(count) + _LEN.pack(len(body)) + body)


def read_bodies(path: Path) -> list[tuple[int, bytes]]:
    data = path.read_bytes()
    out = []
    pos = 0
    while pos < len(data):
        (count,) = _LEN.unpack_from(data, pos)
        (size,) = _LEN.unpack_from(data, pos + 4)
        out.append((count, data[pos + 8 : pos + 8 + size]))
        pos += 8 + size
    return out


# --- a sender process ------------------------------------------------------------------------


def sender_main(path: str, port: int, index: int, senders: int, connections: int) -> int:
    """Send this sender's share of the bodies (every ``senders``-th) over ``connections``
    keep-alive connections; print one JSON line of counts when done."""
    bodies = read_bodies(Path(path))[index::senders]
    lock = threading.Lock()
    queue = list(reversed(bodies))
    stats = {"ok": 0, "spans": 0, "busy": 0, "errors": 0}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()  # the go signal

    def work() -> None:
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                if not queue:
                    break
                count, body = queue.pop()
            while True:
                try:
                    con.request(
                        "POST",
                        "/v1/traces",
                        body,
                        {"Content-Type": "application/x-protobuf"},
                    )
                    response = con.getresponse()
                    response.read()
                except (OSError, http.client.HTTPException):
                    with lock:
                        stats["errors"] += 1
                    con.close()
                    con = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                    time.sleep(0.1)
                    continue
                if response.status == 200:
                    with lock:
                        stats["ok"] += 1
                        stats["spans"] += count
                    break
                if response.status in (429, 503):
                    with lock:
                        stats["busy"] += 1
                    time.sleep(float(response.getheader("Retry-After") or "1"))
                    continue
                raise SystemExit(f"unexpected answer {response.status}")
        con.close()

    threads = [threading.Thread(target=work) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(stats), flush=True)
    return 0


# --- the server ------------------------------------------------------------------------------


def start_server(db: Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "loopwatch.dashboard.cli", "serve", "--db", str(db),
            "--otlp-port", "0", "--metrics-port", "0", "--no-ui", *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("serve did not start")
        if line.startswith("OTLP/HTTP"):
            port = int(line.rsplit(":", 1)[1].split("/", 1)[0])
        if line.startswith("store"):
            return proc, port


def health(port: int) -> dict[str, Any]:
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        con.request("GET", "/health")
        data: dict[str, Any] = json.loads(con.getresponse().read())
        return data
    finally:
        con.close()


def memory_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def children_kb(pid: int, field: str) -> int:
    """``field`` summed over the direct children of ``pid`` (serve's decoder processes)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                with contextlib.suppress(OSError):
                    total += memory_kb(int(child), field)
    return total


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its direct children (serve's decoder
    processes) so far: what the server spent, whatever else runs on the machine."""
    tick = os.sysconf("SC_CLK_TCK")

    def one(p: int) -> float:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    total = one(pid)
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                with contextlib.suppress(OSError):
                    total += one(int(child))
    return total


def run_phase(
    bodies_path: Path, n_spans: int, senders: int, connections: int, *extra: str,
    runs: int = 0,
) -> dict[str, Any]:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(Path(tmp) / "bench.duckdb", *extra)
        try:
            idle_kb = memory_kb(proc.pid, "VmRSS") + children_kb(proc.pid, "VmRSS")
            idle_cpu = cpu_s(proc.pid)
            children = [
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--sender",
                        str(bodies_path),
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
                assert child.stdout is not None
                assert child.stdout.readline().strip() == "ready"
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
            # Foreign streams: until every run is rebuilt (its trace final after the grace).
            while runs and foreign_runs(port) < runs:
                time.sleep(0.05)
            built = time.perf_counter() - t0
            stored = health(port)["spans"]
            peak_kb = memory_kb(proc.pid, "VmHWM") + children_kb(proc.pid, "VmHWM")
            server_cpu = cpu_s(proc.pid) - idle_cpu
        finally:
            proc.terminate()
            proc.wait(120)
    acknowledged = sum(r["spans"] for r in results)
    return {
        "elapsed_s": elapsed,
        "acknowledged": acknowledged,
        "stored": stored,
        "sent": n_spans,
        "busy": sum(r["busy"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "spans_per_s": stored / elapsed,
        "built_s": built,
        "server_cpu_s": server_cpu,
        "idle_mb": idle_kb / 1024,
        "peak_mb": peak_kb / 1024,
    }


def in_process(bodies: list[tuple[int, bytes]], foreign: bool, grace: float,
               modes: list[str]) -> dict[str, float]:  # fmt: skip
    """serve's path stage by stage in this process, per housekeeping mode (serve_stages.py)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from serve_stages import print_stages, stage_rates

    total = sum(c for c, _ in bodies)
    rates = {}
    print(f"in process, stage by stage, in CPU seconds (load average {_load()}):")
    for mode in modes:
        spent, cpu = stage_rates(bodies, foreign=foreign, grace_s=grace,
                                 housekeeping=mode == "on")  # fmt: skip
        print_stages(f"housekeeping {mode}", total, spent, cpu)
        rates[mode] = total / cpu
    if len(rates) == 2:
        print(f"  in process: housekeeping on / off = {rates['on'] / rates['off']:.2f}")
    return rates


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


HOUSEKEEPING: Final = {
    "off": ("--rollup-every-s", "0", "--keep-spans", "forever", "--keep-runs", "forever"),
    # rollups every second (the default is a minute), retention's default windows, an archive
    "on": ("--rollup-every-s", "1"),
}
"""serve's flags per ``--housekeeping`` mode (``on`` adds ``--archive DIR``)."""


def _stream(
    args: argparse.Namespace, stream: str, overload: bool, seen: dict[str, dict[str, float]]
) -> bool:
    """Measure one stream (native or foreign), its rates into ``seen``; True when a span was
    lost."""
    foreign = stream == "foreign"
    print(f"[{stream}] making {args.spans} spans in OTLP bodies of {args.batch} ...", flush=True)
    bodies = make_bodies(args.spans, args.batch, foreign=foreign)
    n_spans = sum(c for c, _ in bodies)
    runs = count_runs(bodies) if foreign else 0
    size_mb = sum(len(b) for _, b in bodies) / 1e6
    print(f"{len(bodies)} bodies, {size_mb:.1f} MB of protobuf, {n_spans} spans")
    modes = args.housekeeping.split(",")
    seen[stream] = {f"in process, housekeeping {m}": r
                    for m, r in in_process(bodies, foreign, args.grace, modes).items()}  # fmt: skip
    grace = ("--foreign-grace-s", str(args.grace)) if foreign else ()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bodies.bin"
        write_bodies(path, bodies)
        archive = ("--archive", str(Path(tmp) / "archive"))
        phases: list[tuple[str, int, int, tuple[str, ...]]] = [
            (f"decoders={d} housekeeping {m}", args.senders, args.connections,
             ("--decoders", d, *grace, *HOUSEKEEPING[m], *(archive if m == "on" else ())))
            for d in args.decoders.split(",")
            for m in modes
        ]  # fmt: skip
        if overload and not args.skip_overload:
            # Twice the senders' connections: the peak memory must not follow.
            for factor in (1, 2):
                phases.append(
                    (
                        f"overload x{factor}",
                        args.overload_senders,
                        args.overload_connections * factor,
                        ("--max-pending-mb", str(args.overload_pending_mb)),
                    )
                )
        failed = False
        rates: dict[str, float] = {}
        for name, senders, connections, extra in phases:
            load = _load()
            r = run_phase(path, n_spans, senders, connections, *extra, runs=runs)
            lost = r["sent"] - r["stored"]
            rates[name] = r["spans_per_s"]
            print(
                f"[{stream}] {name}, load average {load}: {senders} senders x {connections} "
                "connections"
                f"{' ' + ' '.join(extra) if extra else ''}: "
                f"{r['stored']:,} of {r['sent']:,} spans committed in {r['elapsed_s']:.2f} s = "
                f"{r['spans_per_s']:,.0f} spans/s end to end; pushed back (503) {r['busy']} "
                f"times; lost {lost}; server memory idle {r['idle_mb']:.0f} MB, "
                f"peak {r['peak_mb']:.0f} MB"
            )
            print(
                f"            server CPU: {r['server_cpu_s']:.2f} s = "
                f"{r['stored'] / max(r['server_cpu_s'], 1e-9):,.0f} spans per server CPU second "
                "(decoder processes included; holds still under load)"
            )
            if runs:
                print(
                    f"            all {runs:,} runs rebuilt {r['built_s']:.2f} s after the first "
                    f"send (grace {args.grace} s) = {r['stored'] / r['built_s']:,.0f} spans/s "
                    "to the last rebuilt run"
                )
            failed |= lost != 0 or r["acknowledged"] != r["sent"]
            if name.startswith("decoders"):
                ratio = r["spans_per_s"] / PHOENIX_SPANS_PER_S
                print(
                    f"            = {ratio:,.0f}x Arize Phoenix's ~{PHOENIX_SPANS_PER_S:.0f} "
                    "spans/s (the issue's measured figure for Phoenix 20.26, not re-measured "
                    "here)"
                )
                if r["spans_per_s"] < 20_000:
                    print("            below the 20k spans/s target")
        seen[stream].update({f"end to end, {name}": rate for name, rate in rates.items()})
        for name, rate in rates.items():
            if name.endswith("housekeeping on"):
                off = rates.get(name.replace(" on", " off"))
                if off:
                    print(f"[{stream}] {name.rsplit(' ', 2)[0]}: end to end, housekeeping "
                          f"on / off = {rate / off:.2f}")  # fmt: skip
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=512, help="spans per request (OTel's default)")
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--connections", type=int, default=2, help="per sender")
    parser.add_argument("--overload-senders", type=int, default=4)
    parser.add_argument("--overload-connections", type=int, default=8, help="per sender")
    parser.add_argument("--overload-pending-mb", type=int, default=8)
    parser.add_argument("--skip-overload", action="store_true")
    parser.add_argument(
        "--grace", type=float, default=0.5, help="serve --foreign-grace-s for the foreign stream"
    )
    parser.add_argument(
        "--decoders",
        default="0,1",
        help="serve --decoders values for the throughput phase, measured side by side",
    )
    parser.add_argument(
        "--streams",
        default="native,foreign",
        help="native (loopwatch's spans), foreign (the same without loopwatch.* attributes: "
        "serve rebuilds their runs), measured side by side",
    )
    parser.add_argument(
        "--housekeeping",
        default="off,on",
        help="off (no rollups, retention or archive), on (rollups every second, retention, "
        "an archive directory), measured side by side",
    )
    parser.add_argument("--sender", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sender:
        path, port, index, senders, connections = args.sender
        return sender_main(path, int(port), int(index), int(senders), int(connections))

    failed = False
    streams = args.streams.split(",")
    seen: dict[str, dict[str, float]] = {}
    for stream in streams:
        failed |= _stream(args, stream, overload=stream == streams[0], seen=seen)
    if "native" in seen and "foreign" in seen:
        for what, native in seen["native"].items():
            foreign = seen["foreign"].get(what)
            if foreign:
                print(f"foreign / native, {what}: {foreign / native:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
