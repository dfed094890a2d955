"""DuckDBSpanExporter and CountingBatchSpanProcessor: real SDK, real files, a real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.drops import dropped
from loopwatch.queries.store.database import Store, StoreError, connect_read_only
from loopwatch.queries.store.exporter import (
    STORE_MAX_EXPORT_BATCH_SIZE,
    STORE_MAX_QUEUE_SIZE,
    CountingBatchSpanProcessor,
    DuckDBSpanExporter,
    store_processor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

pytestmark = pytest.mark.usefixtures("fresh_drops")


def make_spans(n: int, run_id: str = "run-x") -> list[ReadableSpan]:
    """``n`` finished spans, the last one a run span."""
    finished: list[ReadableSpan] = []
    tp = TracerProvider(resource=Resource.create({"service.name": "exp"}))
    tracer = tp.get_tracer("t")
    common = {sc.RUN_ID: run_id, sc.TASK_TYPE: "triage"}
    for i in range(n - 1):
        span = tracer.start_span(f"step {i + 1}", attributes={sc.STEP_INDEX: i + 1, **common})
        span.end()
        finished.append(span)  # type: ignore[arg-type]
    run = tracer.start_span(
        "invoke_agent a",
        attributes={
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.STOP_REASON: "completed",
            sc.OUTCOME: "success",
            **common,
        },
    )
    run.end()
    finished.append(run)  # type: ignore[arg-type]
    return finished


def count(path: Path, table: str = "spans") -> int:
    con = connect_read_only(path)
    try:
        row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


class BlockingExporter(SpanExporter):
    """Holds every export until released: a store slower than the agent."""

    def __init__(self, result: SpanExportResult = SpanExportResult.SUCCESS) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.exported: list[ReadableSpan] = []
        self.result = result

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(30)
        self.exported.extend(spans)
        return self.result

    def shutdown(self) -> None:
        self.release.set()


# --- the exporter ---------------------------------------------------------------------------------


def test_export_commits_before_answering_success(tmp_path: Path) -> None:
    path = tmp_path / "e.duckdb"
    exporter = DuckDBSpanExporter(path)
    assert exporter.open_error is None
    spans = make_spans(5)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    # Committed: a separate connection to the same database sees the whole batch now.
    store = exporter._store
    assert store is not None
    cur = store.cursor()
    assert cur.execute("SELECT count(*) FROM spans").fetchone() == (5,)
    assert cur.execute("SELECT run_id, outcome FROM runs").fetchall() == [("run-x", "success")]
    cur.close()
    assert exporter.force_flush() is True
    exporter.shutdown()
    assert count(path) == 5  # closed: another process may open it now
    assert dropped() == {}


def test_unwritable_path_fails_without_raising_and_counts(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    path = blocker / "store.duckdb"
    exporter = DuckDBSpanExporter(path)  # never raises
    assert isinstance(exporter.open_error, StoreError)
    assert str(exporter.open_error).startswith(f"cannot open {path} for writing (")
    assert exporter.export(make_spans(3)) is SpanExportResult.FAILURE
    assert exporter.export(make_spans(4)) is SpanExportResult.FAILURE
    assert dropped() == {"export_failed": 7}
    exporter.shutdown()


def test_unwritable_path_through_a_provider_leaves_the_caller_untouched(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    exporter = DuckDBSpanExporter(blocker / "s.duckdb")
    processor = CountingBatchSpanProcessor(exporter, schedule_delay_millis=60_000)
    tp = TracerProvider()
    tp.add_span_processor(processor)
    tracer = tp.get_tracer("t")
    results = []
    for i in range(10):
        with tracer.start_as_current_span(f"step {i}") as span:
            span.set_attribute(sc.STEP_INDEX, i)
            results.append(i * 2)
    assert results == [i * 2 for i in range(10)]
    assert processor.force_flush() is True
    assert dropped() == {"export_failed": 10}  # counted once, by the exporter
    assert processor.stats().failed == 10
    tp.shutdown()


def test_export_after_shutdown_fails_and_counts(tmp_path: Path) -> None:
    exporter = DuckDBSpanExporter(tmp_path / "s.duckdb")
    exporter.shutdown()
    exporter.shutdown()  # idempotent
    assert exporter.export(make_spans(2)) is SpanExportResult.FAILURE
    assert dropped() == {"export_failed": 2}


def test_exporter_retries_opening_after_the_lock_is_released(tmp_path: Path) -> None:
    path = tmp_path / "later.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, duckdb\n"
            f"con = duckdb.connect({str(path)!r})\n"
            "print('held', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        exporter = DuckDBSpanExporter(path)
        assert exporter.open_error is not None
        assert f"PID {holder.pid}" in str(exporter.open_error)
        assert exporter.export(make_spans(2)) is SpanExportResult.FAILURE
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(30)
    assert exporter.export(make_spans(3)) is SpanExportResult.SUCCESS
    assert exporter.open_error is None
    exporter.shutdown()
    assert count(path) == 3
    assert dropped() == {"export_failed": 2}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_does_not_write_the_parents_file(tmp_path: Path) -> None:
    path = tmp_path / "fork.duckdb"
    exporter = DuckDBSpanExporter(path)
    assert exporter.export(make_spans(2)) is SpanExportResult.SUCCESS
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what export answered and what was counted
        os.close(read_end)
        result = exporter.export(make_spans(3))
        os.write(write_end, f"{result.name} {dropped()}".encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    assert answer == "FAILURE {'export_failed': 3}"
    assert exporter.export(make_spans(4, "run-y")) is SpanExportResult.SUCCESS  # parent unaffected
    exporter.shutdown()
    assert count(path) == 6


# --- the processor -----------------------------------------------------------------------------


def test_processor_bounds_memory_and_counts_overflow() -> None:
    slow = BlockingExporter()
    processor = CountingBatchSpanProcessor(
        slow, max_queue_size=8, max_export_batch_size=4, schedule_delay_millis=10
    )
    tp = TracerProvider()
    tp.add_span_processor(processor)
    tracer = tp.get_tracer("t")
    with tracer.start_as_current_span("first"):
        pass
    assert slow.entered.wait(10)  # one span in flight, held by the slow store
    for i in range(50):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    stats = processor.stats()
    assert stats.held == 8 == stats.peak_held  # in flight + queued never exceed the queue size
    assert stats.dropped_queue_full == 51 - 8
    assert dropped() == {"queue_full": 43}
    slow.release.set()
    assert processor.force_flush(10_000) is True
    assert len(slow.exported) == 8
    assert processor.stats().exported == 8 and processor.held == 0
    tp.shutdown()


def test_processor_counts_failures_of_exporters_that_do_not() -> None:
    failing = BlockingExporter(SpanExportResult.FAILURE)
    failing.release.set()
    processor = CountingBatchSpanProcessor(failing, schedule_delay_millis=60_000)
    tp = TracerProvider()
    tp.add_span_processor(processor)
    for i in range(3):
        with tp.get_tracer("t").start_as_current_span(f"s{i}"):
            pass
    assert processor.force_flush() is True
    assert dropped() == {"export_failed": 3}
    tp.shutdown()


class RaisingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise RuntimeError("disk on fire")

    def shutdown(self) -> None:
        pass


def test_processor_survives_a_raising_exporter() -> None:
    processor = CountingBatchSpanProcessor(RaisingExporter(), schedule_delay_millis=60_000)
    tp = TracerProvider()
    tp.add_span_processor(processor)
    with tp.get_tracer("t").start_as_current_span("s"):
        pass
    assert processor.force_flush() is True
    with tp.get_tracer("t").start_as_current_span("s2"):
        pass
    assert processor.force_flush() is True  # the worker is still alive
    assert dropped() == {"export_failed": 2}
    tp.shutdown()


def test_full_batch_goes_at_once_partial_on_flush_and_shutdown_drains(tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    processor = CountingBatchSpanProcessor(
        DuckDBSpanExporter(path),
        max_queue_size=64,
        max_export_batch_size=4,
        schedule_delay_millis=60_000,
    )
    tp = TracerProvider()
    tp.add_span_processor(processor)
    tracer = tp.get_tracer("t")
    for i in range(4):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    deadline = time.monotonic() + 20
    while processor.stats().exported < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processor.stats().exported == 4  # a full batch did not wait for the delay
    with tracer.start_as_current_span("partial"):
        pass
    assert processor.force_flush() is True
    assert processor.stats().exported == 5
    for i in range(3):
        with tracer.start_as_current_span(f"late{i}"):
            pass
    tp.shutdown()  # exports the rest, then closes the store
    assert count(path) == 8
    with tracer.start_as_current_span("after"):
        pass
    assert dropped() == {"shutdown": 1}


def test_processor_settings_from_arguments_env_and_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = BlockingExporter()
    exporter.release.set()
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    p = CountingBatchSpanProcessor(exporter, max_queue_size=50)
    assert (p.max_queue_size, p.max_export_batch_size, p.schedule_delay_millis) == (50, 10, 250)
    p.shutdown()
    for name in ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "soon")  # ignored with a warning
    p = CountingBatchSpanProcessor(exporter)
    assert (p.max_queue_size, p.max_export_batch_size, p.schedule_delay_millis) == (2048, 512, 5000)
    p.shutdown()
    with pytest.raises(ValueError, match=r"max_export_batch_size \(20\) must not exceed"):
        CountingBatchSpanProcessor(exporter, max_queue_size=10, max_export_batch_size=20)
    with pytest.raises(ValueError, match="max_queue_size must be positive, got 0"):
        CountingBatchSpanProcessor(exporter, max_queue_size=0)


def test_store_processor_defaults_fit_a_batch_job_and_settings_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = BlockingExporter()
    exporter.release.set()
    for name in ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"):
        monkeypatch.delenv(name, raising=False)
    p = store_processor(exporter)
    assert (p.max_queue_size, p.max_export_batch_size) == (8192, 2048)
    assert (STORE_MAX_QUEUE_SIZE, STORE_MAX_EXPORT_BATCH_SIZE) == (8192, 2048)
    p.shutdown()
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1000")  # the batch follows a smaller queue
    p = store_processor(exporter)
    assert (p.max_queue_size, p.max_export_batch_size) == (1000, 1000)
    p.shutdown()
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")
    p = store_processor(exporter, max_queue_size=300)
    assert (p.max_queue_size, p.max_export_batch_size) == (300, 100)
    p.shutdown()


def test_opening_the_exporter_warms_the_write_path_and_stores_nothing(tmp_path: Path) -> None:
    path = tmp_path / "warm.duckdb"
    exporter = DuckDBSpanExporter(path)
    assert exporter.open_error is None
    assert exporter.export(make_spans(3)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert count(path) == 3  # the trial rows were rolled back
    assert count(path, "runs") == 1
    con = connect_read_only(path)
    try:
        assert con.execute("SELECT count(*) FROM runs WHERE run_id = 'warm-up'").fetchone() == (0,)
    finally:
        con.close()


_BATCH_JOB = """
import sys
from loopwatch.instrumentation import LoopLimits, ToolRegistry, instrument, run
from loopwatch.instrumentation.runtime.drops import dropped
from loopwatch.instrumentation.testing import CounterModel

handle = instrument(store=sys.argv[1])
tools = ToolRegistry()
tools.register(lambda text: text, name="echo")
for _ in range(int(sys.argv[2])):
    run(CounterModel("echo"), tools, "go", limits=LoopLimits(max_steps=5),
        raise_on_stop=False, task_type="batch")
handle.shutdown()
print(dict(dropped()))
"""


def test_a_fast_batch_job_in_file_mode_loses_nothing_at_default_settings(tmp_path: Path) -> None:
    # ~16 spans per run ended in a tight loop: ~3x the default queue. Before the exporter was
    # warmed at start-up and the agent handed over the GIL, most of these were refused.
    path = tmp_path / "batch.duckdb"
    runs = 1500
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_BSP_")}
    env.pop("LOOPWATCH_DB", None)
    out = subprocess.run(
        [sys.executable, "-c", _BATCH_JOB, str(path), str(runs)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "{}", out.stdout + out.stderr
    assert count(path, "runs") == runs
    assert count(path) > 2 * STORE_MAX_QUEUE_SIZE


# --- a writer killed with SIGKILL --------------------------------------------------------

_WRITER = """
import sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from loopwatch.instrumentation import semconv as sc
from loopwatch.queries.store.exporter import CountingBatchSpanProcessor, DuckDBSpanExporter

class Acknowledging(DuckDBSpanExporter):
    def export(self, spans):
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS:
            ids = [f"{s.context.span_id:016x}" for s in spans]
            sys.stdout.write(" ".join(ids) + "\\n")
            sys.stdout.flush()
        return result

exporter = Acknowledging(sys.argv[1])
# Checkpoint often, so that the kill also lands during checkpoints, not only WAL appends.
exporter._store.connection.execute("SET checkpoint_threshold = '256KB'")
tp = TracerProvider()
tp.add_span_processor(
    CountingBatchSpanProcessor(
        exporter, max_queue_size=4096, max_export_batch_size=64, schedule_delay_millis=5
    )
)
tracer = tp.get_tracer("killed")
n = 0
while True:
    n += 1
    run_id = f"run-{n}"
    with tracer.start_as_current_span(
        "invoke_agent k", attributes={sc.RUN_ID: run_id, sc.TASK_TYPE: "t",
                                       sc.STOP_REASON: "completed", sc.OUTCOME: "success"},
    ):
        for step in range(3):
            with tracer.start_as_current_span(f"step {step}") as s:
                s.set_attribute(sc.STEP_INDEX, step)
                s.set_attribute(sc.STOP_EXPLANATION, "x" * 200)
"""


@pytest.mark.slow
def test_sigkill_mid_stream_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    path = tmp_path / "killed.duckdb"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WRITER), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acknowledged: list[str] = []
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 90
        batches = 0
        # Enough batches that the WAL has been checkpointed at least once, then some.
        while batches < 150 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acknowledged.extend(line.split())
            batches += 1
        assert batches >= 20, child.stderr.read() if child.stderr else ""
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    # Lines written before the kill but not yet read were acknowledged too; a line cut short
    # by the kill (no newline) was not.
    assert child.stdout is not None
    for line in child.stdout.read().split("\n")[:-1]:
        acknowledged.extend(line.split())
    with Store(path) as store:  # opens cleanly, for writing too
        con = store.connection
        stored = {r[0] for r in con.execute("SELECT span_id FROM spans").fetchall()}
        missing = set(acknowledged) - stored
        assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged spans lost"
        run_spans = con.execute(
            "SELECT span_id, run_id FROM spans WHERE name LIKE 'invoke_agent%'"
        ).fetchall()
        runs = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    acked = set(acknowledged)
    acked_runs = {run_id for span_id, run_id in run_spans if span_id in acked}
    assert acked_runs and acked_runs <= runs


def test_processor_names_are_still_importable_from_the_exporter_module() -> None:
    from loopwatch.instrumentation import processor
    from loopwatch.queries import exporter

    assert exporter.CountingBatchSpanProcessor is processor.CountingBatchSpanProcessor
    assert exporter.QueueStats is processor.QueueStats
    assert (exporter.DROP_QUEUE_FULL, exporter.DROP_EXPORT_FAILED, exporter.DROP_SHUTDOWN) == (
        "queue_full",
        "export_failed",
        "shutdown",
    )
