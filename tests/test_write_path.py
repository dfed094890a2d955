"""One write path into the store: one batch type, one schema, one ``Store.write``."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path
from typing import Any

import duckdb
import pytest
from loopwatch.instrumentation import semconv as sc
from loopwatch.queries.ingest.otlp import decode_request
from loopwatch.queries.ingest.synthetic import SyntheticRun, SyntheticSpan
from loopwatch.queries.store.columns import RUNS_SCHEMA, SPANS_SCHEMA, SpanBatch, SpanRecord
from loopwatch.queries.store.database import Store, StoreError
from loopwatch.queries.store.spend_peaks import PEAK_COLUMNS
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("instrumentation", "queries", "dashboard")


def test_no_module_imports_another_modules_private_names() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                ours = isinstance(node, ast.ImportFrom) and (
                    node.level > 0 or (node.module or "").startswith("loopwatch")
                )
                if ours:
                    assert isinstance(node, ast.ImportFrom)
                    for alias in node.names:
                        name = alias.name
                        if name.startswith("_") and not name.startswith("__"):
                            offenders.append(f"{path.relative_to(ROOT)}: {node.module}.{name}")
    assert offenders == []


def test_the_arrow_schemas_are_the_tables_columns(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:

        def columns(table: str) -> list[str]:
            rows = store.connection.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position",
                [table],
            ).fetchall()
            return [r[0] for r in rows]

        assert sorted(columns("spans")) == sorted(SPANS_SCHEMA.names)
        # started_at and the peak spend rate are the store's own (derived, filled later)
        derived = ["started_at", *PEAK_COLUMNS]
        assert sorted(columns("runs")) == sorted([*RUNS_SCHEMA.names, *derived])
    # The synthetic rows are the store's columns, not a copy with its own types.
    assert {f.name for f in fields(SyntheticSpan)} <= set(SPANS_SCHEMA.names)
    assert {f.name for f in fields(SyntheticRun)} - {"started_at"} <= set(RUNS_SCHEMA.names)


def _sdk_spans() -> list:  # type: ignore[type-arg]
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "s"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span(
        "invoke_agent a",
        attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.RUN_ID: "r1"},
    ):
        pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_every_front_end_builds_the_same_batch_shape() -> None:
    spans = _sdk_spans()
    body = bytes(encode_spans(spans).SerializeToString())
    batches = {
        "sdk": SpanBatch.from_sdk_spans(spans),
        "records": SpanBatch.from_records([SpanRecord("a" * 32, "b" * 16, "invoke_agent x", 1, 2)]),
        "otlp": SpanBatch.from_columns(decode_request(body, "application/x-protobuf").columns),
        "rows": SpanBatch.from_rows(
            spans=[
                {
                    "trace_id": "a" * 32,
                    "span_id": "c" * 16,
                    "name": "n",
                    "kind": "INTERNAL",
                    "start_ns": 1,
                    "end_ns": 2,
                    "status_code": "UNSET",
                }
            ],
            runs=[
                {
                    "run_id": "r",
                    "task_type": "t",
                    "start_ns": 1,
                    "end_ns": 2,
                    "stop_reason": "completed",
                    "outcome": "success",
                    "source": "synthetic",
                }
            ],
        ),
    }
    for name, batch in batches.items():
        assert batch.spans is not None and batch.spans.schema.equals(SPANS_SCHEMA), name
        assert batch.runs is not None and batch.runs.schema.equals(RUNS_SCHEMA), name
        assert batch.count == 1


def test_rows_with_unknown_columns_or_missing_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="no column 'colour'"):
        SpanBatch.from_rows(runs=[{"run_id": "r", "colour": "red"}])
    with pytest.raises(ValueError, match="lacks 'task_type'"):
        SpanBatch.from_rows(runs=[{"run_id": "r"}])


def test_concatenated_batches_commit_together_and_the_last_run_row_wins(tmp_path: Path) -> None:
    first = SpanBatch.from_records(
        [SpanRecord("a" * 32, "1" * 16, "invoke_agent x", 1, 2, attributes={sc.RUN_ID: "r"})]
    )
    second = SpanBatch.from_records(
        [
            SpanRecord(
                "a" * 32,
                "2" * 16,
                "invoke_agent x",
                1,
                3,
                attributes={sc.RUN_ID: "r", sc.STOP_REASON: "completed"},
            )
        ]
    )
    with Store(tmp_path / "c.duckdb") as store:
        assert store.write(SpanBatch.concat([first, second])) == 2
        rows = store.connection.execute("SELECT run_id, stop_reason, end_ns FROM runs").fetchall()
        assert rows == [("r", "completed", 3)]


def test_a_store_over_a_borrowed_connection_leaves_it_open() -> None:
    con = duckdb.connect()
    store = Store.from_connection(con)
    store.write(SpanBatch.from_records([SpanRecord("a" * 32, "b" * 16, "x", 1, 2)]))
    store.close()
    assert con.execute("SELECT count(*) FROM spans").fetchone() == (1,)
    con.close()


def test_delivery_keys_are_stored_with_their_batch_and_forgotten_after_the_window(
    tmp_path: Path,
) -> None:
    batch = SpanBatch.from_records(
        [SpanRecord("a" * 32, "b" * 16, "x", 1, 2)], deliveries=("k1", "k2")
    )
    with Store(tmp_path / "d.duckdb") as store:
        store.write(batch)
        assert sorted(store.deliveries_since(0)) == ["k1", "k2"]
        with pytest.raises(StoreError, match=r"^writing 1 spans"):
            store.write(batch)  # the same key twice is refused whole, spans included
        assert store.connection.execute("SELECT count(*) FROM spans").fetchone() == (1,)
        store.forget_deliveries(2**62)
        assert store.deliveries_since(0) == []


def test_a_store_caps_duckdb_memory_when_asked(tmp_path: Path) -> None:
    with Store(tmp_path / "m.duckdb", memory_mb=300) as store:
        (limit,) = store.connection.execute("SELECT current_setting('memory_limit')").fetchone()
    assert limit in ("300.0 MiB", "286.1 MiB", "300.0 MB"), limit
    with pytest.raises(StoreError, match="cannot set memory_mb"):
        Store(tmp_path / "n.duckdb", memory_mb=-5)


def test_plain_genai_spans_get_what_can_be_known() -> None:
    records = [
        SpanRecord(
            "a" * 32,
            "1" * 16,
            "invoke_agent helper",
            1_000_000_000,
            3_500_000_000,
            attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT},
        ),
        SpanRecord(
            "a" * 32,
            "2" * 16,
            "execute_tool search",
            1,
            2,
            status_code="ERROR",
            attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL, sc.GEN_AI_TOOL_NAME: "s"},
        ),
        SpanRecord(
            "a" * 32,
            "3" * 16,
            "execute_tool lookup",
            1,
            2,
            attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL, sc.GEN_AI_TOOL_NAME: "l"},
        ),
        # loopwatch's own tool span keeps its attributes; a span that is not GenAI keeps NULLs.
        SpanRecord(
            "a" * 32,
            "4" * 16,
            "execute_tool mine",
            1,
            2,
            status_code="ERROR",
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                sc.TASK_TYPE: "triage",
                sc.TOOL_STATUS: "ok",
            },
        ),
        SpanRecord("a" * 32, "5" * 16, "GET /health", 1, 2),
    ]
    batch = SpanBatch.from_records(records)
    assert batch.spans is not None and batch.runs is not None
    rows = {r["span_id"][0]: r for r in batch.spans.to_pylist()}
    assert (rows["1"]["task_type"], rows["1"]["tool_status"]) == ("unknown", None)
    assert (rows["2"]["task_type"], rows["2"]["tool_status"]) == ("unknown", "error")
    assert (rows["3"]["task_type"], rows["3"]["tool_status"]) == ("unknown", "ok")
    assert (rows["4"]["task_type"], rows["4"]["tool_status"]) == ("triage", "ok")
    assert (rows["5"]["task_type"], rows["5"]["tool_status"]) == (None, None)
    (run,) = batch.runs.to_pylist()
    assert run["wall_s"] == 2.5 and run["stop_reason"] == "unknown"


@pytest.mark.parametrize(
    ("operations", "task_types", "statuses", "lacks"),
    [
        ([sc.OP_INVOKE_AGENT, sc.OP_CHAT, sc.OP_EXECUTE_TOOL], ["t", "t", "t"], [None, None, "ok"],
         False),  # loopwatch's own spans, an import's: nothing to fill
        ([sc.OP_CHAT, sc.OP_EXECUTE_TOOL], ["t", "t"], [None, None], True),  # a tool's status
        ([sc.OP_CHAT, "other"], [None, None], [None, None], True),  # a GenAI span's task type
        (["other", None], [None, 3], [None, None], False),  # not GenAI: left as it is
        ([sc.OP_CHAT], [3], [None], True),  # a task type its column refuses is none
        ([sc.OP_EXECUTE_TOOL], ["t"], [True], True),  # as is a status of another type
    ],
)  # fmt: skip
def test_a_batch_lacking_nothing_skips_the_fill(
    operations: list[Any], task_types: list[Any], statuses: list[Any], lacks: bool
) -> None:
    """The test that spares a batch the fill (and importing pyarrow.compute: docs/import.md)
    says a batch lacks something exactly when the fill has something to fill."""
    from loopwatch.queries.store.plaingenai import lacks_genai_fields

    assert lacks_genai_fields(operations, task_types, statuses) is lacks
