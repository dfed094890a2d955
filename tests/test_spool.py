"""Nothing lost between agent and store: the agent-side spool (docs/telemetry.md, *The spool*).

Real parts only: agents are real processes running real loops with ``instrument(spool_dir=...)``;
the endpoint is a real ``loopwatch serve`` killed and started again on the same port, or, where
the order of arrival is checked, a real HTTP server on 127.0.0.1 that decodes every request.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation.runtime.drops import dropped, reset_drops
from loopwatch.instrumentation.telemetry.processor import CountingBatchSpanProcessor
from loopwatch.instrumentation.telemetry.spool import DiskSpool, SpoolFull, open_slot
from loopwatch.instrumentation.telemetry.spooled import SpoolingOTLPExporter
from opentelemetry.context import Context
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from tests.serving import ServeProcess, store_rows

pytestmark = pytest.mark.timeout(240)

AGENT = textwrap.dedent(
    """
    import json, os, sys, time
    from loopwatch.instrumentation import ToolRegistry, instrument, run
    from loopwatch.instrumentation.runtime.drops import dropped
    from loopwatch.instrumentation.testing import FakeModel, tool_call
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    endpoint, spool, runs, pause, flush_s = sys.argv[1:6]
    made = InMemorySpanExporter()  # counts every span the agent ended
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(made))
    handle = instrument(tracer_provider=provider, otlp_endpoint=endpoint, spool_dir=spool,
                        shutdown_timeout_millis=2000)
    registry = ToolRegistry()
    registry.register(lambda: "ok", name="ping", parameters={"type": "object"})
    peak = 0
    exporter = handle.processors[0]._exporter
    for _ in range(int(runs)):
        run(FakeModel([tool_call("ping"), "done"]), registry, "go", raise_on_stop=False)
        peak = max(peak, exporter.spool.size_bytes)
        time.sleep(float(pause))
    flushed = handle.force_flush(int(float(flush_s) * 1000))
    peak = max(peak, exporter.spool.size_bytes)
    handle.shutdown()
    print(json.dumps({"made": len(made.get_finished_spans()), "dropped": dropped(),
                      "flushed": flushed, "peak_spool_bytes": peak,
                      "left": exporter.spool.spans}), flush=True)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _agent(
    endpoint: str, spool: Path, runs: int, pause: float, flush_s: float
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, endpoint, str(spool), str(runs), str(pause), str(flush_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LOOPWATCH_SPOOL_MAX_MB": "4", "OTEL_BSP_SCHEDULE_DELAY": "200"},
    )


def _result(proc: subprocess.Popen[str], timeout_s: float = 180) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


OUTAGE_S = 30.0
"""How long serve stays down: the issue's 30 s, longer than the exporter's own retries (~10 s),
so every agent's batches go to the spool and wait there, and the spool keeps taking new ones."""
RUNS_PER_AGENT = int((4 + OUTAGE_S + 6) / 0.1)  # the agents keep running past the outage


def test_serve_killed_mid_fleet_loses_nothing(tmp_path: Path) -> None:
    """Three agents; serve is killed (SIGKILL) for 30 s in the middle and started again."""
    port = _free_port()
    db = tmp_path / "live.duckdb"
    endpoint = f"http://127.0.0.1:{port}/v1/traces"
    serve = ServeProcess(db, "--otlp-port", str(port))
    agents = [_agent(endpoint, tmp_path / "spool", RUNS_PER_AGENT, 0.1, 120) for _ in range(3)]
    time.sleep(4)
    serve.kill()
    time.sleep(OUTAGE_S)  # the outage: every agent keeps running and spools
    assert all(a.poll() is None for a in agents), "an agent ended before serve came back"
    spooled_during_outage = sum(
        len(list(slot.glob("*.req"))) for slot in (tmp_path / "spool").glob("slot-*")
    )
    serve = ServeProcess(db, "--otlp-port", str(port))
    results = [_result(a) for a in agents]
    serve.stop()
    made = sum(r["made"] for r in results)
    assert spooled_during_outage > 0, "the outage did not reach the spool"
    assert all(r["dropped"] == {} and r["flushed"] and r["left"] == 0 for r in results), results
    assert all(r["peak_spool_bytes"] <= 4 << 20 for r in results)
    [(stored, distinct)] = store_rows(
        db, "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans"
    )
    assert stored == distinct == made
    [(runs,)] = store_rows(db, "SELECT count(*) FROM runs")
    assert runs == 3 * RUNS_PER_AGENT


def test_spool_survives_an_agent_restart(tmp_path: Path) -> None:
    """An agent that exits while serve is down leaves its spool; the next one sends it."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}/v1/traces"
    first = _result(_agent(endpoint, tmp_path / "spool", 20, 0.0, 0.5))
    assert first["dropped"] == {} and first["left"] == first["made"]
    db = tmp_path / "live.duckdb"
    serve = ServeProcess(db, "--otlp-port", str(port))
    second = _result(_agent(endpoint, tmp_path / "spool", 5, 0.0, 60))
    serve.stop()
    assert second["dropped"] == {} and second["left"] == 0
    [(stored,)] = store_rows(db, "SELECT count(*) FROM spans")
    assert stored == first["made"] + second["made"]


# --- in-process: order, back-pressure, full and damaged spools ----------------------------------


class Recorder(ThreadingHTTPServer):
    """An OTLP/HTTP receiver that answers ``status`` (503 while refusing) and records spans."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = 200
        self.received: list[tuple[str, int]] = []  # (trace id, seq attribute) in arrival order
        self.refused = 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.server.status != 200:
            self.server.refused += 1
            self.send_response(self.server.status)
            self.send_header("Retry-After", "0")
            self.end_headers()
            return
        request = ExportTraceServiceRequest.FromString(gzip.decompress(body))
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    seq = next(a.value.int_value for a in span.attributes if a.key == "seq")
                    self.server.received.append((span.trace_id.hex(), seq))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _no_drops() -> Iterator[None]:
    reset_drops()
    yield
    reset_drops()


def _emit(exporter: SpoolingOTLPExporter, traces: int, spans: int, batch: int = 7) -> int:
    processor = CountingBatchSpanProcessor(
        exporter,
        max_export_batch_size=batch,
        schedule_delay_millis=50,
        shutdown_timeout_millis=30000,
    )
    provider = TracerProvider(resource=Resource.create({}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("spool-test")
    for t in range(traces):
        # an empty context: a span another test left current must not adopt these roots
        with tracer.start_as_current_span(f"root-{t}", Context(), attributes={"seq": 0}):
            for i in range(1, spans):
                with tracer.start_as_current_span("step", attributes={"seq": i}):
                    pass
    processor.force_flush(1000)
    return traces * spans


def test_503_then_back_sends_in_order(tmp_path: Path, recorder: Recorder) -> None:
    recorder.status = 503
    exporter = SpoolingOTLPExporter(recorder.url, tmp_path, max_bytes=1 << 20, sync=False)
    made = _emit(exporter, traces=20, spans=10)
    assert recorder.refused > 0 and exporter.spool.spans == made  # all on disk, none sent
    recorder.status = 200
    assert exporter.force_flush(30000)
    exporter.shutdown()
    assert len(recorder.received) == made and dropped() == {}
    by_trace: dict[str, list[int]] = {}
    for trace_id, seq in recorder.received:
        by_trace.setdefault(trace_id, []).append(seq)
    # Each step ends before the next begins, the root last: 1, 2, ..., 9, then the root's 0.
    assert len(by_trace) == 20
    assert all(seqs == [*range(1, 10), 0] for seqs in by_trace.values()), by_trace


def test_full_spool_counts_its_losses_exactly(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{_free_port()}/v1/traces"  # nothing listens: refused
    exporter = SpoolingOTLPExporter(endpoint, tmp_path, max_bytes=16 << 10, sync=False)
    made = _emit(exporter, traces=60, spans=10)
    exporter.shutdown()
    kept = exporter.spool.spans
    assert 0 < kept < made
    assert exporter.spool.size_bytes <= 16 << 10
    assert dropped() == {"spool_full": made - kept}


def test_damaged_record_is_counted_and_skipped(tmp_path: Path, recorder: Recorder) -> None:
    recorder.status = 503
    exporter = SpoolingOTLPExporter(recorder.url, tmp_path, max_bytes=1 << 20, sync=False)
    made = _emit(exporter, traces=6, spans=5, batch=5)
    exporter.shutdown()
    records = sorted(exporter.slot.glob("*.req"))
    damaged = records[2]
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0xFF
    damaged.write_bytes(bytes(data))
    lost = int(damaged.stem.split("-")[1])
    recorder.status = 200
    again = SpoolingOTLPExporter(recorder.url, tmp_path, max_bytes=1 << 20, sync=False)
    assert again.slot == exporter.slot  # the free slot with the leftovers is taken again
    assert again.force_flush(30000)
    again.shutdown()
    assert dropped() == {"spool_corrupt": lost}
    assert len(recorder.received) == made - lost


def test_slots_are_one_process_each(tmp_path: Path) -> None:
    first, lock = open_slot(tmp_path)
    second, lock2 = open_slot(tmp_path)
    assert first != second
    assert lock is not None and lock2 is not None
    lock.close()
    third, lock3 = open_slot(tmp_path)
    assert third == first
    spool = DiskSpool(third, max_bytes=100, sync=False)
    spool.append(b"x" * 50, 1)
    with pytest.raises(SpoolFull):
        spool.append(b"x" * 50, 1)
    assert len(DiskSpool(third, max_bytes=100)) == 1  # read back from disk
    for handle in (lock2, lock3):
        assert handle is not None
        handle.close()
