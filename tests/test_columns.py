"""The column-wise conversion of SDK spans equals the record path, whatever the attributes."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopwatch.instrumentation import semconv as sc
from loopwatch.queries.store.columns import SpanBatch, records_from_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from tests.test_store import _PublicOnly


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _provider(service: str = "svc") -> tuple[TracerProvider, _Collect]:
    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    collect = _Collect()
    tp.add_span_processor(collect)
    return tp, collect


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("span_id", "ascending")])


def _same_as_record_path(spans: list[ReadableSpan]) -> None:
    """The column path gives what the public properties give, through records."""
    fast = SpanBatch.from_sdk_spans(spans)
    table = fast.spans
    # The reference: records made through the SDK's public properties only.
    records = records_from_spans([_PublicOnly(s) for s in spans])  # type: ignore[misc]
    slow = SpanBatch.from_records(records)
    expected = slow.spans
    assert fast.count == len(records)
    assert table is not None and expected is not None
    assert _sorted(table).equals(_sorted(expected)), (table.to_pylist(), expected.to_pylist())
    fast_runs, slow_runs = fast.runs, slow.runs
    assert (fast_runs is None) == (slow_runs is None)
    if fast_runs is not None and slow_runs is not None:
        assert fast_runs.equals(slow_runs)


# OTel attribute values: primitives and homogeneous sequences of them. No NaN: Arrow's equals
# compares NaN unequal to itself (NaN has its own test below).
_int = st.integers(min_value=-(2**70), max_value=2**70)
_float = st.floats(allow_nan=False)
_primitive = st.one_of(st.text(max_size=8), st.booleans(), _int, _float)
_value = st.one_of(
    _primitive,
    st.lists(st.text(max_size=4), max_size=3).map(tuple),
    st.lists(st.booleans(), max_size=3).map(tuple),
    st.lists(_int, max_size=3).map(tuple),
)
# Keys that fill typed columns (each with values of any type) and keys that go to JSON.
_keys = st.sampled_from(
    [
        sc.RUN_ID,
        sc.TASK_TYPE,
        sc.STEP_INDEX,
        sc.GEN_AI_OPERATION_NAME,
        sc.GEN_AI_USAGE_INPUT_TOKENS,
        sc.COST_USD,
        sc.budget_used("steps"),
        sc.TOOL_RETRIES,
        sc.STOP_REASON,
        "custom.a",
        "custom.b",
    ]
)
_span = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["invoke_agent a", "step 1", "execute_tool t", "chat m"]),
        "attributes": st.dictionaries(_keys, _value, max_size=6),
        "kind": st.sampled_from(list(SpanKind)),
        "error": st.booleans(),
        "event": st.booleans(),
        "child": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_span, min_size=1, max_size=12))
def test_sdk_columns_equal_the_record_path(specs: list[dict[str, Any]]) -> None:
    tp, collect = _provider()
    tracer = tp.get_tracer("t")
    parent = tracer.start_span("invoke_agent root")
    for spec in specs:
        context = None
        if spec["child"]:
            from opentelemetry.trace import set_span_in_context

            context = set_span_in_context(parent)
        span = tracer.start_span(spec["name"], context=context, kind=spec["kind"])
        span.set_attributes(spec["attributes"])
        if spec["error"]:
            span.set_status(Status(StatusCode.ERROR, "it broke"))
        if spec["event"]:
            span.add_event("loopwatch.retry", {"attempt": 2, "why": "timeout"})
        span.end()
    parent.end()
    _same_as_record_path(collect.spans)


def test_equal_values_of_other_types_keep_their_own_json() -> None:
    # 1 == 1.0 == True and 0.0 == -0.0: a cache of encoded values must not mix them up.
    batches: list[list[Any]] = [
        [1, True, 1.0, 0.0, -0.0, 0, False, (1, 0), (True, False), "1"],
        [(1, 0), (True, False), (1, 0)],  # sequences alone: (1, 0) == (True, False) too
        [1, 1, 2],  # safe to cache: one type
        ["a", "a", "b"],
    ]
    for values in batches:
        tp, collect = _provider()
        for value in values:
            with tp.get_tracer("t").start_as_current_span("step 1") as span:
                span.set_attribute("custom.x", value)
        table = SpanBatch.from_sdk_spans(collect.spans).spans
        assert table is not None
        texts = sorted(table.column("attributes").to_pylist())
        assert texts == sorted(json.dumps({"custom.x": v}, separators=(",", ":")) for v in values)
        _same_as_record_path(collect.spans)


def test_nan_and_huge_numbers_go_to_json() -> None:
    tp, collect = _provider()
    tracer = tp.get_tracer("t")
    with tracer.start_as_current_span("step 1") as span:
        span.set_attributes({sc.COST_USD: float("nan"), sc.STEP_INDEX: 2**40, "custom.n": 2**70})
    table = SpanBatch.from_sdk_spans(collect.spans).spans
    assert table is not None
    row = table.to_pylist()[0]
    assert row["step"] is None
    assert row["cost_usd"] != row["cost_usd"]  # NaN is a float: it stays in its column
    assert json.loads(row["attributes"]) == {sc.STEP_INDEX: 2**40, "custom.n": 2**70}


def test_spans_without_context_are_skipped_and_foreign_spans_fall_back() -> None:
    tp, collect = _provider()
    tracer = tp.get_tracer("t")
    with tracer.start_as_current_span("step 1") as span:
        span.set_attribute(sc.STEP_INDEX, 1)
    sdk_span = collect.spans[0]
    # A ReadableSpan made by hand keeps a plain dict of attributes and a tuple of events.
    plain = ReadableSpan(
        name="invoke_agent hand",
        context=SpanContext(0xABC, 0xDEF, False),
        attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.RUN_ID: "hand"},
        resource=Resource.create({"service.name": "other"}),
        start_time=5,
        end_time=None,
    )
    no_context = ReadableSpan(name="lost", context=None)
    spans = [sdk_span, plain, no_context]
    batch = SpanBatch.from_sdk_spans(spans)
    table, runs = batch.spans, batch.runs
    assert batch.count == 2 and table is not None and runs is not None
    assert sorted(table.column("name").to_pylist()) == ["invoke_agent hand", "step 1"]
    assert runs.column("run_id").to_pylist() == ["hand"]
    rows = {r["name"]: r for r in table.to_pylist()}
    assert rows["invoke_agent hand"]["service"] == "other"
    assert rows["invoke_agent hand"]["end_ns"] == 5  # not ended: its start
    assert rows["invoke_agent hand"]["span_id"] == f"{0xDEF:016x}"
    _same_as_record_path(spans)


def test_objects_without_the_sdk_layout_use_the_public_properties() -> None:
    tp, collect = _provider()
    with tp.get_tracer("t").start_as_current_span("step 1") as span:
        span.set_attribute(sc.STEP_INDEX, 3)
    wrapped = [_PublicOnly(s) for s in collect.spans]
    batch = SpanBatch.from_sdk_spans(wrapped)  # type: ignore[arg-type]
    assert batch.count == 1 and batch.spans is not None
    assert batch.spans.column("step").to_pylist() == [3]


def test_ints_beyond_double_precision_round_instead_of_failing_the_batch(tmp_path: Any) -> None:
    from loopwatch.queries.store.database import Store

    tp, collect = _provider()
    with tp.get_tracer("t").start_as_current_span("invoke_agent a") as span:
        span.set_attributes(
            {
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.RUN_ID: "big",
                sc.GEN_AI_USAGE_INPUT_TOKENS: 2**53 + 1,
                sc.budget_used("tokens"): 2**60 + 1,
                sc.COST_USD: 2**62 + 1,
            }
        )
    with Store(tmp_path / "big.duckdb") as store:
        assert store.write(SpanBatch.from_sdk_spans(collect.spans)) == 1
        assert store.write(SpanBatch.from_records(records_from_spans(collect.spans))) == 1
        span_row = store.connection.execute(
            "SELECT input_tokens, used_tokens, cost_usd FROM spans LIMIT 1"
        ).fetchone()
        run_row = store.connection.execute("SELECT tokens, cost_usd FROM runs").fetchone()
    assert span_row == (2**53 + 1, float(2**60), float(2**62))
    assert run_row == (float(2**60), float(2**62))  # tokens: the budget used, as recorded
