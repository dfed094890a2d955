"""The exporter's writer process: real child processes, real files, real SIGKILLs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from loopwatch.instrumentation import instrument
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.drops import dropped
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.telemetry.processor import CountingBatchSpanProcessor
from loopwatch.instrumentation.testing import FakeModel, tool_call
from loopwatch.queries.store.database import Store, StoreError, StoreLockedError, connect_read_only
from loopwatch.queries.store.exporter import (
    WRITER_ENV,
    DuckDBSpanExporter,
    resolve_writer,
    store_processor,
)
from loopwatch.queries.store.writer import WriterProcess
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tests.test_exporter import count, make_spans

pytestmark = pytest.mark.usefixtures("fresh_drops")


def span_ids(spans: Sequence[ReadableSpan]) -> set[str]:
    return {f"{s.context.span_id:016x}" for s in spans if s.context is not None}


def stored_ids(path: Path) -> set[str]:
    con = connect_read_only(path)
    try:
        return {r[0] for r in con.execute("SELECT span_id FROM spans").fetchall()}
    finally:
        con.close()


def emit(provider: TracerProvider, runs: int) -> None:
    tracer = provider.get_tracer("t")
    for n in range(runs):
        common = {sc.RUN_ID: f"run-{n}", sc.TASK_TYPE: "triage"}
        with tracer.start_as_current_span(
            "invoke_agent a",
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.STOP_REASON: "completed",
                sc.OUTCOME: "success",
                **common,
            },
        ):
            for step in range(1, 4):
                with tracer.start_as_current_span(f"step {step}") as s:
                    s.set_attributes({sc.STEP_INDEX: step, **common})


class Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


# --- configuration ------------------------------------------------------------------------


def test_unknown_writer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^writer must be one of inline, process, got 'thread'$"):
        DuckDBSpanExporter(tmp_path / "x.duckdb", writer="thread")
    monkeypatch.setenv(WRITER_ENV, "subprocess")
    with pytest.raises(
        ValueError,
        match=r"^LOOPWATCH_STORE_WRITER must be one of inline, process, got 'subprocess'$",
    ):
        resolve_writer()
    with pytest.raises(ValueError, match="LOOPWATCH_STORE_WRITER"):
        instrument(store=tmp_path / "y.duckdb", tracer_provider=TracerProvider())
    assert not (tmp_path / "y.duckdb").exists()
    monkeypatch.setenv(WRITER_ENV, "process")
    assert resolve_writer() == "process"
    assert resolve_writer("inline") == "inline"  # the argument wins over the environment


# --- storing --------------------------------------------------------------------------------


def test_process_writer_stores_every_span_and_run_and_owns_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    exporter = DuckDBSpanExporter(path, writer="process")
    assert exporter.open_error is None and exporter.pipelined
    holder = exporter._process
    assert holder is not None and holder.pid != os.getpid()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    collect = Collect()
    processor = store_processor(exporter, max_export_batch_size=64, schedule_delay_millis=5)
    provider.add_span_processor(collect)
    provider.add_span_processor(processor)
    emit(provider, 300)
    assert provider.force_flush(60_000)
    # The writer process holds the file: another open names it, not this process.
    with pytest.raises(StoreLockedError) as locked:
        connect_read_only(path)
    assert str(holder.pid) in str(locked.value)
    assert locked.value.pid == holder.pid
    provider.shutdown()
    assert not holder.alive  # shutdown waited for it to commit, close and exit
    assert stored_ids(path) == span_ids(collect.spans)
    assert len(collect.spans) == 1200
    assert count(path, "runs") == 300
    con = connect_read_only(path)
    try:
        rows = con.execute(
            "SELECT DISTINCT service, task_type, stop_reason, outcome, source FROM runs"
        ).fetchall()
    finally:
        con.close()
    assert rows == [("svc", "triage", "completed", "success", "otel")]
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.dropped_queue_full) == (1200, 0, 0)
    assert dropped() == {}


def test_process_writer_stores_what_inline_stores(tmp_path: Path) -> None:
    spans = make_spans(50, run_id="same")
    tables = {}
    for writer in ("inline", "process"):
        path = tmp_path / f"{writer}.duckdb"
        exporter = DuckDBSpanExporter(path, writer=writer)
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
        con = connect_read_only(path)
        try:
            tables[writer] = [
                con.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("spans", "runs")
            ]
        finally:
            con.close()
    assert tables["process"] == tables["inline"]
    assert len(tables["process"][0]) == 50


def test_instrument_with_the_process_writer(tmp_path: Path) -> None:
    path = tmp_path / "i.duckdb"
    provider = TracerProvider()
    handle = instrument(store=path, store_writer="process", tracer_provider=provider)
    try:
        registry = ToolRegistry()

        @registry.tool
        def lookup(key: str) -> str:
            return f"value of {key}"

        model = FakeModel([tool_call("lookup", key="a"), "done"])
        result = run(model, registry, "find a", task_type="lookup")
    finally:
        handle.shutdown()
    assert result.stop_reason == "completed"
    con = connect_read_only(path)
    try:
        row = con.execute("SELECT task_type, stop_reason, steps FROM runs").fetchall()
        tools = con.execute("SELECT tool_name FROM spans WHERE tool_name IS NOT NULL").fetchall()
    finally:
        con.close()
    assert row == [("lookup", "completed", 2.0)]
    assert tools == [("lookup",)]


def test_second_exporter_gets_the_lock_error_naming_the_writer_process(tmp_path: Path) -> None:
    path = tmp_path / "l.duckdb"
    first = DuckDBSpanExporter(path, writer="process")
    assert first._process is not None
    try:
        second = DuckDBSpanExporter(path, writer="process")
        assert second.open_error is not None
        text = str(second.open_error)
        assert str(first._process.pid) in text and "loopwatch serve" in text
        assert second.export(make_spans(3)) is SpanExportResult.FAILURE
        assert dropped() == {"export_failed": 3}
        second.shutdown()
    finally:
        first.shutdown()


def test_writer_process_answers_batches_in_order_and_reports_a_bad_batch(tmp_path: Path) -> None:
    import pyarrow as pa
    from loopwatch.queries.store.columns import SpanBatch

    writer = WriterProcess(tmp_path / "w.duckdb")
    try:
        batch = SpanBatch.from_sdk_spans(make_spans(5))
        first = writer.submit(batch)
        # A table the store cannot take: the writer says so and goes on.
        bad = pa.table({"span_id": ["x"]})
        second = writer.submit(SpanBatch(spans=bad, runs=None, count=1))
        third = writer.submit(SpanBatch(spans=batch.spans, runs=None, count=batch.count))
        assert writer.wait(third) == 5  # answers read ahead are kept for their batches
        assert writer.wait(first) == 5
        with pytest.raises(StoreError, match="trace_id"):
            writer.wait(second)
        assert writer.alive
    finally:
        assert writer.close() == 0
    assert count(tmp_path / "w.duckdb") == 10


# --- SIGKILL --------------------------------------------------------------------------------


@pytest.mark.slow
def test_writer_process_killed_mid_stream_loses_no_acknowledged_batch_and_recovers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "k.duckdb"
    exporter = DuckDBSpanExporter(path, writer="process")
    first = exporter._process
    assert first is not None
    acknowledged: set[str] = set()
    failed = 0
    stop = threading.Event()
    batches_done = threading.Event()
    n = 0

    def agent() -> None:
        nonlocal failed, n
        while not stop.is_set():
            n += 1
            spans = make_spans(40, run_id=f"run-{n}")
            if exporter.export(spans) is SpanExportResult.SUCCESS:
                acknowledged.update(span_ids(spans))
            else:
                failed += len(spans)
            if n == 30:
                batches_done.set()

    thread = threading.Thread(target=agent)
    thread.start()
    try:
        assert batches_done.wait(60)
        os.kill(first.pid, signal.SIGKILL)  # mid-stream: the agent keeps exporting
        deadline = time.monotonic() + 60
        # The next exports fail (counted), then a new writer process takes over the file.
        while time.monotonic() < deadline:
            current = exporter._process
            if current is not None and current.pid != first.pid and len(acknowledged) > 2000:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    second = exporter._process
    assert second is not None and second.pid != first.pid and second.alive
    exporter.shutdown()
    stored = stored_ids(path)
    assert acknowledged <= stored, f"{len(acknowledged - stored)} acknowledged spans lost"
    # Exports in flight at the kill fail and are counted; a kill that lands between two exports
    # is seen before the next one, which then starts the new writer without failing.
    assert dropped() == ({"export_failed": failed} if failed else {})
    # What the killed writer had committed but not acknowledged may be stored too; nothing else.
    assert len(stored) <= len(acknowledged) + failed


_AGENT = """
import sys
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from loopwatch.queries.store.exporter import DuckDBSpanExporter
from tests.test_exporter import make_spans

exporter = DuckDBSpanExporter(sys.argv[1], writer="process")
print(exporter._process.pid, flush=True)
n = 0
while True:
    n += 1
    spans = make_spans(40, run_id=f"run-{n}")
    if exporter.export(spans) is SpanExportResult.SUCCESS:
        print(" ".join(f"{s.context.span_id:016x}" for s in spans), flush=True)
"""


@pytest.mark.slow
def test_agent_killed_mid_stream_writer_commits_closes_and_exits(tmp_path: Path) -> None:
    path = tmp_path / "a.duckdb"
    root = Path(__file__).resolve().parent.parent
    agent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_AGENT), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
    )
    acknowledged: list[str] = []
    try:
        assert agent.stdout is not None
        writer_pid = int(agent.stdout.readline())
        while len(acknowledged) < 40 * 50:
            line = agent.stdout.readline()
            assert line, agent.stderr.read() if agent.stderr else ""
            acknowledged.extend(line.split())
    finally:
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(30)
    assert agent.stdout is not None
    for line in agent.stdout.read().split("\n")[:-1]:
        acknowledged.extend(line.split())
    # The writer sees its input end, commits what it had, closes the file and exits.
    deadline = time.monotonic() + 60
    while _alive(writer_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(writer_pid)
    with Store(path) as store:  # opens cleanly, for writing too
        stored = {r[0] for r in store.connection.execute("SELECT span_id FROM spans").fetchall()}
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged spans lost"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its dead parent's reaper) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# --- the processor drives a pipelined exporter ----------------------------------------------


class Pipelined(SpanExporter):
    """Records the order of begins and answers; batch ``fail_at`` fails, ``raise_at`` raises."""

    pipelined = True

    def __init__(self, fail_at: int = -1, raise_at: int = -1) -> None:
        self.events: list[str] = []
        self.held_at_begin: list[int] = []
        self.fail_at = fail_at
        self.raise_at = raise_at
        self.processor: CountingBatchSpanProcessor | None = None
        self.lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise AssertionError("a pipelined exporter is driven through begin_export")

    def begin_export(self, spans: Sequence[ReadableSpan]) -> Callable[[], SpanExportResult]:
        with self.lock:
            number = sum(e.startswith("begin") for e in self.events)
            self.events.append(f"begin {number}")
        if self.processor is not None:
            self.held_at_begin.append(self.processor.held)
        if number == self.raise_at:
            raise RuntimeError("broken pipe")

        def answer() -> SpanExportResult:
            with self.lock:
                self.events.append(f"answer {number}")
            ok = number != self.fail_at
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

        return answer

    def shutdown(self) -> None:
        pass


def _drive(exporter: Pipelined, spans: int, batch: int = 4) -> CountingBatchSpanProcessor:
    processor = CountingBatchSpanProcessor(
        exporter, max_queue_size=64, max_export_batch_size=batch, schedule_delay_millis=60_000
    )
    exporter.processor = processor
    tp = TracerProvider()
    tp.add_span_processor(processor)
    tracer = tp.get_tracer("t")
    for i in range(spans):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    assert processor.force_flush(10_000)
    tp.shutdown()
    return processor


def test_processor_begins_the_next_batch_before_answering_the_last_in_order() -> None:
    exporter = Pipelined()
    processor = _drive(exporter, 40)
    begins = [e for e in exporter.events if e.startswith("begin")]
    answers = [e for e in exporter.events if e.startswith("answer")]
    assert len(begins) == len(answers) == 10
    assert answers == [f"answer {i}" for i in range(10)]  # in the order begun
    # At most one batch waits for its answer: begin N+1 comes before answer N, never later
    # than after it, and answer N comes before begin N+2.
    position = {e: i for i, e in enumerate(exporter.events)}
    overlapped = sum(position[f"begin {i + 1}"] < position[f"answer {i}"] for i in range(9))
    assert all(position[f"answer {i}"] < position[f"begin {i + 2}"] for i in range(8))
    assert overlapped >= 1  # the 40 spans were queued before the worker got far
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.held) == (40, 0, 0)
    assert max(exporter.held_at_begin) <= 64
    assert dropped() == {}


def test_processor_counts_a_failed_answer_and_a_raising_begin() -> None:
    processor = _drive(Pipelined(fail_at=2, raise_at=5), 40)
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.held) == (32, 8, 0)
    # This exporter does not count its own losses, so the processor counts both batches.
    assert dropped() == {"export_failed": 8}


def test_a_writer_that_cannot_start_is_a_clear_open_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An interpreter that cannot run the writer (as in a frozen app): it exits at once.
    monkeypatch.setattr(sys, "executable", "/bin/false")
    exporter = DuckDBSpanExporter(tmp_path / "s.duckdb", writer="process")
    assert exporter.open_error is not None
    text = str(exporter.open_error)
    assert "exited with status 1" in text and "/bin/false can import loopwatch" in text
    assert exporter.export(make_spans(2)) is SpanExportResult.FAILURE
    assert dropped() == {"export_failed": 2}
    exporter.shutdown()


def test_a_writer_that_hangs_at_start_is_killed_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hanging = tmp_path / "python"
    hanging.write_text('#!/bin/sh\necho $$ > "$0.pid"\nexec sleep 60\n')
    hanging.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(hanging))
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"did not answer within 0\.5 s\. It failed at start"):
        WriterProcess(tmp_path / "h.duckdb", start_timeout_s=0.5)
    assert time.monotonic() - started < 30
    pid = int((tmp_path / "python.pid").read_text())
    assert not _alive(pid)  # killed, not left behind
