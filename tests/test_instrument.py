"""instrument(): one call wires provider, outputs and observer (real SDK, real HTTP)."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.drops import dropped, reset_drops
from loopwatch.instrumentation.runtime.observer import (
    BudgetSnapshot,
    RunInfo,
    get_observer_factory,
    set_observer_factory,
)
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, RunResult, Usage
from loopwatch.instrumentation.telemetry.pipeline import Instrumentation, instrument
from loopwatch.queries.store.exporter import DROP_EXPORT_FAILED
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (
        "LOOPWATCH_DB",
        "LOOPWATCH_METRICS_PORT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        sc.CAPTURE_CONTENT_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    reset_drops()
    yield
    set_observer_factory(None)


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


def _one_run(run_id: str = "r1", task_type: str = "support") -> RunResult:
    """A one-step successful run, reported to whatever observer factory is installed."""
    factory = get_observer_factory()
    assert factory is not None
    snap = BudgetSnapshot({"steps": 1, "model_calls": 1, "tokens": 30}, {"steps": 8}, 0.125)
    info = RunInfo(run_id, task_type, "agent", None, "v1")  # type: ignore[arg-type]
    obs = factory(info)
    obs.run_started(info, snap)
    obs.step_started(1, snap)
    obs.model_call_started(1, "m", snap)
    answer = ModelResponse(Message("assistant", "hi"), "end_turn", Usage(20, 10), "m")
    obs.model_call_ended(answer, None, snap)
    obs.step_ended(1, "completed", snap)
    reason = StopReason.COMPLETED
    result = RunResult([], [], "hi", reason, reason.outcome, Usage(20, 10), "", run_id, task_type)
    obs.run_ended(result, snap)
    return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


def test_uses_the_given_provider_and_installs_the_observer(provider: Any) -> None:
    tp, exporter = provider
    with instrument(tracer_provider=tp) as handle:
        assert isinstance(handle, Instrumentation)
        assert handle.tracer_provider is tp and handle.owns_provider is False
        assert handle.capture_content is False
        assert get_observer_factory() is not None
        _one_run()
        assert handle.force_flush() is True
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["chat m", "invoke_agent agent", "step 1"]
    # after shutdown runs are no longer observed; a second shutdown is harmless
    assert get_observer_factory() is None
    handle.shutdown()


def test_metrics_served_over_http_and_a_second_call_replaces_the_first(provider: Any) -> None:
    tp, _ = provider
    first = instrument(tracer_provider=tp, metrics_port=0)
    first_port = first.metrics_server.port
    _one_run("r1")
    second = instrument(tracer_provider=tp, metrics_port=0)
    try:
        assert first.metrics_server._stopped  # the first handle was shut down
        assert second.metrics is first.metrics  # counters carry on across re-wiring
        _one_run("r2")
        assert second.metrics_url is not None
        body = _get(second.metrics_url)
        line = 'loopwatch_runs_total{outcome="success",stop_reason="completed",task_type="support"}'
        # two runs, each counted once: the first wiring no longer sees spans
        assert f"{line} 2.0" in body
        with pytest.raises(OSError):
            _get(f"http://127.0.0.1:{first_port}/metrics")
    finally:
        second.shutdown()


def test_metrics_port_from_the_environment(provider: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    tp, _ = provider
    port = _free_port()
    monkeypatch.setenv("LOOPWATCH_METRICS_PORT", str(port))
    monkeypatch.setenv(sc.CAPTURE_CONTENT_ENV, "true")
    with instrument(tracer_provider=tp) as handle:
        assert handle.metrics_server.port == port
        assert handle.metrics_server.host == "127.0.0.1"
        assert handle.capture_content is True
        _one_run()
        assert "loopwatch_runs_total" in _get(f"http://127.0.0.1:{port}/metrics")


def test_bad_configuration_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match=r"tracer_provider must be an opentelemetry\.sdk\.trace"):
        instrument(tracer_provider=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"metrics_port must be an integer in 0\.\.65535"):
        instrument(metrics_port=70000)
    monkeypatch.setenv("LOOPWATCH_METRICS_PORT", "ninety")
    with pytest.raises(
        ValueError, match=r"LOOPWATCH_METRICS_PORT must be an integer in 0\.\.65535, got 'ninety'"
    ):
        instrument()
    assert get_observer_factory() is None


class _Receiver(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, ExportTraceServiceRequest]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        self.requests.append((self.path, req))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args: Any) -> None:
        pass


def test_otlp_endpoint_sends_spans_to_a_real_receiver(provider: Any) -> None:
    tp, _ = provider
    _Receiver.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        handle = instrument(
            tracer_provider=tp, otlp_endpoint=f"http://127.0.0.1:{server.server_port}"
        )
        assert handle.otlp_endpoint == f"http://127.0.0.1:{server.server_port}/v1/traces"
        _one_run()
        assert handle.force_flush()
        handle.shutdown()
    finally:
        server.shutdown()
        server.server_close()
    paths = {p for p, _ in _Receiver.requests}
    assert paths == {"/v1/traces"}
    spans = [
        s
        for _, req in _Receiver.requests
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]
    run = next(s for s in spans if s.name == "invoke_agent agent")
    attrs = {a.key: a.value for a in run.attributes}
    assert attrs[sc.STOP_REASON].string_value == "completed"
    assert attrs[sc.RUN_ID].string_value == "r1"
    assert {s.name for s in spans} == {"invoke_agent agent", "step 1", "chat m"}
    assert dropped() == {}


def test_an_unreachable_otlp_endpoint_counts_the_loss(
    provider: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    handle = instrument(tracer_provider=tp, otlp_endpoint=f"http://127.0.0.1:{_free_port()}")
    result = _one_run()
    handle.force_flush()
    handle.shutdown()
    assert result.ok and result.final == "hi"
    assert dropped() == {DROP_EXPORT_FAILED: 3}
    # the application's own exporter on the same provider still got everything
    assert len(exporter.get_finished_spans()) == 3


def test_live_mode_does_not_import_duckdb_or_pyarrow() -> None:
    code = textwrap.dedent(
        """
        import sys
        from loopwatch.instrumentation import instrument
        handle = instrument(otlp_endpoint="http://127.0.0.1:9")
        loaded = sorted(m for m in ("duckdb", "pyarrow") if m in sys.modules)
        handle.shutdown()
        print(loaded)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_applications_own_global_provider_is_used() -> None:
    """In a fresh process: the app set its provider first; instrument() adds to it and leaves
    the app's resource alone."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from loopwatch.instrumentation.telemetry.pipeline import instrument
        from test_instrument import _one_run

        app = TracerProvider(resource=Resource.create({{"service.name": "billing"}}))
        mem = InMemorySpanExporter()
        app.add_span_processor(SimpleSpanProcessor(mem))
        trace.set_tracer_provider(app)
        handle = instrument(service_name="ignored")
        assert handle.tracer_provider is app and not handle.owns_provider
        _one_run()
        spans = mem.get_finished_spans()
        print(json.dumps(sorted([s.name, s.resource.attributes["service.name"]] for s in spans)))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        ["chat m", "billing"],
        ["invoke_agent agent", "billing"],
        ["step 1", "billing"],
    ]
    assert "service_name='ignored' ignored" in proc.stderr


def test_without_a_provider_one_is_made_and_exit_flushes_the_store(tmp_path: Path) -> None:
    """In a fresh process with no provider: instrument() makes one with the service name, sets
    it globally, and at exit (no shutdown() called) the store gets every run and is unlocked."""
    from loopwatch.queries.store.database import connect_read_only

    db = tmp_path / "exit.duckdb"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from opentelemetry import trace
        from loopwatch.instrumentation.telemetry.pipeline import instrument
        from test_instrument import _real_runs
        first = instrument(service_name="checkout-agent")
        assert first.owns_provider
        assert trace.get_tracer_provider() is first.tracer_provider
        handle = instrument(service_name="checkout-agent", store={str(db)!r})
        assert handle.tracer_provider is first.tracer_provider
        print(handle.tracer_provider.resource.attributes["service.name"])
        _real_runs()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "checkout-agent"
    con = connect_read_only(db)
    try:
        rows = con.execute("SELECT run_id, service FROM runs ORDER BY run_id").fetchall()
    finally:
        con.close()
    assert rows == [
        ("limit-1", "checkout-agent"),
        ("ok-1", "checkout-agent"),
        ("stuck-1", "checkout-agent"),
    ]


# --- file mode (DuckDB) and the real loop --------------------------------------------------------


def _real_runs() -> list[RunResult]:
    """A success, a limit stop and a stuck stop through the reference loop, observed by
    whatever instrument() installed."""
    from loopwatch.instrumentation.runtime.limits import LoopLimits
    from loopwatch.instrumentation.runtime.loop import run
    from loopwatch.instrumentation.runtime.retry import ToolError
    from loopwatch.instrumentation.runtime.tools import ToolRegistry
    from loopwatch.instrumentation.runtime.types import ToolCall
    from loopwatch.instrumentation.testing import (
        CounterModel,
        FakeClock,
        FakeModel,
        ScriptedTool,
        text_response,
        tool_response,
    )

    usage = Usage(100, 20, 0.001)
    limits = LoopLimits(max_steps=3, max_tokens=5000, max_consecutive_failures=5)
    results = []
    clock = FakeClock()
    reg = ToolRegistry(sleep=clock.sleep, rng=lambda: 0.5)
    reg.register(lambda q: {"q": q}, name="lookup")
    reg.register(
        ScriptedTool([ToolError("NOT_FOUND", "gone", transient=False)], params=["text"]),
        name="read",
    )
    reg.register(lambda text: text, name="echo")
    ok_model = FakeModel(
        [
            tool_response(ToolCall("c1", "lookup", {"q": "a"}), usage=usage),
            text_response("fine", usage=usage),
        ]
    )
    common: dict[str, Any] = dict(limits=limits, clock=clock, raise_on_stop=False)
    results.append(run(ok_model, reg, "hi", task_type="support", run_id="ok-1", **common))
    results.append(
        run(
            CounterModel("echo", usage=usage),
            reg,
            "hi",
            task_type="batch",
            run_id="limit-1",
            **common,
        )
    )
    results.append(
        run(
            CounterModel("read", usage=usage),
            reg,
            "hi",
            task_type="support",
            run_id="stuck-1",
            **common,
        )
    )
    return results


def test_file_mode_writes_spans_and_runs_that_match(provider: Any, tmp_path: Path) -> None:
    from loopwatch.queries.store.database import connect_read_only

    tp, exporter = provider
    db = tmp_path / "runs.duckdb"
    handle = instrument(tracer_provider=tp, store=db)
    assert handle.store_path == db and handle.store_error is None
    results = _real_runs()
    assert [str(r.stop_reason) for r in results] == ["completed", "max_steps", "repeated_error"]
    assert handle.force_flush()
    handle.shutdown()
    emitted = {
        (
            format(s.context.span_id, "016x"),
            s.name,
            format(s.parent.span_id, "016x") if s.parent else None,
        )
        for s in exporter.get_finished_spans()
    }
    con = connect_read_only(db)
    try:
        stored = set(con.execute("SELECT span_id, name, parent_span_id FROM spans").fetchall())
        runs = con.execute(
            "SELECT run_id, task_type, stop_reason, outcome, limit_name, steps, tool_calls,"
            " input_tokens, limit_steps, limit_tool_calls FROM runs ORDER BY run_id"
        ).fetchall()
    finally:
        con.close()
    assert stored == emitted
    by_id = {r.run_id: r for r in results}
    assert [row[0] for row in runs] == ["limit-1", "ok-1", "stuck-1"]
    for (
        run_id,
        task,
        reason,
        outcome,
        limit_name,
        steps,
        tool_calls,
        tokens_in,
        lim_steps,
        lim_tools,
    ) in runs:
        r = by_id[run_id]
        assert (task, reason, outcome, limit_name) == (
            r.task_type, str(r.stop_reason), str(r.outcome), r.limit,
        )  # fmt: skip
        assert steps == r.counters["steps"] and tool_calls == r.counters["tool_calls"]
        assert tokens_in == r.usage.input_tokens
        assert lim_steps == 3 and lim_tools is None
    assert dropped() == {}


def test_an_unwritable_store_leaves_results_unchanged_and_counts_the_loss(
    provider: Any, tmp_path: Path
) -> None:
    tp, exporter = provider
    plain = _real_runs()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    handle = instrument(tracer_provider=tp, store=blocker / "runs.duckdb", metrics_port=0)
    try:
        assert handle.store_error  # logged and kept, not raised
        observed = _real_runs()
        assert [r.to_dict() for r in observed] == [r.to_dict() for r in plain]
        handle.force_flush()
        lost = dropped().get(DROP_EXPORT_FAILED, 0)
        assert lost == len(exporter.get_finished_spans()) > 0
        body = _get(handle.metrics_url or "")
        assert (
            f'loopwatch_telemetry_dropped_total{{reason="{DROP_EXPORT_FAILED}"}} {float(lost)}'
            in body
        )
        # metrics still came from the same spans
        assert (
            'loopwatch_runs_total{outcome="limit",stop_reason="max_steps",task_type="batch"} 1.0'
            in body
        )
    finally:
        handle.shutdown()


def test_a_store_locked_by_another_process_is_reported_not_raised(tmp_path: Path) -> None:
    """This process holds the file; an agent process instrumented with it runs unchanged, keeps
    the lock error (naming the holder) and counts its spans as dropped."""
    from loopwatch.queries.store.database import Store

    db = tmp_path / "held.duckdb"
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from loopwatch.instrumentation.runtime.drops import dropped
        from loopwatch.instrumentation.telemetry.pipeline import instrument
        from test_instrument import _real_runs
        handle = instrument(store={str(db)!r})
        results = _real_runs()
        handle.force_flush()
        print(json.dumps({{
            "error": handle.store_error,
            "reasons": [str(r.stop_reason) for r in results],
            "dropped": dropped(),
        }}))
        """
    )
    holder = Store(db)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
    finally:
        holder.close()
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["reasons"] == ["completed", "max_steps", "repeated_error"]
    assert "is locked by" in out["error"] and str(os.getpid()) in out["error"]
    assert out["dropped"][DROP_EXPORT_FAILED] > 0


def test_metrics_of_real_runs_over_http_pass_promtool(provider: Any) -> None:
    from conftest import require_program

    promtool = require_program("promtool")
    tp, _ = provider
    with instrument(tracer_provider=tp, metrics_port=0) as handle:
        _real_runs()
        body = _get(handle.metrics_url or "")
    for line in (
        'loopwatch_runs_total{outcome="success",stop_reason="completed",task_type="support"} 1.0',
        'loopwatch_runs_total{outcome="limit",stop_reason="max_steps",task_type="batch"} 1.0',
        'loopwatch_runs_total{outcome="stuck",stop_reason="repeated_error",task_type="support"}'
        " 1.0",
        'loopwatch_run_steps_sum{outcome="limit",task_type="batch"} 3.0',
        'loopwatch_run_tokens_sum{outcome="success",task_type="support"} 240.0',
        'loopwatch_budget_utilization_ratio_sum{budget="steps",outcome="limit",task_type="batch"}'
        " 1.0",
        'loopwatch_limit_steps{task_type="support"} 3.0',
        'loopwatch_tool_calls_total{status="error",task_type="support",tool="read"} 3.0',
        'loopwatch_tool_calls_total{status="ok",task_type="batch",tool="echo"} 3.0',
    ):
        assert line in body, line
    check = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_failed_instrument_call_releases_what_it_opened(provider: Any, tmp_path: Path) -> None:
    from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor
    from prometheus_client import CollectorRegistry

    tp, _ = provider
    taken = CollectorRegistry()
    MetricsSpanProcessor(taken)
    db = tmp_path / "half.duckdb"
    with pytest.raises(ValueError, match="already holds loopwatch metrics"):
        instrument(tracer_provider=tp, store=db, metrics_registry=taken)
    assert get_observer_factory() is None
    # the store it had opened is closed again: another process can open the file
    probe = (
        "import sys; from loopwatch.queries.store.database import Store; Store(sys.argv[1]).close()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(db)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_otel_endpoint_variable_is_honoured_for_a_provider_made_here() -> None:
    _Receiver.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from loopwatch.instrumentation.telemetry.pipeline import instrument
        from test_instrument import _real_runs
        handle = instrument()
        print(handle.otlp_endpoint)
        _real_runs()
        """
    )
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}/")
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
            cwd=ROOT, env=env,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"http://127.0.0.1:{server.server_port}/v1/traces"
    run_ids = sorted(
        a.value.string_value
        for path, req in _Receiver.requests
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
        for a in s.attributes
        if path == "/v1/traces" and s.name.startswith("invoke_agent") and a.key == sc.RUN_ID
    )
    assert run_ids == ["limit-1", "ok-1", "stuck-1"]


def test_shutting_the_provider_down_flushes_loopwatchs_outputs(tmp_path: Path) -> None:
    from loopwatch.queries.store.database import connect_read_only

    tp = TracerProvider()
    db = tmp_path / "app.duckdb"
    handle = instrument(tracer_provider=tp, store=db)
    _real_runs()
    tp.shutdown()  # the application's own teardown, before (or instead of) handle.shutdown()
    con = connect_read_only(db)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)
    finally:
        con.close()
    handle.shutdown()


def test_capture_content_switch_reaches_the_spans(provider: Any) -> None:
    tp, exporter = provider
    with instrument(tracer_provider=tp):
        _real_runs()
    keys = {k for s in exporter.get_finished_spans() for k in (s.attributes or {})}
    assert not keys & {
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.output.messages",
    }
    exporter.clear()
    with instrument(tracer_provider=tp, capture_content=True) as handle:
        assert handle.capture_content is True
        _real_runs()
    lookup = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup")
    assert (lookup.attributes or {})[sc.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"q":"a"}'
    assert (lookup.attributes or {})[sc.GEN_AI_TOOL_CALL_RESULT] == '{"q": "a"}'


@pytest.mark.parametrize("url", ["not a url", "ftp://x", "http://", "127.0.0.1:4318"])
def test_an_otlp_endpoint_that_is_not_an_http_url_is_refused_at_the_call(
    provider: Any, url: str
) -> None:
    tp, _ = provider
    before = instrument(tracer_provider=tp)
    with pytest.raises(ValueError, match=r"otlp_endpoint must be an http\(s\) URL such as"):
        instrument(tracer_provider=tp, otlp_endpoint=url)
    # refused before anything was replaced: the earlier wiring still runs
    assert get_observer_factory() is before._factory
    before.shutdown()


def test_force_flush_says_when_spans_were_lost(
    provider: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, _ = provider
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    handle = instrument(tracer_provider=tp, otlp_endpoint=f"http://127.0.0.1:{_free_port()}")
    try:
        _one_run()
        assert handle.force_flush() is False  # every span dropped: not a success
        assert dropped()[DROP_EXPORT_FAILED] == 3
        assert handle.force_flush() is True  # nothing new was lost since
    finally:
        handle.shutdown()


def test_store_error_clears_once_the_holder_is_gone_and_the_store_was_written(
    tmp_path: Path,
) -> None:
    """An agent process starts while another process holds the store: ``store_error`` names the
    holder; once the holder has exited and a batch was written, it is None again."""
    from loopwatch.queries.store.database import Store

    db = tmp_path / "held.duckdb"
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from loopwatch.instrumentation.telemetry.pipeline import instrument
        from test_instrument import _real_runs
        handle = instrument(store={str(db)!r})
        _real_runs()
        first = handle.force_flush()
        print(json.dumps({{"error": handle.store_error, "ok": first}}), flush=True)
        sys.stdin.readline()  # the holder closes the file
        _real_runs()
        second = handle.force_flush()
        print(json.dumps({{"error": handle.store_error, "ok": second}}), flush=True)
        handle.shutdown()
        """
    )
    holder = Store(db)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdin is not None
        before = json.loads(proc.stdout.readline())
        holder.close()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        after = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=120) == 0
    finally:
        holder.close()
        if proc.poll() is None:
            proc.kill()
    assert "is locked by" in before["error"] and str(os.getpid()) in before["error"]
    assert before["ok"] is False
    assert after == {"error": None, "ok": True}
    from loopwatch.queries.store.database import connect_read_only

    con = connect_read_only(db)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)
    finally:
        con.close()
