"""Runs rebuilt from other instrumentations' spans (docs/foreign.md): a real store, the real
OTLP decoder, the assembler that live mode runs, and a real ``serve`` for split delivery."""

from __future__ import annotations

import pickle
import random
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("duckdb")

from foreign_spans import body, genai_trace, span
from loopwatch.queries.ingest.foreign import ForeignOptions, TraceAssembler, views_of
from loopwatch.queries.ingest.otlp import decode_request
from loopwatch.queries.store.columns import SpanBatch
from loopwatch.queries.store.database import Store
from serving import ServeProcess, post_traces, store_rows

JSON = "application/json"
RUN_COLUMNS = (
    "run_id, task_type, agent_name, stop_reason, outcome, source, steps, model_calls, "
    "tool_calls, tokens, input_tokens, output_tokens, replay_decision, replay_step, "
    "max_same_call, peak_repeated_tool_call, limit_name, explanation"
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def ingest(store: Store, assembler: TraceAssembler, request: bytes) -> None:
    """What serve's ingest does with one request: commit, then hand the views over."""
    decoded = decode_request(request, JSON)
    store.write(SpanBatch.from_columns(decoded.columns))
    assembler.add(views_of(decoded.columns, assembler.options.task_type_keys))


def build(store: Store, assembler: TraceAssembler, everything: bool = False) -> None:
    tables = assembler.tables(everything=everything)
    if tables is not None:
        store.write_derived(*tables)


def runs(store: Store) -> list[dict[str, Any]]:
    cur = store.cursor()
    rows = cur.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY run_id").fetchall()
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in rows]


def test_genai_trace_becomes_a_run_with_steps_tools_tokens_and_a_derived_end(
    tmp_path: Path,
) -> None:
    clock = Clock()
    assembler = TraceAssembler(ForeignOptions(grace_s=5.0), clock)
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(genai_trace(1)))
        before = runs(store)
        assert [r["stop_reason"] for r in before] == ["unknown"]  # the raw row, not final yet
        clock.now = 4.0
        build(store, assembler)
        assert runs(store)[0]["source"] == "otel"  # still in its grace period
        clock.now = 5.0
        build(store, assembler)
        (run,) = runs(store)
        assert run["source"] == "foreign"
        assert run["run_id"] == f"{1 << 16 | 1:016x}"
        assert (run["task_type"], run["agent_name"]) == ("refunds", "refunds")
        assert (run["steps"], run["model_calls"], run["tool_calls"]) == (4, 4, 3)
        assert (run["input_tokens"], run["output_tokens"], run["tokens"]) == (450, 90, 540)
        assert run["stop_reason"] == "completed" and run["outcome"] == "success"
        assert run["explanation"].startswith("Derived from the last model call")
        # the guard and detector objects of import, replayed: the second same call with the
        # same result in a row is repeated_action's stop; the peaks hold the whole run
        assert run["replay_decision"] == "repeated_action"
        assert run["replay_step"] == 2
        assert run["max_same_call"] == 3 == run["peak_repeated_tool_call"]
        tools = (
            store.cursor()
            .execute(
                "SELECT run_id, task_type, step, tool_status, tool_fingerprint IS NOT NULL, "
                "result_fingerprint IS NOT NULL FROM spans WHERE operation = 'execute_tool' "
                "ORDER BY step"
            )
            .fetchall()
        )
        assert tools == [(f"{1 << 16 | 1:016x}", "refunds", k, "ok", True, True) for k in (1, 2, 3)]


@pytest.mark.parametrize(
    ("exception", "reason", "limit"),
    [
        (("agents.exceptions.MaxTurnsExceeded", "Max turns (3) exceeded"), "max_steps", "steps"),
        (
            (
                "GraphRecursionError",
                "Recursion limit of 25 reached without hitting a stop condition",
            ),
            "max_steps",
            "steps",
        ),
        (
            (
                "pydantic_ai.exceptions.UsageLimitExceeded",
                "The next request would exceed the request_limit of 3",
            ),
            "max_model_calls",
            "model_calls",
        ),
        (
            ("pydantic_ai.exceptions.UsageLimitExceeded", "Exceeded the total_tokens_limit of 100"),
            "token_budget",
            "tokens",
        ),
        (("smolagents.utils.AgentMaxStepsError", "Reached max steps."), "max_steps", "steps"),
        (("ClaudeSDKError", "result subtype error_max_budget_usd"), "cost_budget", "cost_usd"),
        (("InputGuardrailTripwireTriggered", "guardrail tripped"), "guardrail", None),
        (("ValueError", "boom"), "error", None),
    ],
)
def test_framework_exceptions_give_their_stop_reason(
    tmp_path: Path, exception: tuple[str, str], reason: str, limit: str | None
) -> None:
    assembler = TraceAssembler(ForeignOptions(grace_s=0.0), Clock())
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(genai_trace(2, repeats=1, exception=exception)))
        build(store, assembler)
        (run,) = runs(store)
    assert (run["stop_reason"], run["limit_name"]) == (reason, limit)
    assert exception[1][:20] in run["explanation"]


def test_finish_reasons_and_unknown_ends(tmp_path: Path) -> None:
    def trace(t: int, finish: str | None, tool_last: bool = False) -> list[dict[str, Any]]:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
        if finish:
            attrs["gen_ai.response.finish_reasons"] = [finish]
        spans = [
            span(t, 1, None, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"}),
            span(t, 2, 1, "chat m", 10, 20, attrs),
        ]
        if tool_last:
            spans.append(
                span(
                    t,
                    3,
                    1,
                    "execute_tool x",
                    30,
                    40,
                    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x"},
                )
            )
        return spans

    assembler = TraceAssembler(ForeignOptions(grace_s=0.0), Clock())
    with Store(tmp_path / "s.duckdb") as store:
        for t, finish, tool_last in (
            (11, "length", False),
            (12, "content_filter", False),
            (13, None, True),
            (14, "weird", False),
            (15, None, False),
        ):
            ingest(store, assembler, body(trace(t, finish, tool_last)))
        build(store, assembler)
        got = [r["stop_reason"] for r in runs(store)]
    assert got == ["output_truncated", "refusal", "unknown", "unknown", "completed"]


def _shuffled_requests(seed: int) -> list[bytes]:
    spans = genai_trace(3) + genai_trace(4, repeats=2)
    rng = random.Random(seed)
    rng.shuffle(spans)
    cuts = sorted(rng.sample(range(1, len(spans)), 3))
    return [body(spans[a:b]) for a, b in zip([0, *cuts], [*cuts, len(spans)], strict=True)]


def test_split_and_out_of_order_delivery_gives_the_same_runs(tmp_path: Path) -> None:
    results = []
    for i, requests in enumerate(
        [
            [body(genai_trace(3) + genai_trace(4, repeats=2))],
            _shuffled_requests(1),
            _shuffled_requests(2),
        ]
    ):
        clock = Clock()
        assembler = TraceAssembler(ForeignOptions(grace_s=5.0), clock)
        with Store(tmp_path / f"{i}.duckdb") as store:
            for request in requests:
                ingest(store, assembler, request)
                clock.now += 1.0
                build(store, assembler)  # nothing is final while spans keep coming
            assert {r["source"] for r in runs(store)} <= {"otel"}
            clock.now += 5.0
            build(store, assembler)
            results.append(runs(store))
    assert results[0] == results[1] == results[2]
    assert [r["source"] for r in results[0]] == ["foreign", "foreign"]


def test_a_late_span_rebuilds_the_run(tmp_path: Path) -> None:
    clock = Clock()
    assembler = TraceAssembler(ForeignOptions(grace_s=1.0), clock)
    spans = genai_trace(5)
    late = spans.pop(-1)  # the final answer's model call arrives after the trace was built
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(spans))
        clock.now = 2.0
        build(store, assembler)
        assert runs(store)[0]["stop_reason"] == "unknown"  # ended after tool calls
        ingest(store, assembler, body([late]))
        clock.now = 4.0
        build(store, assembler)
        (run,) = runs(store)
        assert (run["stop_reason"], run["model_calls"]) == ("completed", 4)
        assert assembler.counts.rebuilt == 1


def test_built_traces_are_not_due_again_and_a_quiet_trace_goes_before_a_busy_one(
    tmp_path: Path,
) -> None:
    clock = Clock()
    assembler = TraceAssembler(ForeignOptions(grace_s=1.0), clock)
    quiet, busy = genai_trace(11), genai_trace(12)
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(quiet + busy[:2]))
        clock.now = 2.0
        ingest(store, assembler, body(busy[2:]))  # the busy trace is still arriving
        build(store, assembler)
        assert assembler.counts.traces_built == 1  # the quiet one only
        clock.now = 2.5
        build(store, assembler)
        assert assembler.counts.traces_built == 1  # a built trace is not due again
        clock.now = 3.5
        build(store, assembler)
        clock.now = 60.0
        build(store, assembler)
        assert (assembler.counts.traces_built, assembler.counts.rebuilt) == (2, 0)
        assert [r["source"] for r in runs(store)] == ["foreign", "foreign"]


def test_views_pickle_whole_as_decoder_processes_send_them() -> None:
    decoded = decode_request(body(genai_trace(13)), JSON)
    views = views_of(decoded.columns, ("service.name",))
    assert any(v.call_fp and v.result_fp for v in views)  # tool views carry fingerprints
    assert pickle.loads(pickle.dumps(views)) == views


def test_task_type_from_a_configured_attribute_or_the_service(tmp_path: Path) -> None:
    assembler = TraceAssembler(
        ForeignOptions(grace_s=0.0, task_type_keys=("app.task", "service.name")), Clock()
    )
    tagged = genai_trace(6, repeats=1)
    tagged[0]["attributes"].append({"key": "app.task", "value": {"stringValue": "billing"}})
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(tagged))
        ingest(store, assembler, body(genai_trace(7, repeats=1), service="triage-svc"))
        build(store, assembler)
        assert [r["task_type"] for r in runs(store)] == ["billing", "triage-svc"]


def test_serve_builds_runs_from_split_out_of_order_requests(tmp_path: Path) -> None:
    db = tmp_path / "live.duckdb"
    server = ServeProcess(db, "--foreign-grace-s", "0.3")
    try:
        for request in _shuffled_requests(3):
            status, _, answer = post_traces(server.otlp, request, JSON)
            assert status == 200, answer
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if server.health()["runs"] == 2:
                break
            time.sleep(0.1)
        time.sleep(1.5)  # past the grace period: the writer builds them while idle
    finally:
        assert server.stop() == 0
    rows = store_rows(db, "SELECT source, stop_reason, replay_decision FROM runs ORDER BY run_id")
    assert rows == [
        ("foreign", "completed", "repeated_action"),
        ("foreign", "completed", "repeated_action"),
    ]


def test_loops_and_history_pages_cover_foreign_runs(tmp_path: Path) -> None:
    from loopwatch.queries.analysis.gateway import run_query
    from loopwatch.queries.analysis.history import detector_thresholds

    assembler = TraceAssembler(ForeignOptions(grace_s=0.0), Clock())
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(genai_trace(8)))
        build(store, assembler)
        con = store.cursor()
        repeats = run_query(con, "top_call_fingerprints", {}).records()
        steps = run_query(con, "run_steps", {"run_id": f"{8 << 16 | 1:016x}"}).records()
        detectors = detector_thresholds(con)
    # Loops: the call repeated with the same result, three times in one run
    assert [(r["task_type"], r["tool_name"], r["max_in_one_run"]) for r in repeats] == [
        ("refunds", "lookup_order", 3)
    ]
    # one run's steps: the run span, 4 model calls and 3 tool calls, each with its step
    assert [(r["operation"], r["step"]) for r in steps] == [
        ("invoke_agent", None), ("chat", 1), ("execute_tool", 1), ("chat", 2),
        ("execute_tool", 2), ("chat", 3), ("execute_tool", 3), ("chat", 4),
    ]  # fmt: skip
    # History's detector table: the rebuilt run counts as a successful one (loop completed)
    by_detector = {d.detector: d for d in detectors if d.task_type == "refunds"}
    assert set(by_detector) >= {"repeated_tool_call", "repeated_action"}


def test_different_calls_with_the_same_result_are_not_one_repeated_call(tmp_path: Path) -> None:
    """The detectors compare fingerprints of the arguments: calls that differ only in a hex id
    or a number that is not volatile stay different calls."""
    spans = genai_trace(9)
    for k, s in enumerate(x for x in spans if x["name"].startswith("execute_tool")):
        for a in s["attributes"]:
            if a["key"] == "gen_ai.tool.call.arguments":
                a["value"] = {"stringValue": f'{{"order": "A-{k}"}}'}
    assembler = TraceAssembler(ForeignOptions(grace_s=0.0), Clock())
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(spans))
        build(store, assembler)
        (run,) = runs(store)
    assert run["peak_repeated_tool_call"] == 1
    assert run["replay_decision"] == "finish"


def test_a_forgotten_trace_keeps_its_run_and_counts_late_spans(tmp_path: Path) -> None:
    clock = Clock()
    assembler = TraceAssembler(ForeignOptions(grace_s=1.0, keep_s=10.0), clock)
    spans = genai_trace(10)
    late = spans.pop(-1)
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, assembler, body(spans))
        clock.now = 2.0
        build(store, assembler)
        assert assembler.held == len(spans)
        clock.now = 13.0
        build(store, assembler)  # kept 10 s after it was built, then forgotten
        assert assembler.held == 0
        ingest(store, assembler, body([late]))
        clock.now = 20.0
        build(store, assembler)
        (run,) = runs(store)
        assert run["stop_reason"] == "unknown"  # as built; the late span did not rebuild it
        assert assembler.counts.late_dropped == 1


def test_report_covers_foreign_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from loopwatch.dashboard.cli import main

    db = tmp_path / "r.duckdb"
    assembler = TraceAssembler(ForeignOptions(grace_s=0.0), Clock())
    with Store(db) as store:
        ingest(store, assembler, body(genai_trace(11)))
        build(store, assembler)
    assert main(["report", "--db", str(db), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["source"], r["runs"]) for r in report["sources"]] == [("foreign", 1)]
    assert report["imported"] and report["imported"][0]["task_type"] == "refunds"
    assert {d["detector"] for d in report["detectors"]} >= {"repeated_tool_call"}
