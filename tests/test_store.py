"""The DuckDB store: real files, real SDK spans, real second processes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from loopwatch.instrumentation import semconv as sc
from loopwatch.queries.store.database import (
    SCHEMA_VERSION,
    EventRecord,
    SchemaVersionError,
    SpanBatch,
    SpanRecord,
    Store,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    connect_read_only,
    record_from_span,
    records_from_spans,
    resolve_db_path,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

# --- helpers ---------------------------------------------------------------------------------


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "svc-test"}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    yield tp, memory
    tp.shutdown()


def budget(steps: int, tokens: int) -> dict[str, Any]:
    return {
        sc.budget_used("steps"): steps,
        sc.budget_limit("steps"): 8,
        sc.budget_used("model_calls"): steps,
        sc.budget_used("tool_calls"): steps - 1,
        sc.budget_used("tokens"): tokens,
        sc.budget_limit("tokens"): 10_000,
        sc.budget_used("cost_usd"): 0.25,
        sc.budget_used("wall_s"): 1.5,
        sc.budget_limit("wall_s"): 60.0,
        sc.BUDGET_MAX_UTILIZATION: steps / 8,
    }


def emit_run(tp: TracerProvider, run_id: str = "run-1", **run_extra: Any) -> None:
    """One run shaped like docs/telemetry.md's span tree: run > step > (chat, tool with an error
    and a retry)."""
    tracer = tp.get_tracer("test")
    common = {sc.RUN_ID: run_id, sc.TASK_TYPE: "support_ticket"}
    with tracer.start_as_current_span(
        "invoke_agent helper",
        attributes={
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.GEN_AI_AGENT_NAME: "helper",
            **common,
        },
    ) as run:
        with tracer.start_as_current_span("step 1") as step:
            step.set_attributes({sc.STEP_INDEX: 1, **common})
            with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as chat:
                chat.set_attributes(
                    {
                        sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
                        sc.STEP_INDEX: 1,
                        sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                        sc.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"],
                        sc.GEN_AI_USAGE_INPUT_TOKENS: 1200,
                        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 80,
                        sc.COST_USD: 0.0125,
                        **common,
                        **budget(1, 1280),
                    }
                )
            with tracer.start_as_current_span("execute_tool read_file") as tool:
                tool.add_event(sc.EVENT_RETRY, {"attempt": 1, "delay_s": 0.2})
                tool.set_attributes(
                    {
                        sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                        sc.GEN_AI_TOOL_NAME: "read_file",
                        sc.GEN_AI_TOOL_CALL_ID: "call_1",
                        sc.TOOL_FINGERPRINT: "fp-call",
                        sc.RESULT_FINGERPRINT: "fp-result",
                        sc.TOOL_STATUS: "error",
                        sc.TOOL_RETRIES: 1,
                        sc.ERROR_TYPE: "NOT_FOUND",
                        sc.ERROR_CODE: "NOT_FOUND",
                        sc.ERROR_FINGERPRINT: "read_file:NOT_FOUND",
                        sc.STEP_INDEX: 1,
                        **common,
                        **budget(1, 1280),
                    }
                )
                tool.set_status(Status(StatusCode.ERROR, "NOT_FOUND"))
            step.set_attributes({sc.GUARD_DECISION: "repeated_error", **budget(1, 1280)})
        run.set_attributes(
            {
                sc.STOP_REASON: "repeated_error",
                sc.OUTCOME: "stuck",
                sc.STOP_EXPLANATION: "Stopped at step 1: read_file returned NOT_FOUND 3 times.",
                sc.LIMITS_VERSION: "v-abc123",
                sc.GEN_AI_USAGE_INPUT_TOKENS: 1200,
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: 80,
                sc.COST_USD: 0.0125,
                sc.ERROR_TYPE: "repeated_error",
                sc.PROGRESS_RECENT_NEW_CALLS: 0,
                sc.PROGRESS_MAX_SAME_ERROR: 3,
                sc.PROGRESS_MAX_SAME_CALL: 2,
                **budget(1, 1280),
                **run_extra,
            }
        )
        run.set_status(Status(StatusCode.ERROR, "repeated_error"))


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- schema and opening ----------------------------------------------------------------------


def test_new_file_gets_schema_and_version(tmp_path: Path) -> None:
    path = tmp_path / "new.duckdb"
    with Store(path) as store:
        con = store.connection
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert {"spans", "runs", "schema_version"} <= tables
    # Reopening keeps the one version row.
    with Store(path) as store:
        assert store.connection.execute("SELECT count(*) FROM schema_version").fetchone() == (1,)


def test_path_default_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LOOPWATCH_DB", raising=False)
    assert resolve_db_path() == Path("loopwatch.duckdb")
    monkeypatch.setenv("LOOPWATCH_DB", str(tmp_path / "env.duckdb"))
    assert resolve_db_path() == tmp_path / "env.duckdb"
    assert resolve_db_path(tmp_path / "arg.duckdb") == tmp_path / "arg.duckdb"


def test_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.duckdb"
    path.touch()
    with Store(path) as store:
        assert store.connection.execute("SELECT max(version) FROM schema_version").fetchone() == (
            SCHEMA_VERSION,
        )


def test_read_only_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.duckdb"
    with pytest.raises(StoreNotFoundError) as err:
        connect_read_only(path)
    assert str(err.value) == (
        f"{path} does not exist: check --db/LOOPWATCH_DB, or create the store first by "
        "running agents with instrument(store=...) or `loopwatch serve`."
    )
    assert not path.exists()


@pytest.mark.parametrize("read_only", [False, True])
def test_garbage_file_is_corrupt(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(os.urandom(3000) + b"' DROP TABLE spans; --" * 50)
    before = path.read_bytes()
    with pytest.raises(StoreCorruptError) as err:
        Store(path, read_only=read_only)
    message = str(err.value)
    assert message.startswith(f"{path} is not a readable DuckDB store (")
    assert message.endswith(
        "): restore it from a backup, or move it aside and let loopwatch create a new store "
        f"there (`mv {path} {path}.damaged`, and its .wal file if there is one), or point "
        "--db/LOOPWATCH_DB at another file."
    )
    assert "\n" not in message
    assert path.read_bytes() == before  # never touched
    assert isinstance(err.value, StoreError)


def test_unknown_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "future.duckdb"
    with Store(path) as store:
        store.connection.execute("UPDATE schema_version SET version = 99")
    for read_only in (False, True):
        with pytest.raises(SchemaVersionError) as err:
            Store(path, read_only=read_only)
        assert err.value.found == 99
        assert str(err.value) == (
            f"{path} has store schema version 99, newer than the {SCHEMA_VERSION} this "
            "loopwatch reads: upgrade loopwatch, or point --db/LOOPWATCH_DB at another file."
        )
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE schema_version SET version = 0")
    with pytest.raises(SchemaVersionError, match="unknown store schema version 0"):
        connect_read_only(path)


def test_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(SchemaVersionError) as err:
        Store(path)
    assert err.value.found is None
    assert "not a loopwatch store" in str(err.value)
    with duckdb.connect(str(path)) as con:  # left as it was
        tables = con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        assert tables == [("invoices",)]


def test_second_process_gets_lock_error_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "locked.duckdb"
    with Store(path):
        child = run_child(
            f"""
            import json
            from loopwatch.queries.store.database import Store, StoreLockedError
            out = []
            for read_only in (True, False):
                try:
                    Store({str(path)!r}, read_only=read_only)
                    out.append(None)
                except StoreLockedError as e:
                    out.append([str(e), e.pid])
            print(json.dumps(out))
            """
        )
        assert child.returncode == 0, child.stderr
        results = json.loads(child.stdout)
    assert len(results) == 2
    for message, pid in results:
        assert pid == os.getpid()
        assert message.startswith(f"{path} is locked by another process (")
        assert f", PID {os.getpid()}): " in message
        assert message.endswith(
            "DuckDB lets one process write a store and no other process open it meanwhile. "
            "Send spans to that process instead (live mode: `loopwatch serve`), or open the "
            "file read-only after it finishes."
        )
        assert "\n" not in message
    # Once the writer has finished, the same open succeeds.
    child = run_child(
        f"""
        from loopwatch.queries.store.database import connect_read_only
        con = connect_read_only({str(path)!r})
        print(con.execute("SELECT count(*) FROM spans").fetchone()[0])
        """
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "0"


def test_same_process_read_only_open_points_to_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "same.duckdb"
    with Store(path) as writer:
        with pytest.raises(StoreError) as err:
            Store(path, read_only=True)
        assert str(err.value) == (
            f"{path} is already open in this process in another mode: use that Store's "
            "connection (Store.cursor()), or close it first."
        )
        cur = writer.cursor()
        assert cur.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        cur.close()


def test_read_only_store_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "ro.duckdb"
    Store(path).close()
    with Store(path, read_only=True) as store, pytest.raises(StoreError, match="read-only"):
        store.write(SpanBatch.from_records([SpanRecord("a" * 32, "b" * 16, "x", 1, 2)]))


def test_closed_store_says_so(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.duckdb")
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="is closed"):
        store.write(SpanBatch.from_records([SpanRecord("a" * 32, "b" * 16, "x", 1, 2)]))


# --- what gets stored --------------------------------------------------------------------------


def test_spans_and_runs_match_what_was_emitted(
    tmp_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    tp, memory = provider
    emit_run(tp)
    emitted = {f"{s.context.span_id:016x}": s for s in memory.get_finished_spans()}
    path = tmp_path / "match.duckdb"
    with Store(path) as store:
        assert store.write(SpanBatch.from_sdk_spans(memory.get_finished_spans())) == 4
    con = connect_read_only(path)
    try:
        stored = {r["span_id"]: r for r in rows(con, "SELECT * FROM spans")}
        assert stored.keys() == emitted.keys()
        for span_id, span in emitted.items():
            row = stored[span_id]
            assert row["trace_id"] == f"{span.context.trace_id:032x}"
            parent = f"{span.parent.span_id:016x}" if span.parent else None
            assert row["parent_span_id"] == parent
            assert row["name"] == span.name
            assert row["kind"] == span.kind.name
            assert (row["start_ns"], row["end_ns"]) == (span.start_time, span.end_time)
            assert row["status_code"] == span.status.status_code.name
            assert row["status_message"] == span.status.description
            assert row["service"] == "svc-test"
            assert row["run_id"] == "run-1"
            assert row["task_type"] == "support_ticket"

        by_name = {r["name"]: r for r in stored.values()}
        chat = by_name["chat gpt-4o"]
        assert chat["kind"] == "CLIENT"
        assert chat["operation"] == "chat"
        assert chat["model"] == "gpt-4o"
        assert (chat["input_tokens"], chat["output_tokens"]) == (1200, 80)
        assert chat["cost_usd"] == pytest.approx(0.0125)
        assert chat["step"] == 1
        assert chat["used_steps"] == 1 and chat["limit_steps"] == 8
        assert chat["used_tokens"] == 1280 and chat["limit_tokens"] == 10_000
        assert chat["limit_model_calls"] is None  # off
        assert chat["max_utilization"] == pytest.approx(1 / 8)
        # Only attributes without a typed column go to JSON.
        assert json.loads(chat["attributes"]) == {sc.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"]}
        assert json.loads(chat["events"]) == []

        tool = by_name["execute_tool read_file"]
        assert tool["tool_name"] == "read_file"
        assert tool["tool_call_id"] == "call_1"
        assert tool["tool_status"] == "error"
        assert tool["tool_fingerprint"] == "fp-call"
        assert tool["result_fingerprint"] == "fp-result"
        assert tool["error_type"] == tool["error_code"] == "NOT_FOUND"
        assert tool["error_fingerprint"] == "read_file:NOT_FOUND"
        assert tool["tool_retries"] == 1
        assert tool["status_code"] == "ERROR" and tool["status_message"] == "NOT_FOUND"
        assert json.loads(tool["attributes"]) == {}
        (event,) = json.loads(tool["events"])
        retry = next(iter(emitted[tool["span_id"]].events))
        assert event == {
            "name": sc.EVENT_RETRY,
            "time_ns": retry.timestamp,
            "attributes": {"attempt": 1, "delay_s": 0.2},
        }

        assert by_name["step 1"]["guard_decision"] == "repeated_error"

        run_row = by_name["invoke_agent helper"]
        assert run_row["stop_reason"] == "repeated_error"
        assert run_row["outcome"] == "stuck"
        assert run_row["limits_version"] == "v-abc123"
        assert json.loads(run_row["attributes"]) == {
            sc.GEN_AI_AGENT_NAME: "helper",
            sc.STOP_EXPLANATION: "Stopped at step 1: read_file returned NOT_FOUND 3 times.",
            sc.PROGRESS_RECENT_NEW_CALLS: 0,
            sc.PROGRESS_MAX_SAME_ERROR: 3,
            sc.PROGRESS_MAX_SAME_CALL: 2,
        }

        (run,) = rows(con, "SELECT * FROM runs")
        span = emitted[run_row["span_id"]]
        assert run["run_id"] == "run-1"
        assert run["trace_id"] == f"{span.context.trace_id:032x}"
        assert run["span_id"] == run_row["span_id"]
        assert run["service"] == "svc-test"
        assert run["agent_name"] == "helper"
        assert run["task_type"] == "support_ticket"
        assert (run["start_ns"], run["end_ns"]) == (span.start_time, span.end_time)
        # started_at is the start truncated to microseconds (exact integers: a float of the
        # seconds since 1970 has ~0.24 us of resolution today).
        since_epoch = run["started_at"] - datetime(1970, 1, 1)
        assert since_epoch // timedelta(microseconds=1) == span.start_time // 1000
        assert (run["stop_reason"], run["outcome"]) == ("repeated_error", "stuck")
        assert run["limit_name"] is None
        assert run["explanation"] == "Stopped at step 1: read_file returned NOT_FOUND 3 times."
        assert run["limits_version"] == "v-abc123"
        assert (run["steps"], run["model_calls"], run["tool_calls"]) == (1, 1, 0)
        assert (run["tokens"], run["cost_usd"], run["wall_s"]) == (1280, 0.25, 1.5)
        assert (run["input_tokens"], run["output_tokens"]) == (1200, 80)
        assert (run["limit_steps"], run["limit_tokens"], run["limit_wall_s"]) == (8, 10_000, 60)
        assert run["limit_model_calls"] is None and run["limit_cost_usd"] is None
        assert run["max_utilization"] == pytest.approx(1 / 8)
        assert (run["recent_new_calls"], run["max_same_error"], run["max_same_call"]) == (0, 3, 2)
        assert run["task_success"] is None
        assert run["source"] == "otel"
        assert run["parent_run_id"] is None and run["conversation_id"] is None
    finally:
        con.close()


def _run_record(run_id: str, start_ns: int, reason: str = "completed") -> SpanRecord:
    attrs = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
        sc.RUN_ID: run_id,
        sc.TASK_TYPE: "t",
        sc.STOP_REASON: reason,
    }
    return SpanRecord(
        run_id.ljust(32, "0"), "1" * 16, "invoke_agent a", start_ns, start_ns + 9, attributes=attrs
    )


def _runs(store: Store) -> list[tuple[Any, ...]]:
    return store.connection.execute(
        "SELECT run_id, start_ns, stop_reason FROM runs ORDER BY run_id, start_ns"
    ).fetchall()


def test_a_run_span_stored_again_replaces_its_row(
    tmp_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    tp, memory = provider
    emit_run(tp, "run-a")
    first = memory.get_finished_spans()
    memory.clear()
    emit_run(tp, "run-b")
    second = memory.get_finished_spans()
    with Store(tmp_path / "up.duckdb") as store:
        store.write(SpanBatch.from_sdk_spans(first))
        # A retried export: the same spans again, together with a new run.
        store.write(SpanBatch.from_sdk_spans([*first, *second]))
        got = store.connection.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()
        assert got == [("run-a",), ("run-b",)]
        # Twice in one batch, or again with other values: the later span wins.
        store.write(
            SpanBatch.from_records([_run_record("run-c", 50), _run_record("run-c", 50, "error")])
        )
        store.write(SpanBatch.from_records([_run_record("run-c", 50, "max_steps")]))
        assert [r for r in _runs(store) if r[0] == "run-c"] == [("run-c", 50, "max_steps")]


def test_another_run_under_the_same_id_is_a_row_of_its_own(tmp_path: Path) -> None:
    """runs has no primary key: a caller that names two runs alike gets two rows, and a writer
    that promises new runs (``new_runs``) is taken at its word."""
    with Store(tmp_path / "lw.duckdb") as store:
        store.write(SpanBatch.from_records([_run_record("run-a", 10)]))
        store.write(
            SpanBatch.from_records([_run_record("run-a", 5_000), _run_record("run-b", 9_000)])
        )
        assert _runs(store) == [
            ("run-a", 10, "completed"),
            ("run-a", 5_000, "completed"),
            ("run-b", 9_000, "completed"),
        ]
        batch = SpanBatch.from_records([_run_record("run-b", 9_000, "error")])
        store.write(dataclasses.replace(batch, new_runs=True))
        assert _runs(store)[-2:] == [("run-b", 9_000, "completed"), ("run-b", 9_000, "error")]


def test_a_store_made_when_runs_had_a_primary_key_still_takes_writes(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with Store(path):
        pass
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs_keyed AS SELECT * FROM runs")
    con.execute("DROP TABLE runs")
    con.execute("ALTER TABLE runs_keyed RENAME TO runs")
    con.execute("ALTER TABLE runs ADD PRIMARY KEY (run_id)")
    con.close()
    with Store(path) as store:
        store.write(SpanBatch.from_records([_run_record("run-a", 10)]))
        store.write(SpanBatch.from_records([_run_record("run-a", 10, "error")]))
        # Another start under the same id: the key refuses a second row, so it replaces.
        store.write(SpanBatch.from_records([_run_record("run-a", 7_000, "max_steps")]))
        assert _runs(store) == [("run-a", 7_000, "max_steps")]


def test_malformed_attributes_keep_the_span_and_the_raw_values(tmp_path: Path) -> None:
    weird = {
        sc.RUN_ID: "run-m",
        sc.STEP_INDEX: "3",  # string where a number belongs
        sc.GEN_AI_USAGE_INPUT_TOKENS: 12.5,  # float in an integer column
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 2**70,  # too big for BIGINT
        sc.COST_USD: True,  # bool is not a number here
        sc.budget_used("steps"): "many",
        sc.budget_used("tokens"): 7,  # int in a DOUBLE column is fine
        sc.TASK_TYPE: ("a", "b"),  # list where a string belongs
        sc.GEN_AI_REQUEST_MODEL: 42,
        sc.TOOL_RETRIES: 2**40,  # too big for INTEGER
        "custom.nan": float("nan"),
        "custom.bytes": b"\x00\xff",
    }
    good = {sc.RUN_ID: "run-ok", sc.STEP_INDEX: 2, sc.GEN_AI_USAGE_INPUT_TOKENS: 5}
    records = [
        SpanRecord("1" * 32, "a" * 16, "step 3", 10, 20, attributes=weird),
        SpanRecord("1" * 32, "b" * 16, "step 2", 10, 20, attributes=good),
        SpanRecord("1" * 32, "c" * 16, "step 4", 10, 20, attributes={}),
    ]
    with Store(tmp_path / "m.duckdb") as store:
        assert store.write(SpanBatch.from_records(records)) == 3
        by_id = {r["span_id"]: r for r in rows(store.connection, "SELECT * FROM spans")}
    bad = by_id["a" * 16]
    for column in (
        "step",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "used_steps",
        "task_type",
        "model",
        "tool_retries",
    ):
        assert bad[column] is None, column
    assert bad["run_id"] == "run-m"
    assert bad["used_tokens"] == 7.0
    kept = json.loads(bad["attributes"])
    assert kept == {
        sc.STEP_INDEX: "3",
        sc.GEN_AI_USAGE_INPUT_TOKENS: 12.5,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 2**70,
        sc.COST_USD: True,
        sc.budget_used("steps"): "many",
        sc.TASK_TYPE: ["a", "b"],
        sc.GEN_AI_REQUEST_MODEL: 42,
        sc.TOOL_RETRIES: 2**40,
        "custom.nan": pytest.approx(float("nan"), nan_ok=True),
        "custom.bytes": "AP8=",  # base64, as OTLP/JSON writes bytes
    }
    ok = by_id["b" * 16]
    assert (ok["step"], ok["input_tokens"], ok["run_id"]) == (2, 5, "run-ok")
    assert json.loads(ok["attributes"]) == {}
    assert json.loads(by_id["c" * 16]["attributes"]) == {}


def test_malformed_run_span_still_gets_a_run_row(tmp_path: Path) -> None:
    bare = SpanRecord(
        "2" * 32,
        "d" * 16,
        "invoke_agent",
        1_700_000_000_000_000_000,
        1_700_000_001_000_000_000,
        attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.budget_used("steps"): "x"},
    )
    reasoned = SpanRecord(
        "2" * 32,
        "e" * 16,
        "invoke_agent bot",
        5,
        6,
        attributes={sc.RUN_ID: "r-2", sc.STOP_REASON: "max_steps", sc.TASK_SUCCESS: "yes"},
    )
    with Store(tmp_path / "r.duckdb") as store:
        store.write(SpanBatch.from_records([bare, reasoned], source="import"))
        got = rows(store.connection, "SELECT * FROM runs ORDER BY run_id")
    first, second = got
    assert first["run_id"] == "d" * 16  # no run id: the span id stands in
    assert (first["task_type"], first["stop_reason"], first["outcome"]) == (
        "unknown",
        "unknown",
        "unknown",
    )
    assert first["steps"] is None
    assert first["agent_name"] is None
    assert first["source"] == "import"
    assert second["run_id"] == "r-2"
    assert (second["stop_reason"], second["outcome"]) == ("max_steps", "limit")
    assert second["agent_name"] == "bot"
    assert second["task_success"] is None  # "yes" is not a bool


def test_quotes_and_sql_in_values_are_stored_verbatim(tmp_path: Path) -> None:
    nasty = "O'Brien said \"hi\"; DROP TABLE spans; -- \\ ' '' \n\t\u00e9\u4e2d"
    record = SpanRecord(
        "3" * 32,
        "f" * 16,
        f"invoke_agent {nasty}",
        1,
        2,
        status_code="ERROR",
        status_message=nasty,
        service=nasty,
        attributes={
            sc.RUN_ID: nasty,
            sc.TASK_TYPE: nasty,
            sc.STOP_REASON: "completed",
            sc.STOP_EXPLANATION: nasty,
            f"custom.{nasty}": nasty,
        },
        events=(EventRecord(nasty, 3, {nasty: nasty}),),
    )
    with Store(tmp_path / "q.duckdb") as store:
        store.write(SpanBatch.from_records([record]))
        (span,) = rows(store.connection, "SELECT * FROM spans")
        (run,) = rows(store.connection, "SELECT * FROM runs")
        assert store.connection.execute("SELECT count(*) FROM spans").fetchone() == (1,)
    assert span["name"] == f"invoke_agent {nasty}"
    assert span["status_message"] == span["service"] == span["run_id"] == nasty
    assert json.loads(span["attributes"]) == {
        sc.STOP_EXPLANATION: nasty,
        f"custom.{nasty}": nasty,
    }
    assert json.loads(span["events"]) == [
        {"name": nasty, "time_ns": 3, "attributes": {nasty: nasty}}
    ]
    assert run["run_id"] == run["task_type"] == run["explanation"] == nasty
    assert run["agent_name"] == nasty
    assert (run["stop_reason"], run["outcome"]) == ("completed", "success")


# --- the decoded-dict path and the SDK conversion ------------------------------------------------


def test_write_dicts_matches_the_sdk_path(
    tmp_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    tp, memory = provider
    emit_run(tp)
    records = records_from_spans(memory.get_finished_spans())
    dicts = [
        {
            "trace_id": r.trace_id,
            "span_id": r.span_id,
            "parent_span_id": r.parent_span_id,
            "name": r.name,
            "kind": r.kind,
            "start_ns": r.start_ns,
            "end_ns": r.end_ns,
            "status_code": r.status_code,
            "status_message": r.status_message,
            "service": r.service,
            "attributes": dict(r.attributes),
            "events": [
                {"name": e.name, "time_ns": e.time_ns, "attributes": dict(e.attributes)}
                for e in r.events
            ],
        }
        for r in records
    ]
    with Store(tmp_path / "sdk.duckdb") as a, Store(tmp_path / "dict.duckdb") as b:
        a.write(SpanBatch.from_sdk_spans(memory.get_finished_spans()))
        b.write(SpanBatch.from_records([SpanRecord.from_dict(d) for d in dicts]))
        query = "SELECT * FROM spans ORDER BY span_id"
        assert rows(a.connection, query) == rows(b.connection, query)
        query = "SELECT * FROM runs ORDER BY run_id"
        assert rows(a.connection, query) == rows(b.connection, query)


def test_from_dict_names_what_is_missing() -> None:
    with pytest.raises(ValueError, match="'span_id' must be str, got None"):
        SpanRecord.from_dict({"trace_id": "1" * 32, "name": "x", "start_ns": 1})
    with pytest.raises(ValueError, match="'start_ns' must be int, got '5'"):
        SpanRecord.from_dict(
            {"trace_id": "1" * 32, "span_id": "2" * 16, "name": "x", "start_ns": "5"}
        )
    record = SpanRecord.from_dict(
        {"trace_id": "1" * 32, "span_id": "2" * 16, "name": "x", "start_ns": 5}
    )
    assert (record.end_ns, record.kind, record.status_code, record.events) == (
        5,
        "INTERNAL",
        "UNSET",
        (),
    )


def test_ill_typed_record_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    good = SpanRecord("1" * 32, "2" * 16, "ok", 1, 2)
    bad = SpanRecord("1" * 32, "3" * 16, "bad", "soon", 2)  # type: ignore[arg-type]
    with Store(tmp_path / "v.duckdb") as store:
        with pytest.raises(ValueError, match=r"'3333333333333333' has a missing or ill-typed"):
            store.write(SpanBatch.from_records([good, bad]))
        assert store.connection.execute("SELECT count(*) FROM spans").fetchone() == (0,)


class _PublicOnly:
    """A span exposing only the SDK's public ReadableSpan properties."""

    def __init__(self, span: ReadableSpan) -> None:
        self._span = span

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._span, name)


def test_fast_conversion_equals_the_public_one(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, memory = provider
    emit_run(tp)
    spans = memory.get_finished_spans()
    fast = records_from_spans(spans)
    slow = records_from_spans([_PublicOnly(s) for s in spans])  # type: ignore[misc]
    assert [r.attributes for r in fast] == [dict(r.attributes) for r in slow]
    assert fast == slow
    assert record_from_span(spans[0]) == fast[0]
    # The fast path really is taken for SDK spans: it shares the finished span's own dict.
    assert fast[0].attributes is spans[0]._attributes._dict  # type: ignore[attr-defined]
    assert slow[0].attributes is not spans[0]._attributes._dict  # type: ignore[attr-defined]


def test_foreign_spans_without_loopwatch_attributes(tmp_path: Path) -> None:
    plain = [SpanRecord("4" * 32, f"{i:016x}", "GET /items", 1, 2) for i in range(3)]
    http = SpanRecord("4" * 32, "f" * 16, "GET /items", 1, 2, attributes={"http.status_code": 200})
    with Store(tmp_path / "foreign.duckdb") as store:
        assert store.write(SpanBatch.from_records(plain)) == 3
        assert store.write(SpanBatch.from_records([http])) == 1
        got = store.connection.execute(
            "SELECT attributes, events, run_id, operation FROM spans ORDER BY span_id"
        ).fetchall()
        assert got == [("{}", "[]", None, None)] * 3 + [
            ('{"http.status_code":200}', "[]", None, None)
        ]
        assert store.connection.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def _v1_store(path: Path) -> list[tuple[Any, ...]]:
    """A store as schema version 1 left it (no replay or shadow columns in ``runs``), holding
    an imported run with replay attributes, a live run with shadow ones and a plain run; returns
    what the new columns must hold after the upgrade."""
    from loopwatch.queries.store.migrations import V2_RUN_COLUMNS

    replayed = _run_record("run-imp", 10)
    replayed.attributes.update(
        {
            "loopwatch.replay.stop_reason": "repeated_tool_call",
            "loopwatch.replay.step": 3,
            "loopwatch.replay.saved.tokens": 1200.0,
            "loopwatch.replay.saved.model_calls": 2.0,
            "loopwatch.replay.peak.repeated_tool_call": 4,
            "loopwatch.replay.peak.no_progress": 2,
        }
    )
    shadowed = _run_record("run-live", 20)
    shadowed.attributes.update(
        {
            "loopwatch.shadow.stop_reason": "max_steps",
            "loopwatch.shadow.limits.version": "abc123",
            "loopwatch.shadow.step": 5,
            "loopwatch.shadow.saved.cost_usd": 0.25,
        }
    )
    columns = ", ".join(c for c, _, _ in V2_RUN_COLUMNS)
    with Store(path) as store:
        store.write(SpanBatch.from_records([replayed, shadowed, _run_record("run-plain", 30)]))
        expected = store.connection.execute(
            f"SELECT run_id, {columns} FROM runs ORDER BY run_id"
        ).fetchall()
    con = duckdb.connect(str(path))
    for column, _, _ in V2_RUN_COLUMNS:
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    con.execute("UPDATE schema_version SET version = 1")
    con.close()
    return expected


def test_a_version_1_store_is_upgraded_when_opened_for_writing(tmp_path: Path) -> None:
    from loopwatch.queries.store.migrations import V2_RUN_COLUMNS

    path = tmp_path / "v1.duckdb"
    expected = _v1_store(path)
    names = ["run_id", *(c for c, _, _ in V2_RUN_COLUMNS)]
    imported, live, plain = (dict(zip(names, row, strict=True)) for row in expected)
    assert (imported["replay_decision"], imported["peak_repeated_tool_call"]) == (
        "repeated_tool_call",
        4,
    )
    assert (live["shadow_decision"], live["shadow_saved_cost_usd"]) == ("max_steps", 0.25)
    assert set(plain.values()) == {"run-plain", None}
    with pytest.raises(SchemaVersionError, match=rf"loopwatch upgrade {path}"):
        connect_read_only(path)
    with Store(path) as store:
        columns = ", ".join(c for c, _, _ in V2_RUN_COLUMNS)
        got = store.connection.execute(f"SELECT run_id, {columns} FROM runs ORDER BY run_id")
        assert got.fetchall() == expected
        version = store.connection.execute("SELECT version FROM schema_version").fetchall()
        assert version == [(SCHEMA_VERSION,)]
        describe = "SELECT column_name, column_type FROM (DESCRIBE runs) ORDER BY column_name"
        upgraded = store.connection.execute(describe).fetchall()
    with Store(tmp_path / "new.duckdb") as new:
        assert upgraded == new.connection.execute(describe).fetchall()
    with Store(path) as store:
        store.write(SpanBatch.from_records([_run_record("run-new", 40)]))
    con = connect_read_only(path)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (4,)
    finally:
        con.close()


def test_loopwatch_upgrade_upgrades_a_version_1_store(tmp_path: Path, capsys: Any) -> None:
    from loopwatch.dashboard.cli import main

    path = tmp_path / "v1.duckdb"
    _v1_store(path)
    assert main(["upgrade", str(path), "--memory-mb", "64"]) == 0
    assert f"{path} has store schema version {SCHEMA_VERSION}." in capsys.readouterr().out
    connect_read_only(path).close()
    assert main(["upgrade", str(tmp_path / "none.duckdb")]) == 2
    assert "does not exist" in capsys.readouterr().err
