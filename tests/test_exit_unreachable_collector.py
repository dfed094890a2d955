"""An agent whose collector is down exits in bounded time, and counts the spans it lost.

Real processes: an agent script instruments itself with an OTLP endpoint on 127.0.0.1 that is
closed (connection refused) or that accepts connections and never answers, runs the reference
loop, and exits. Its exporter is given a 30 s timeout, so an unbounded shutdown would hold the
process for 30 s or more; the bound asserted is the configured shutdown wait plus a generous
margin for interpreter start and exit on a shared machine (docs/telemetry.md, *Shutdown*).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHUTDOWN_TIMEOUT_MS = 1000
MARGIN_S = 12.0  # start-up excluded; this covers exit on a loaded 2-core machine
EXPORTER_TIMEOUT_S = 30  # what an unbounded shutdown would wait for, at least

AGENT = textwrap.dedent(
    """
    import atexit, json, sys
    from loopwatch.instrumentation import ToolRegistry, instrument, run
    from loopwatch.instrumentation.runtime.drops import dropped
    from loopwatch.instrumentation.testing import FakeModel, tool_call
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    made = InMemorySpanExporter()  # counts every span the agent ended
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(made))
    # Registered first, so it runs last: after instrument()'s own exit handler.
    atexit.register(lambda: print(json.dumps(
        {"made": len(made.get_finished_spans()), "dropped": dropped()}), flush=True))
    instrument(tracer_provider=provider, otlp_endpoint=sys.argv[1])
    registry = ToolRegistry()
    registry.register(lambda: "ok", name="ping", parameters={"type": "object"})
    for _ in range(int(sys.argv[2])):
        run(FakeModel([tool_call("ping"), "done"]), registry, "go")
    print("exiting", flush=True)
    """
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port whose connections the kernel accepts and nobody ever answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


def _exit_after_loop(port: int, runs: int) -> tuple[float, dict[str, object]]:
    """Seconds from the agent's last line to its exit, and what it reported at exit."""
    env = dict(os.environ)
    env.update(
        LOOPWATCH_SHUTDOWN_TIMEOUT_MS=str(SHUTDOWN_TIMEOUT_MS),
        OTEL_EXPORTER_OTLP_TIMEOUT=str(EXPORTER_TIMEOUT_S),
        OTEL_BSP_SCHEDULE_DELAY="50",  # batches leave while the loop runs, as in production
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", AGENT, f"http://127.0.0.1:{port}", str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "exiting", line + (proc.stderr.read() if proc.stderr else "")
    started = time.monotonic()
    out, err = proc.communicate(timeout=EXPORTER_TIMEOUT_S * 4)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, err
    return elapsed, json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_refused_collector_does_not_hold_the_exit() -> None:
    elapsed, report = _exit_after_loop(_closed_port(), runs=20)
    assert elapsed < SHUTDOWN_TIMEOUT_MS / 1000 + MARGIN_S, elapsed
    dropped = report["dropped"]
    assert isinstance(dropped, dict)
    # Every span the agent made is counted lost, once: failed exports plus what shutdown left.
    assert sum(dropped.values()) == report["made"] == 20 * 6, report  # 6 spans per run
    assert set(dropped) <= {"export_failed", "shutdown"}


@pytest.mark.slow
def test_a_collector_that_never_answers_does_not_hold_the_exit(silent_server: int) -> None:
    elapsed, report = _exit_after_loop(silent_server, runs=20)
    assert elapsed < SHUTDOWN_TIMEOUT_MS / 1000 + MARGIN_S, elapsed
    dropped = report["dropped"]
    assert isinstance(dropped, dict)
    assert sum(dropped.values()) == report["made"] == 20 * 6, report  # 6 spans per run
    assert dropped.get("shutdown", 0) > 0  # the batch stuck in the request was counted at exit


def test_the_shutdown_wait_is_argument_then_variable_then_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopwatch.instrumentation.telemetry.processor import (
        DEFAULT_SHUTDOWN_TIMEOUT_MS,
        SHUTDOWN_TIMEOUT_ENV,
        CountingBatchSpanProcessor,
    )
    from loopwatch.queries.store.exporter import STORE_SHUTDOWN_TIMEOUT_MS, store_processor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    def wait(**kwargs: float) -> float:
        processor = CountingBatchSpanProcessor(InMemorySpanExporter(), **kwargs)
        processor.shutdown()
        return processor.shutdown_timeout_millis

    monkeypatch.delenv(SHUTDOWN_TIMEOUT_ENV, raising=False)
    assert wait() == DEFAULT_SHUTDOWN_TIMEOUT_MS == 5000
    store = store_processor(InMemorySpanExporter())
    store.shutdown()
    assert store.shutdown_timeout_millis == STORE_SHUTDOWN_TIMEOUT_MS  # a local file drains
    monkeypatch.setenv(SHUTDOWN_TIMEOUT_ENV, "1500")
    assert wait() == 1500
    assert wait(shutdown_timeout_millis=250) == 250
    monkeypatch.setenv(SHUTDOWN_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="LOOPWATCH_SHUTDOWN_TIMEOUT_MS"):
        wait()
    with pytest.raises(ValueError, match="shutdown_timeout_millis must not be negative"):
        wait(shutdown_timeout_millis=-1)


def test_instrument_hands_its_shutdown_wait_to_the_otlp_output() -> None:
    from loopwatch.instrumentation.telemetry import instrument
    from loopwatch.instrumentation.telemetry.processor import CountingBatchSpanProcessor
    from opentelemetry.sdk.trace import TracerProvider

    handle = instrument(
        tracer_provider=TracerProvider(),
        otlp_endpoint=f"http://127.0.0.1:{_closed_port()}",
        shutdown_timeout_millis=1234,
    )
    try:
        (otlp,) = handle.processors
        assert isinstance(otlp, CountingBatchSpanProcessor)
        assert otlp.shutdown_timeout_millis == 1234
    finally:
        handle.shutdown()
