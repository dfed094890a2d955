"""``loopwatch serve`` end to end: a real server process, real OTLP exporters, real DuckDB."""

from __future__ import annotations

import base64
import contextlib
import gzip
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import require_program
from google.protobuf import json_format
from loopwatch.instrumentation import semconv as sc
from loopwatch.queries.ingest.otlp import decode_request
from loopwatch.queries.store.database import Store
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from tests.serving import (
    ServeProcess,
    get,
    metric_sum,
    post_traces,
    request,
    store_rows,
)

pytestmark = pytest.mark.slow


# --- span bodies ------------------------------------------------------------------------------


def make_spans(runs: int, *, prefix: str = "run", service: str = "agent") -> list[ReadableSpan]:
    """``runs`` loopwatch-shaped runs: a run span, two steps, a tool call each (4 spans a run)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for n in range(runs):
        common = {sc.RUN_ID: f"{prefix}-{n}", sc.TASK_TYPE: "triage"}
        with tracer.start_as_current_span(
            "invoke_agent a",
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.STOP_REASON: "completed" if n % 3 else "max_steps",
                sc.budget_used("steps"): 2,
                sc.budget_limit("steps"): 8,
                **common,
            },
        ):
            for step in (1, 2):
                with tracer.start_as_current_span(f"step {step}") as s:
                    s.set_attributes({sc.STEP_INDEX: step, **common})
            with tracer.start_as_current_span(
                "execute_tool lookup",
                attributes={
                    sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                    sc.GEN_AI_TOOL_NAME: "lookup",
                    sc.TOOL_STATUS: "ok",
                    **common,
                },
            ):
                pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def protobuf_body(spans: list[ReadableSpan]) -> bytes:
    return bytes(encode_spans(spans).SerializeToString())


def json_body(spans: list[ReadableSpan]) -> bytes:
    """OTLP/JSON as the specification writes it: hex ids, camelCase, int64 as strings."""
    data = json_format.MessageToDict(encode_spans(spans))

    def hexify(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hexify(value)
        elif isinstance(node, list):
            for item in node:
                hexify(item)

    hexify(data)
    return json.dumps(data).encode()


def counts(server: ServeProcess) -> tuple[int, int]:
    health = server.health()
    return int(health["spans"]), int(health["runs"])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path / "live.duckdb")
    try:
        yield process
    finally:
        process.kill()


# --- ingest -----------------------------------------------------------------------------------

SENDER = textwrap.dedent(
    """
    import sys
    from loopwatch.instrumentation import instrument
    from loopwatch.instrumentation.runtime.loop import run
    from loopwatch.instrumentation.runtime.limits import LoopLimits
    from loopwatch.instrumentation.testing import FakeModel, tool_call
    from loopwatch.instrumentation.runtime.tools import ToolRegistry

    url, name, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    handle = instrument(otlp_endpoint=url, service_name=name)
    registry = ToolRegistry()

    @registry.tool
    def lookup(key: str) -> str:
        "Look a key up."
        return "value of " + key

    for n in range(runs):
        if n % 4 == 3:  # a run the step limit cuts short
            model = FakeModel([tool_call("lookup", key=str(i)) for i in range(5)])
            run(model, registry, "loop", task_type="triage", limits=LoopLimits(max_steps=2),
                raise_on_stop=False)
        else:
            model = FakeModel([tool_call("lookup", key=str(n)), "done"])
            run(model, registry, "find", task_type="triage", raise_on_stop=False)
    handle.shutdown()
    """
)


def test_instrumented_agents_in_other_processes_land_exactly(
    server: ServeProcess, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{server.otlp}"
    senders = [
        subprocess.Popen([sys.executable, "-c", SENDER, url, f"agent-{i}", "40"]) for i in range(3)
    ]
    for sender in senders:
        assert sender.wait(120) == 0
    spans, runs = counts(server)
    assert runs == 120
    # The API reads the same store: its count of runs, per stop reason, matches.
    status, body = get(server.otlp, "/api/v1/queries/stop_reason_mix")
    assert status == 200
    mix = {r["stop_reason"]: r["runs"] for r in json.loads(body)["rows"]}
    assert mix == {"completed": 90, "max_steps": 30}
    status, body = get(server.otlp, "/api/v1/runs?top_n=1000")
    assert status == 200 and len(json.loads(body)["rows"]) == 120
    assert metric_sum(server.metrics, "loopwatch_runs_total") == 120
    assert metric_sum(server.metrics, "loopwatch_runs_total", stop_reason="max_steps") == 30
    assert server.stop() == 0
    # After a clean stop the file opens, and holds exactly what /health said.
    assert store_rows(server.db, "SELECT count(*) FROM runs") == [(120,)]
    assert store_rows(server.db, "SELECT count(*) FROM spans") == [(spans,)]
    services = store_rows(server.db, "SELECT DISTINCT service FROM runs ORDER BY 1")
    assert services == [("agent-0",), ("agent-1",), ("agent-2",)]


def test_protobuf_and_json_decode_to_the_same_rows() -> None:
    spans = make_spans(3)
    from_protobuf = decode_request(protobuf_body(spans), "application/x-protobuf")
    from_json = decode_request(json_body(spans), "application/json")
    assert from_protobuf.rejected == from_json.rejected == 0
    assert len(from_protobuf.columns) == 12
    for i in range(len(from_protobuf.columns)):
        assert from_protobuf.columns.record(i) == from_json.columns.record(i)


def test_otlp_json_over_plain_http_and_gzip(server: ServeProcess) -> None:
    status, headers, body = post_traces(server.otlp, json_body(make_spans(5)), "application/json")
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert json.loads(body) == {}  # fully accepted: no partialSuccess
    compressed = gzip.compress(protobuf_body(make_spans(4, prefix="gz")))
    status, _, body = post_traces(server.otlp, compressed, content_encoding="gzip")
    assert status == 200
    response = ExportTraceServiceResponse()
    response.ParseFromString(body)
    assert not response.HasField("partial_success")
    assert counts(server) == (36, 9)
    status, body = get(server.otlp, "/api/v1/runs")
    assert len(json.loads(body)["rows"]) == 9


def test_the_same_request_twice_counts_once_even_across_a_restart(tmp_path: Path) -> None:
    body = protobuf_body(make_spans(6))
    server = ServeProcess(tmp_path / "twice.duckdb")
    try:
        assert post_traces(server.otlp, body)[0] == 200
        assert post_traces(server.otlp, body)[0] == 200
        # Two senders retrying at once: still once.
        threads = [threading.Thread(target=post_traces, args=(server.otlp, body)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert counts(server) == (24, 6)
        assert metric_sum(server.metrics, "loopwatch_runs_total") == 6
        assert metric_sum(server.metrics, "loopwatch_tool_calls_total") == 6
        assert server.stop() == 0
        server = ServeProcess(tmp_path / "twice.duckdb")
        assert post_traces(server.otlp, body)[0] == 200  # the retry of a committed request
        assert counts(server) == (24, 6)
        assert metric_sum(server.metrics, "loopwatch_runs_total") == 0
        assert server.health()["ingest"]["duplicates"] == 1
    finally:
        server.kill()
    mix = store_rows(
        tmp_path / "twice.duckdb", "SELECT count(*), count(DISTINCT span_id) FROM spans"
    )
    assert mix == [(24, 24)]


def test_partial_success_names_the_refused_spans(server: ServeProcess) -> None:
    request_ = encode_spans(make_spans(2))
    spans = request_.resource_spans[0].scope_spans[0].spans
    spans[0].span_id = b""  # one span without an id
    status, _, body = post_traces(server.otlp, request_.SerializeToString())
    assert status == 200
    response = ExportTraceServiceResponse()
    response.ParseFromString(body)
    assert response.partial_success.rejected_spans == 1
    assert "span_id" in response.partial_success.error_message
    assert counts(server)[0] == 7


def test_plain_genai_spans_from_other_agents_become_runs(server: ServeProcess) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "other-framework"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(
        "invoke_agent helper",
        attributes={
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.GEN_AI_AGENT_NAME: "helper",
            sc.GEN_AI_USAGE_INPUT_TOKENS: 120,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
        },
    ):
        with tracer.start_as_current_span(
            "chat gpt-x", attributes={sc.GEN_AI_OPERATION_NAME: "chat"}
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool search",
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                sc.GEN_AI_TOOL_NAME: "search",
                sc.ERROR_TYPE: "TimeoutError",
            },
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "timed out"))
    provider.shutdown()
    status, _, _ = post_traces(server.otlp, protobuf_body(list(memory.get_finished_spans())))
    assert status == 200
    status, body = get(server.otlp, "/api/v1/runs")
    (run,) = json.loads(body)["rows"]
    assert run["stop_reason"] == "unknown" and run["outcome"] == "unknown"
    assert run["agent_name"] == "helper" and run["tokens"] == 150
    assert run["wall_s"] is not None and run["wall_s"] >= 0  # the span's own duration
    # Its tool error shows where the dashboard reads tool errors, under the same task type.
    status, body = get(server.otlp, "/api/v1/queries/tool_error_rates")
    (tool,) = json.loads(body)["rows"]
    assert (tool["task_type"], tool["tool_name"], tool["calls"], tool["errors"]) == (
        "unknown",
        "search",
        1,
        1,
    )
    assert metric_sum(server.metrics, "loopwatch_runs_total", stop_reason="unknown") == 1
    assert metric_sum(server.metrics, "loopwatch_tool_calls_total", status="error") == 1
    assert counts(server) == (3, 1)


# --- refusals ---------------------------------------------------------------------------------


def bad_bodies(rng: random.Random, good: bytes) -> Iterator[tuple[str, bytes, dict[str, str], int]]:
    """(kind, body, headers, expected status) for every kind of bad request, endlessly (the
    100 MB kinds are streamed by the caller)."""
    proto = {"Content-Type": "application/x-protobuf"}
    js = {"Content-Type": "application/json"}
    wrong_json = [
        {"resourceSpans": 5},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 7}]}]}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "01"}]}]}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]},
        {"resourceSpans": [{"scopeSpans": "x"}]},
        [1, 2, 3],
        "resourceSpans",
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": {"a": 1}}]}]}]},
    ]
    missing_ids = encode_spans(make_spans(1))
    for span in missing_ids.resource_spans[0].scope_spans[0].spans:
        span.trace_id = b""
    no_ids = missing_ids.SerializeToString()
    bomb = gzip.compress(b"\0" * (40 << 20), compresslevel=9)  # 40 MB of zeros in ~40 KB
    while True:
        # Streaming 20 MB before the refusal costs time: the chunked 100 MB body comes rarely.
        kind = rng.choices(range(12), weights=[1] * 11 + [0.15])[0]
        if kind == 10:
            yield "100 MB declared", b"", {"Content-Length": str(100 << 20)}, 413
        elif kind == 11:
            yield "100 MB chunked", b"", {"Transfer-Encoding": "chunked"}, 413
        elif kind == 0:
            cut = rng.randrange(1, len(good) - 1)
            # A protobuf cut inside a field fails to parse; one cut at a field boundary parses
            # as fewer (possibly partial) spans: both are answered, neither stores anything bad.
            yield "truncated", good[:cut], proto, -1
        elif kind == 1:
            yield "random", rng.randbytes(rng.randrange(1, 4096)), proto, -1
        elif kind == 2:
            yield "wrong json", json.dumps(rng.choice(wrong_json)).encode(), js, 400
        elif kind == 3:
            yield "not json", rng.randbytes(rng.randrange(1, 200)) + b"{", js, 400
        elif kind == 4:
            yield "missing ids", no_ids, proto, 400
        elif kind == 5:
            ctype = rng.choice(["text/plain", "application/xml", "", "application/protobuf-x"])
            yield "content type", good, {"Content-Type": ctype}, 415
        elif kind == 6:
            yield "bad gzip", rng.randbytes(64), {**proto, "Content-Encoding": "gzip"}, 400
        elif kind == 7:
            yield "encoding", good, {**proto, "Content-Encoding": "br"}, 415
        elif kind == 8:
            yield "gzip bomb", bomb, {**proto, "Content-Encoding": "gzip"}, 413
        else:
            truncated_gzip = gzip.compress(good)[: rng.randrange(10, 40)]
            yield "cut gzip", truncated_gzip, {**proto, "Content-Encoding": "gzip"}, 400


def test_a_thousand_bad_bodies_change_nothing(server: ServeProcess) -> None:
    good_spans = make_spans(3)
    assert post_traces(server.otlp, protobuf_body(good_spans))[0] == 200
    before = counts(server)
    before_rows = store_rows_live(server)
    rng = random.Random(9)
    probe = make_spans(1, prefix="probe")
    good = protobuf_body(probe)
    seen: dict[str, int] = {}
    statuses: dict[int, int] = {}
    for _, (kind, body, headers, expected) in zip(range(1000), bad_bodies(rng, good), strict=False):
        if kind.startswith("100 MB"):
            chunked = "Transfer-Encoding" in headers
            status, _, answer = _send_raw(server.otlp, 100 << 20, chunk=1 << 20, chunked=chunked)
        else:
            status, _, answer = request(server.otlp, "POST", "/v1/traces", body, headers)
        seen[kind] = seen.get(kind, 0) + 1
        statuses[status] = statuses.get(status, 0) + 1
        if expected == -1:
            assert status in (200, 400), (kind, status, answer)
        else:
            assert status == expected, (kind, status, answer)
        if status == 400:
            assert answer  # the reason is given
    assert len(seen) == 12 and sum(seen.values()) == 1000
    # Nothing stored but what a truncated body happened to hold whole (none of it the probe's
    # original run, which only its complete body has).
    _spans_after, runs_after = counts(server)
    assert runs_after - before[1] <= 1
    assert store_rows_live(server)[: len(before_rows)] == before_rows
    # The server keeps serving.
    assert post_traces(server.otlp, protobuf_body(make_spans(1, prefix="after")))[0] == 200
    assert counts(server)[1] == runs_after + 1


def store_rows_live(server: ServeProcess) -> list[Any]:
    status, body = get(server.otlp, "/api/v1/runs?top_n=100000")
    assert status == 200
    rows = json.loads(body)["rows"]
    return sorted((r["run_id"], r["stop_reason"], r["steps"]) for r in rows)


def test_oversized_bodies_get_413_and_the_server_goes_on(server: ServeProcess) -> None:
    before = counts(server)
    # Declared too large: refused before the body is read.
    status, _, _ = _send_raw(server.otlp, 100 << 20, chunk=1 << 20)
    assert status == 413
    # Undeclared (chunked) and too large: refused once the limit is passed.
    status, _, _ = _send_raw(server.otlp, 100 << 20, chunk=1 << 20, chunked=True)
    assert status == 413
    assert counts(server) == before
    assert post_traces(server.otlp, protobuf_body(make_spans(1)))[0] == 200


def _send_raw(
    port: int, size: int, *, chunk: int, chunked: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """Stream ``size`` bytes of zeros as a protobuf body; stop sending once an answer comes."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        head = "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "Content-Type: application/x-protobuf\r\n"
        head += "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n"
        sock.sendall((head + "\r\n").encode())
        sent = 0
        block = b"\0" * chunk
        sock.settimeout(0.0)
        answer = b""
        while sent < size:
            with contextlib.suppress(BlockingIOError, OSError):
                answer += sock.recv(65536)
            if answer:
                break
            payload = f"{chunk:x}\r\n".encode() + block + b"\r\n" if chunked else block
            try:
                sock.settimeout(10)
                sock.sendall(payload)
                sock.settimeout(0.0)
            except OSError:
                break
            sent += chunk
        sock.settimeout(30)
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
        status = int(answer.split(b" ", 2)[1])
        return status, {}, answer
    finally:
        sock.close()


def test_token_is_required_everywhere_but_health(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "t.duckdb", "--token", "s3cret")
    try:
        body = protobuf_body(make_spans(1))
        assert post_traces(server.otlp, body)[0] == 401
        assert post_traces(server.otlp, body, authorization="Bearer wrong")[0] == 401
        assert post_traces(server.otlp, body, authorization="s3cret")[0] == 401
        assert get(server.otlp, "/api/v1/runs")[0] == 401
        assert get(server.metrics, "/metrics")[0] == 401
        assert counts(server) == (0, 0)  # /health needs no token
        assert post_traces(server.otlp, body, authorization="Bearer s3cret")[0] == 200
        auth = {"Authorization": "Bearer s3cret"}
        assert get(server.otlp, "/api/v1/runs", auth)[0] == 200
        assert get(server.metrics, "/metrics", auth)[0] == 200
        assert counts(server) == (4, 1)
    finally:
        server.kill()


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on (Linux /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        with open(f"/proc/net/{table}") as f:
            next(f)
            for line in f:
                parts = line.split()
                local, state, inode = parts[1], parts[3], parts[9]
                if state != "0A" or inode not in inodes:
                    continue
                address, port = local.split(":")
                raw = bytes.fromhex(address)
                host = ".".join(str(b) for b in raw[::-1]) if width == 8 else raw.hex()
                found.append((host, int(port, 16)))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_by_default_nothing_listens_beyond_loopback(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "b.duckdb", ui=True)
    try:
        listening = _listening(server.proc.pid)
        ports = {port for _, port in listening}
        assert set(server.ports.values()) <= ports and len(server.ports) == 3
        assert {host for host, _ in listening} == {"127.0.0.1"}, listening
    finally:
        server.kill()


def test_overload_is_pushed_back_with_retry_after_and_nothing_is_lost(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "o.duckdb", "--max-pending-mb", "1")
    try:
        bodies = [protobuf_body(make_spans(400, prefix=f"o{i}")) for i in range(12)]
        assert all(len(b) > 300_000 for b in bodies)
        answers: list[tuple[int, dict[str, str]]] = []

        def send(body: bytes) -> None:
            # As the standard exporter does: on 429/503, wait Retry-After and send again.
            for _ in range(100):
                status, headers, _ = post_traces(server.otlp, body)
                answers.append((status, headers))
                if status not in (429, 503):
                    return
                time.sleep(float(headers["retry-after"]) / 10)

        threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [h for s, h in answers if s == 503]
        assert refused and all(h["retry-after"] == "1" for h in refused)
        assert sum(1 for s, _ in answers if s == 200) == 12
        assert counts(server) == (12 * 1600, 12 * 400)
    finally:
        server.kill()


# --- crashes and shutdown ---------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (decoders, multiprocessing's resource tracker, theirs)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    for child in map(int, f.read().split()):
                        found.append(child)
                        todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """The processes of ``pids`` still running after up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_mid_stream_loses_nothing_acknowledged(tmp_path: Path) -> None:
    # Twenty kill -9s mid-stream, decoding in a decoder process: every request answered 200 is
    # in the store once (a request committed but not answered before a kill is sent again by
    # its exporter, and recognised), and no decoder or resource tracker outlives its server.
    db = tmp_path / "k.duckdb"
    port = [0]
    acknowledged: list[str] = []
    stop = threading.Event()
    rng = random.Random(3)

    def stream(offset: int) -> None:
        for j in itertools.count():
            name = f"k{offset}x{j}"
            body = protobuf_body(make_spans(5, prefix=name))
            while not stop.is_set():  # as an exporter does: the same request until a 200
                try:
                    status, _, _ = post_traces(port[0], body)
                except OSError:
                    status = 0
                if status == 200:
                    acknowledged.append(name)
                    break
                time.sleep(0.05)
            if stop.is_set():
                return

    threads = [threading.Thread(target=stream, args=(k,)) for k in (0, 1)]
    left_behind: list[int] = []
    for kill in range(21):
        server = ServeProcess(db, "--decoders", "1")
        port[0] = server.otlp
        if kill == 0:
            for t in threads:
                t.start()
        before = len(acknowledged)
        deadline = time.monotonic() + 60
        while len(acknowledged) < before + 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(acknowledged) >= before + 3, "".join(server.stderr)
        if kill == 20:  # the last one stops cleanly
            stop.set()
            for t in threads:
                t.join()
            assert server.stop() == 0
            break
        children = descendants(server.proc.pid)
        assert children  # the decoder, at least
        time.sleep(rng.random() * 0.2)  # mid-request, mostly
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(30)
        left_behind += wait_gone(children)
    assert left_behind == []
    per_run = dict(store_rows(db, "SELECT run_id, count(*) FROM spans GROUP BY run_id"))
    assert set(per_run.values()) == {4}  # no span stored twice, none half-stored
    runs = store_rows(db, "SELECT count(*), count(DISTINCT run_id) FROM runs")[0]
    assert runs[0] == runs[1]
    for name in acknowledged:
        assert all(per_run.get(f"{name}-{n}") == 4 for n in range(5)), name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_leaves_no_decoder_or_resource_tracker_behind(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "d.duckdb", "--decoders", "2")
    try:
        assert post_traces(server.otlp, protobuf_body(make_spans(3)))[0] == 200
        children = descendants(server.proc.pid)
        commands = []
        for pid in children:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                commands.append(f.read())
        assert sum(b"spawn_main" in c for c in commands) == 2
        assert any(b"resource_tracker" in c for c in commands)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(30)
        assert wait_gone(children) == []
    finally:
        server.kill()


def test_sigterm_commits_what_was_acknowledged_and_closes_the_file(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    server = ServeProcess(db)
    for i in range(5):
        assert post_traces(server.otlp, protobuf_body(make_spans(10, prefix=f"s{i}")))[0] == 200
    assert server.stop() == 0
    assert "store closed" in "".join(server.lines)
    assert store_rows(db, "SELECT count(*) FROM runs") == [(50,)]


def test_a_store_held_by_another_process_is_refused_with_its_message(tmp_path: Path) -> None:
    db = tmp_path / "held.duckdb"
    first = ServeProcess(db)
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "loopwatch.dashboard.cli",
                "serve",
                "--db",
                str(db),
                "--no-ui",
                "--otlp-port",
                "0",
                "--metrics-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert "is locked by" in second.stderr and str(first.proc.pid) in second.stderr
    finally:
        first.kill()


# --- the JSON API -----------------------------------------------------------------------------


def test_the_json_api_checks_parameters_as_the_gateway_does(server: ServeProcess) -> None:
    assert post_traces(server.otlp, protobuf_body(make_spans(30)))[0] == 200

    def api(path: str) -> tuple[int, Any]:
        status, body = get(server.otlp, path)
        return status, json.loads(body)

    status, index = api("/api/v1/queries")
    assert status == 200
    names = {q["name"] for q in index["queries"]}
    assert {"recent_runs", "limit_hit_rate", "stop_reason_mix"} <= names
    status, runs = api("/api/v1/runs?max_rows=7&since=1h&task_types=triage,other")
    assert status == 200 and len(runs["rows"]) == 7 and runs["truncated"] is True
    assert runs["rows"][0]["started_at"].endswith("Z")
    status, runs = api("/api/v1/runs?stop_reasons=max_steps&stop_reasons=refusal&top_n=1000")
    assert status == 200 and len(runs["rows"]) == 10
    status, rates = api("/api/v1/hit-rates?bucket_s=60")
    assert status == 200 and any(r["limit_name"] == "steps" for r in rates["rows"])
    status, recs = api("/api/v1/recommendations?since=7d")
    assert status == 200 and isinstance(recs["items"], list)
    status, alerts = api("/api/v1/alerts")
    assert status == 200 and [a["task_type"] for a in alerts["items"]] == ["triage"]
    # Refusals, each with the reason.
    for path, code, words in [
        ("/api/v1/queries/no_such_query", 404, "unknown query"),
        ("/api/v1/runs?colour=red", 400, "unknown parameter 'colour'"),
        ("/api/v1/runs?top_n=0", 400, "at least 1"),
        ("/api/v1/runs?top_n=lots", 400, "must be a number"),
        ("/api/v1/runs?since=yesterday", 400, "ISO 8601"),
        ("/api/v1/runs?max_rows=100000000", 400, "max_rows"),
        ("/api/v1/hit-rates?bucket_s=0", 400, "at least 1"),
        ("/api/v1/queries/what_if", 400, "required"),
    ]:
        status, answer = api(path)
        assert status == code and words in answer["error"], (path, status, answer)
    # Read-only: nothing the API was asked changed the store.
    assert counts(server) == (120, 30)


def test_sigint_stops_as_cleanly_as_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "i.duckdb"
    server = ServeProcess(db, ui=True)
    assert post_traces(server.otlp, protobuf_body(make_spans(3)))[0] == 200
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(60) == 0
    assert store_rows(db, "SELECT count(*) FROM runs") == [(3,)]


def test_retry_keys_are_forgotten_after_their_window(tmp_path: Path) -> None:
    import asyncio

    from loopwatch.dashboard.server.ingest import Ingest, IngestOptions
    from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor

    body = protobuf_body(make_spans(2))
    with Store(tmp_path / "w.duckdb") as store:
        options = IngestOptions(dedup_window_s=2.0, prune_interval_s=0.05)
        ingest = Ingest(store, MetricsSpanProcessor(), options)
        ingest.start()
        try:

            async def send() -> tuple[int, bool]:
                result = await ingest.ingest(body, "application/x-protobuf")
                return result.stored, result.duplicate

            assert asyncio.run(send()) == (8, False)
            assert asyncio.run(send()) == (0, True)  # a retry inside the window
            assert len(store.deliveries_since(0)) == 1
            deadline = time.monotonic() + 60
            while store.deliveries_since(0) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert store.deliveries_since(0) == []
            assert asyncio.run(send()) == (8, False)  # past the window: a new request
        finally:
            ingest.close()
        assert store.connection.execute("SELECT count(*) FROM spans").fetchone() == (16,)


def test_a_port_in_use_is_refused_with_its_address(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "loopwatch.dashboard.cli", "serve", "--db",
             str(tmp_path / "p.duckdb"), "--no-ui", "--otlp-port", str(port),
             "--metrics-port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    # The store was opened and closed again: another process may open it now.
    assert store_rows(tmp_path / "p.duckdb", "SELECT count(*) FROM runs") == [(0,)]


def test_serve_counts_its_own_answers_and_its_metrics_pass_promtool(server: ServeProcess) -> None:
    promtool = require_program("promtool")
    body = protobuf_body(make_spans(2))
    assert post_traces(server.otlp, body)[0] == 200
    assert post_traces(server.otlp, body)[0] == 200  # a retry
    assert post_traces(server.otlp, b"\x0a\x05junk")[0] == 400
    assert post_traces(server.otlp, body, "text/plain")[0] == 415
    partial = encode_spans(make_spans(1, prefix="partial"))
    partial.resource_spans[0].scope_spans[0].spans[0].trace_id = b"short"
    assert post_traces(server.otlp, partial.SerializeToString())[0] == 200
    assert metric_sum(server.metrics, "loopwatch_ingest_requests_total", code="200") == 3
    assert metric_sum(server.metrics, "loopwatch_ingest_requests_total", code="400") == 1
    assert metric_sum(server.metrics, "loopwatch_ingest_requests_total", code="415") == 1
    assert metric_sum(server.metrics, "loopwatch_ingest_spans_total", result="stored") == 11
    assert metric_sum(server.metrics, "loopwatch_ingest_spans_total", result="rejected") == 1
    assert metric_sum(server.metrics, "loopwatch_ingest_retries_total") == 1
    assert metric_sum(server.metrics, "loopwatch_ingest_pending_bytes") == 0
    _, exposition = get(server.metrics, "/metrics")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert b"# UNIT" not in exposition  # the classic text format has no units
    # Asked for OpenMetrics (as Prometheus asks), the same metrics with units and exemplars.
    accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
    _, openmetrics = get(server.metrics, "/metrics", accept)
    text = openmetrics.decode()
    assert text.endswith("# EOF\n")
    assert "# UNIT loopwatch_run_duration_seconds seconds" in text
    assert ' # {trace_id="' in text


# --- decoder processes ------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """The decoder processes of ``pid`` (not multiprocessing's resource tracker)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                with open(f"/proc/{child}/cmdline", "rb") as cmd:
                    if b"spawn_main" in cmd.read():
                        found.append(int(child))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_decoder_processes_store_and_refuse_exactly_as_the_thread_does(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "dec.duckdb", "--decoders", "1")
    try:
        assert len(_children(server.proc.pid)) == 1
        body = protobuf_body(make_spans(5))
        assert post_traces(server.otlp, body)[0] == 200
        assert post_traces(server.otlp, body)[0] == 200  # a retry: once
        status, _, answer = post_traces(server.otlp, b"\x0a\x05junk")
        assert status == 400 and b"not an OTLP protobuf" in answer
        spans = make_spans(2, prefix="j")
        status, _, _ = post_traces(server.otlp, json_body(spans), "application/json")
        assert status == 200
        partial = encode_spans(make_spans(1, prefix="p"))
        partial.resource_spans[0].scope_spans[0].spans[0].span_id = b""
        status, _, answer = post_traces(server.otlp, partial.SerializeToString())
        response = ExportTraceServiceResponse()
        response.ParseFromString(answer)
        assert status == 200 and response.partial_success.rejected_spans == 1
        assert counts(server) == (31, 8)
        assert metric_sum(server.metrics, "loopwatch_runs_total") == 8
        assert metric_sum(server.metrics, "loopwatch_tool_calls_total") == 8
        # A decoder killed under the server: a request in its hands gets 503 (the exporter
        # retries it), and a new decoder takes over.
        (child,) = _children(server.proc.pid)
        os.kill(child, signal.SIGKILL)
        statuses = [post_traces(server.otlp, protobuf_body(make_spans(1, prefix=f"k{i}")))[0]
                    for i in range(3)]  # fmt: skip
        assert statuses[-1] == 200 and set(statuses) <= {200, 503}
        stored = statuses.count(200)
        assert counts(server)[1] == 8 + stored
        (replacement,) = _children(server.proc.pid)
        assert server.stop() == 0
        assert not os.path.exists(f"/proc/{replacement}/cmdline")  # ended with the server
    finally:
        server.kill()
