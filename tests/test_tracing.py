"""OTel spans of docs/telemetry.md, from an observer driven by hand through whole runs (real
SDK)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.drops import dropped, reset_drops
from loopwatch.instrumentation.runtime.guard import LoopGuard
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import arun, run
from loopwatch.instrumentation.runtime.observer import BudgetSnapshot, RunInfo, ToolRecord
from loopwatch.instrumentation.runtime.reasons import LIMIT_OF, StopReason
from loopwatch.instrumentation.runtime.retry import ToolError
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import (
    Message,
    ModelResponse,
    RunResult,
    ToolCall,
    Usage,
)
from loopwatch.instrumentation.telemetry.tracing import (
    OTelObserverFactory,
    OTelRunObserver,
    budget_attributes,
    capture_content_enabled,
    redact_content,
)
from loopwatch.instrumentation.testing import (
    CounterModel,
    FakeClock,
    FakeModel,
    ScriptedTool,
    text_response,
    tool_response,
)
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

LIMITS: dict[str, float | None] = {
    "steps": 8,
    "model_calls": None,
    "tool_calls": 20,
    "tokens": 10_000,
    "cost_usd": None,
    "wall_s": 60.0,
}


@pytest.fixture(autouse=True)
def no_context_leak() -> Iterator[None]:
    """Every run undoes the context it attached: nothing stays current after a test. (Each test
    starts from an empty context and ends restored, so one leak cannot spill into the next.)"""
    token = context_api.attach(Context())
    try:
        yield
        assert trace.get_current_span() is trace.INVALID_SPAN
    finally:
        context_api.detach(token)


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


class Budget:
    """Counts usage the way a guard would and hands out snapshots."""

    def __init__(self, limits: Mapping[str, float | None] = LIMITS) -> None:
        self.limits = dict(limits)
        self.used: dict[str, float] = dict.fromkeys(sc.BUDGETS, 0)
        self.used["wall_s"] = 0.0
        self.used["cost_usd"] = 0.0

    def snap(self) -> BudgetSnapshot:
        ratios = [
            self.used[b] / lim for b, lim in self.limits.items() if lim is not None and lim > 0
        ]
        return BudgetSnapshot(dict(self.used), dict(self.limits), max(ratios, default=0.0))


def _info(run_id: str = "run-1", task_type: str = "support", **kw: Any) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        task_type=task_type,
        agent_name=kw.pop("agent_name", "helper"),
        limits=None,  # type: ignore[arg-type]  # the observer never reads the limits object
        limits_version="v1abc",
        **kw,
    )


def _tool_response(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(
        Message("assistant", None, calls), "tool_calls", Usage(100, 20, 0.001), model="gpt-test"
    )


def _drive(
    obs: OTelRunObserver,
    budget: Budget,
    steps: list[list[tuple[ToolCall, str, str | None]]],
    final: StopReason,
    *,
    info: RunInfo | None = None,
) -> RunResult:
    """Run ``steps`` (each: tool calls with status and error code) then stop with ``final``."""
    info = info or _info()
    obs.run_started(info, budget.snap())
    for n, calls in enumerate(steps, start=1):
        budget.used["steps"] = n
        obs.step_started(n, budget.snap())
        obs.model_call_started(n, "gpt-test", budget.snap())
        budget.used["model_calls"] += 1
        budget.used["tokens"] += 120
        budget.used["cost_usd"] += 0.001
        obs.model_call_ended(_tool_response(*(c for c, _, _ in calls)), None, budget.snap())
        for call, status, code in calls:
            obs.tool_call_started(call, f"fp-{call.name}", budget.snap())
            if status == "error":
                obs.event(sc.EVENT_RETRY, {"attempt": 1, "error_code": code or ""})
            budget.used["tool_calls"] += 1
            budget.used["wall_s"] += 0.5
            obs.tool_call_ended(
                ToolRecord(
                    call=call,
                    ok=status == "ok",
                    content='{"ok": true}' if status == "ok" else json.dumps({"code": code}),
                    fingerprint=f"fp-{call.name}",
                    result_fingerprint=f"rfp-{call.name}",
                    error_code=code,
                    error_fingerprint=f"efp-{call.name}-{code}" if code else None,
                    attempts=2 if status == "error" else 1,
                ),
                budget.snap(),
            )
        stops_here = n == len(steps) and final is not StopReason.COMPLETED
        obs.step_ended(n, str(final) if stops_here else "continue", budget.snap())
    if final is StopReason.COMPLETED:
        # the answering step: a model call with no tool call
        n = len(steps) + 1
        budget.used["steps"] = n
        obs.step_started(n, budget.snap())
        obs.model_call_started(n, "gpt-test", budget.snap())
        budget.used["model_calls"] += 1
        budget.used["tokens"] += 50
        answer = ModelResponse(Message("assistant", "done"), "end_turn", Usage(40, 10), "gpt-test")
        obs.model_call_ended(answer, None, budget.snap())
        obs.step_ended(n, str(final), budget.snap())
    result = RunResult(
        messages=[],
        steps=[],
        final="done" if final is StopReason.COMPLETED else None,
        stop_reason=final,
        outcome=final.outcome,
        usage=Usage(400, 90, 0.003),
        explanation="" if final is StopReason.COMPLETED else f"Stopped: {final}",
        run_id=info.run_id,
        task_type=info.task_type,
        limit=LIMIT_OF.get(final),
        limits_version=info.limits_version,
        counters=dict(budget.used),
        progress={"recent_new_calls": 1, "max_same_error": 3, "max_same_call": 2},
        agent_name=info.agent_name,
    )
    obs.run_ended(result, budget.snap())
    return result


def _result(reason: StopReason, explanation: str = "") -> RunResult:
    return RunResult([], [], None, reason, reason.outcome, Usage(), explanation)


def _by_kind(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {"run": [], "step": [], "model": [], "tool": []}
    for s in spans:
        head = s.name.split(" ", 1)[0]
        kind = {
            sc.SPAN_RUN: "run",
            sc.SPAN_STEP: "step",
            sc.SPAN_MODEL: "model",
            sc.SPAN_TOOL: "tool",
        }[head]
        out[kind].append(s)
    return out


def _attrs(span: ReadableSpan) -> Mapping[str, Any]:
    assert span.attributes is not None
    return span.attributes


def _assert_loop_attrs(span: ReadableSpan, run_id: str, task_type: str) -> None:
    a = _attrs(span)
    assert a[sc.RUN_ID] == run_id, span.name
    assert a[sc.TASK_TYPE] == task_type, span.name
    for b in sc.BUDGETS:
        assert sc.budget_used(b) in a, (span.name, b)
        if LIMITS[b] is None:
            assert sc.budget_limit(b) not in a, (span.name, b)
        else:
            assert a[sc.budget_limit(b)] == LIMITS[b], (span.name, b)
    assert isinstance(a[sc.BUDGET_MAX_UTILIZATION], float)
    assert 0.0 <= a[sc.BUDGET_MAX_UTILIZATION] <= 1.0


def _check_tree(spans: tuple[ReadableSpan, ...], run_id: str = "run-1") -> dict[str, Any]:
    k = _by_kind(spans)
    assert len(k["run"]) == 1
    run = k["run"][0]
    assert run.name == "invoke_agent helper"
    assert run.kind is SpanKind.INTERNAL
    ids = {s.context.span_id: s for s in spans}
    for step in k["step"]:
        assert step.parent is not None and step.parent.span_id == run.context.span_id
        assert step.kind is SpanKind.INTERNAL
        assert _attrs(step)[sc.STEP_INDEX] == int(step.name.split()[1])
        assert sc.GUARD_DECISION in _attrs(step)
    for child in k["model"] + k["tool"]:
        assert child.parent is not None
        parent = ids[child.parent.span_id]
        assert parent.name.startswith("step ")
        assert _attrs(child)[sc.STEP_INDEX] == _attrs(parent)[sc.STEP_INDEX]
    for s in spans:
        assert s.context.trace_id == run.context.trace_id
        _assert_loop_attrs(s, run_id, "support")
    for m in k["model"]:
        a = _attrs(m)
        assert m.name == "chat gpt-test"
        assert m.kind is SpanKind.CLIENT
        assert a[sc.GEN_AI_OPERATION_NAME] == "chat"
        assert a[sc.GEN_AI_REQUEST_MODEL] == "gpt-test"
        assert len(a[sc.GEN_AI_RESPONSE_FINISH_REASONS]) == 1
        assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
        assert sc.GEN_AI_OUTPUT_MESSAGES not in a
    for t in k["tool"]:
        a = _attrs(t)
        name = a[sc.GEN_AI_TOOL_NAME]
        assert t.name == f"execute_tool {name}"
        assert a[sc.GEN_AI_OPERATION_NAME] == "execute_tool"
        assert a[sc.GEN_AI_TOOL_CALL_ID]
        assert a[sc.TOOL_FINGERPRINT] == f"fp-{name}"
        assert a[sc.RESULT_FINGERPRINT] == f"rfp-{name}"
        assert sc.GEN_AI_TOOL_CALL_ARGUMENTS not in a
        assert sc.GEN_AI_TOOL_CALL_RESULT not in a
        if a[sc.TOOL_STATUS] == "error":
            assert t.status.status_code is StatusCode.ERROR
            assert a[sc.ERROR_CODE] == a[sc.ERROR_TYPE]
            assert a[sc.ERROR_FINGERPRINT] == f"efp-{name}-{a[sc.ERROR_CODE]}"
            assert a[sc.TOOL_RETRIES] == 1
            assert [e.name for e in t.events] == [sc.EVENT_RETRY]
        else:
            assert a[sc.TOOL_STATUS] == "ok"
            assert t.status.status_code is StatusCode.UNSET
            assert sc.ERROR_CODE not in a and sc.ERROR_FINGERPRINT not in a
            assert a[sc.TOOL_RETRIES] == 0
    ra = _attrs(run)
    assert ra[sc.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert ra[sc.GEN_AI_AGENT_NAME] == "helper"
    assert ra[sc.GEN_AI_USAGE_INPUT_TOKENS] == 400
    assert ra[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 90
    assert ra[sc.LIMITS_VERSION] == "v1abc"
    assert ra[sc.PROGRESS_RECENT_NEW_CALLS] == 1
    assert ra[sc.PROGRESS_MAX_SAME_ERROR] == 3
    assert ra[sc.PROGRESS_MAX_SAME_CALL] == 2
    return {**k, "run": run}


def test_success_run_has_every_attribute(provider: Any) -> None:
    tp, exporter = provider
    obs = OTelObserverFactory(tp, capture_content=False)(_info())
    lookup = ToolCall("c1", "lookup", {"q": "refund"})
    _drive(obs, Budget(), [[(lookup, "ok", None)]], StopReason.COMPLETED)  # type: ignore[arg-type]
    tree = _check_tree(exporter.get_finished_spans())
    assert [s.name for s in tree["step"]] == ["step 1", "step 2"]
    assert [_attrs(s)[sc.GUARD_DECISION] for s in tree["step"]] == ["continue", "completed"]
    ra = _attrs(tree["run"])
    assert ra[sc.STOP_REASON] == "completed"
    assert ra[sc.OUTCOME] == "success"
    assert ra[sc.STOP_EXPLANATION] == ""
    assert sc.ERROR_TYPE not in ra and sc.LIMIT not in ra
    assert tree["run"].status.status_code is StatusCode.UNSET
    # budget at the run's end: 2 steps, 2 model calls, 1 tool call, 170 tokens
    assert ra[sc.budget_used("steps")] == 2
    assert ra[sc.budget_used("model_calls")] == 2
    assert ra[sc.budget_used("tool_calls")] == 1
    assert ra[sc.budget_used("tokens")] == 170
    assert isinstance(ra[sc.budget_used("steps")], int)
    assert isinstance(ra[sc.budget_used("wall_s")], float)
    assert ra[sc.BUDGET_MAX_UTILIZATION] == pytest.approx(0.25)  # steps 2/8
    finish = [list(_attrs(m)[sc.GEN_AI_RESPONSE_FINISH_REASONS]) for m in tree["model"]]
    assert finish == [["tool_calls"], ["end_turn"]]


def test_limit_stop_max_steps(provider: Any) -> None:
    tp, exporter = provider
    limits = dict(LIMITS, steps=2)
    budget = Budget(limits)
    obs = OTelObserverFactory(tp)(_info())
    calls = [[(ToolCall(f"c{i}", "search", {"page": i}), "ok", None)] for i in range(2)]
    _drive(obs, budget, calls, StopReason.MAX_STEPS)  # type: ignore[arg-type]
    spans = exporter.get_finished_spans()
    run = next(s for s in spans if s.name.startswith("invoke_agent"))
    ra = _attrs(run)
    assert ra[sc.STOP_REASON] == "max_steps"
    assert ra[sc.OUTCOME] == "limit"
    assert ra[sc.LIMIT] == "steps"
    # A budget stop is a policy decision, not a crash: no error.type, status left unset.
    assert sc.ERROR_TYPE not in ra
    assert ra[sc.STOP_EXPLANATION] == "Stopped: max_steps"
    assert run.status.status_code is StatusCode.UNSET
    assert ra[sc.budget_used("steps")] == 2 and ra[sc.budget_limit("steps")] == 2
    assert ra[sc.BUDGET_MAX_UTILIZATION] == pytest.approx(1.0)
    steps = sorted((s for s in spans if s.name.startswith("step ")), key=lambda s: s.name)
    assert [_attrs(s)[sc.GUARD_DECISION] for s in steps] == ["continue", "max_steps"]
    # every span kind is there, parented and tagged
    assert {s.name.split()[0] for s in spans} == {"invoke_agent", "step", "chat", "execute_tool"}
    for s in spans:
        assert _attrs(s)[sc.RUN_ID] == "run-1"
        assert _attrs(s)[sc.budget_limit("steps")] == 2


def test_stuck_stop_repeated_error(provider: Any) -> None:
    tp, exporter = provider
    obs = OTelObserverFactory(tp)(_info())
    read = [
        [(ToolCall(f"c{i}", "read_file", {"path": "a"}), "error", "NOT_FOUND")] for i in range(3)
    ]
    _drive(obs, Budget(), read, StopReason.REPEATED_ERROR)  # type: ignore[arg-type]
    tree = _check_tree(exporter.get_finished_spans())
    ra = _attrs(tree["run"])
    assert ra[sc.STOP_REASON] == "repeated_error"
    assert ra[sc.OUTCOME] == "stuck"
    assert ra[sc.ERROR_TYPE] == "repeated_error"
    assert sc.LIMIT not in ra
    assert tree["run"].status.status_code is StatusCode.ERROR
    tools = tree["tool"]
    assert len(tools) == 3
    assert {_attrs(t)[sc.ERROR_CODE] for t in tools} == {"NOT_FOUND"}
    assert {_attrs(t)[sc.ERROR_FINGERPRINT] for t in tools} == {"efp-read_file-NOT_FOUND"}
    assert [_attrs(s)[sc.GUARD_DECISION] for s in tree["step"]][-1] == "repeated_error"


def test_budget_attributes_omit_off_limits() -> None:
    snap = BudgetSnapshot(
        {
            "steps": 3.0,
            "model_calls": 3,
            "tool_calls": 2,
            "tokens": 900,
            "cost_usd": 0,
            "wall_s": 1,
        },
        {"steps": 8, "model_calls": None, "tool_calls": None, "tokens": None, "cost_usd": 0.5},
        0.375,
    )
    attrs = budget_attributes(snap)
    assert attrs == {
        "loopwatch.budget.steps.used": 3,
        "loopwatch.budget.steps.limit": 8,
        "loopwatch.budget.model_calls.used": 3,
        "loopwatch.budget.tool_calls.used": 2,
        "loopwatch.budget.tokens.used": 900,
        "loopwatch.budget.cost_usd.used": 0.0,
        "loopwatch.budget.cost_usd.limit": 0.5,
        "loopwatch.budget.wall_s.used": 1.0,
        "loopwatch.budget.max_utilization": 0.375,
    }
    assert type(attrs["loopwatch.budget.steps.used"]) is int
    assert type(attrs["loopwatch.budget.wall_s.used"]) is float


def test_content_is_recorded_only_when_opted_in(
    provider: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    call = ToolCall("c1", "lookup", {"b": 1, "a": {"z": 2, "y": 1}})
    monkeypatch.delenv(sc.CAPTURE_CONTENT_ENV, raising=False)
    assert capture_content_enabled() is False
    _drive(OTelObserverFactory(tp)(_info()), Budget(), [[(call, "ok", None)]], StopReason.COMPLETED)  # type: ignore[arg-type]
    for s in exporter.get_finished_spans():
        assert not any(k in _attrs(s) for k in _CONTENT_KEYS), s.name
    exporter.clear()

    monkeypatch.setenv(sc.CAPTURE_CONTENT_ENV, "true")
    assert capture_content_enabled() is True
    assert capture_content_enabled(False) is False
    _drive(OTelObserverFactory(tp)(_info()), Budget(), [[(call, "ok", None)]], StopReason.COMPLETED)  # type: ignore[arg-type]
    tree = _by_kind(exporter.get_finished_spans())
    tool = _attrs(tree["tool"][0])
    assert tool[sc.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"a":{"y":1,"z":2},"b":1}'
    assert tool[sc.GEN_AI_TOOL_CALL_RESULT] == '{"ok": true}'
    first, last = (json.loads(_attrs(m)[sc.GEN_AI_OUTPUT_MESSAGES]) for m in tree["model"])
    assert first[0]["parts"][0] == {
        "type": "tool_call",
        "id": "c1",
        "name": "lookup",
        "arguments": {"b": 1, "a": {"z": 2, "y": 1}},
    }
    assert last == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "done"}],
            "finish_reason": "end_turn",
        }
    ]


_CONTENT_KEYS = (
    sc.GEN_AI_TOOL_CALL_ARGUMENTS,
    sc.GEN_AI_TOOL_CALL_RESULT,
    sc.GEN_AI_OUTPUT_MESSAGES,
)


def test_spans_are_current_so_tool_work_and_sub_agents_nest(provider: Any) -> None:
    tp, exporter = provider
    factory = OTelObserverFactory(tp)
    tracer = tp.get_tracer("app")
    outer_ctx = context_api.get_current()
    budget = Budget()
    obs = factory(_info())
    obs.run_started(_info(), budget.snap())
    obs.step_started(1, budget.snap())
    obs.model_call_started(1, "gpt-test", budget.snap())
    with tracer.start_as_current_span("http POST /v1/chat"):
        pass
    obs.model_call_ended(_tool_response(), None, budget.snap())
    call = ToolCall("c1", "delegate", {})
    obs.tool_call_started(call, "fp", budget.snap())
    with tracer.start_as_current_span("db query"):
        pass
    # a sub-agent run started inside the tool
    sub = factory(_info("run-2", agent_name="sub"))
    sub_result = _drive(
        sub, Budget(), [], StopReason.COMPLETED, info=_info("run-2", agent_name="sub")
    )
    assert sub_result.run_id == "run-2"
    obs.tool_call_ended(
        ToolRecord(call=call, ok=True, content="", fingerprint="fp", result_fingerprint="rfp"),
        budget.snap(),
    )
    obs.step_ended(1, "continue", budget.snap())
    obs.run_ended(
        _result(StopReason.COMPLETED),
        budget.snap(),
    )
    # the caller's context is back as it was
    assert context_api.get_current() == outer_ctx
    spans = {
        s.name: s for s in exporter.get_finished_spans() if _attrs(s).get(sc.RUN_ID) != "run-2"
    }
    sub_run = next(s for s in exporter.get_finished_spans() if s.name == "invoke_agent sub")
    spans["invoke_agent sub"] = sub_run
    parent_of = {s.name: s.parent.span_id if s.parent else None for s in spans.values()}
    assert parent_of["http POST /v1/chat"] == spans["chat gpt-test"].context.span_id
    assert parent_of["db query"] == spans["execute_tool delegate"].context.span_id
    assert parent_of["invoke_agent sub"] == spans["execute_tool delegate"].context.span_id
    assert (
        spans["invoke_agent sub"].context.trace_id == spans["invoke_agent helper"].context.trace_id
    )
    assert parent_of["invoke_agent helper"] is None


def test_run_nests_under_the_applications_current_span(provider: Any) -> None:
    tp, exporter = provider
    with tp.get_tracer("app").start_as_current_span("handle request") as outer:
        _drive(OTelObserverFactory(tp)(_info()), Budget(), [], StopReason.COMPLETED)
    run = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert run.parent is not None and run.parent.span_id == outer.get_span_context().span_id


def test_concurrent_tool_calls_ending_out_of_order(provider: Any) -> None:
    tp, exporter = provider
    budget = Budget()
    obs = OTelObserverFactory(tp)(_info())
    before = context_api.get_current()
    obs.run_started(_info(), budget.snap())
    obs.step_started(1, budget.snap())
    a, b = ToolCall("a", "fetch", {"u": 1}), ToolCall("b", "fetch", {"u": 2})
    obs.tool_call_started(a, "fa", budget.snap())
    obs.tool_call_started(b, "fb", budget.snap())
    obs.tool_call_ended(
        ToolRecord(call=a, ok=True, content="", fingerprint="fa", result_fingerprint="ra"),
        budget.snap(),
    )
    # b is still open: an event lands on it, not on the ended a
    obs.event(sc.EVENT_BUDGET_WARNING, {"budget": "steps"})
    obs.tool_call_ended(
        ToolRecord(call=b, ok=True, content="", fingerprint="fb", result_fingerprint="rb"),
        budget.snap(),
    )
    obs.event(sc.EVENT_COMPLETION_REJECTED, {"unmet": 1})
    # back at the step: current span is the step
    assert trace.get_current_span().name == "step 1"  # type: ignore[attr-defined]
    obs.step_ended(1, "continue", budget.snap())
    obs.run_ended(
        _result(StopReason.COMPLETED),
        budget.snap(),
    )
    assert context_api.get_current() == before
    spans = {
        (s.name, _attrs(s).get(sc.GEN_AI_TOOL_CALL_ID)): s for s in exporter.get_finished_spans()
    }
    assert [e.name for e in spans[("execute_tool fetch", "b")].events] == [sc.EVENT_BUDGET_WARNING]
    assert spans[("execute_tool fetch", "a")].events == ()
    assert [e.name for e in spans[("step 1", None)].events] == [sc.EVENT_COMPLETION_REJECTED]


def test_stop_mid_step_closes_open_spans(provider: Any) -> None:
    tp, exporter = provider
    budget = Budget()
    before = context_api.get_current()
    obs = OTelObserverFactory(tp)(_info())
    obs.run_started(_info(), budget.snap())
    obs.step_started(1, budget.snap())
    obs.model_call_started(1, None, budget.snap())
    obs.model_call_ended(None, TimeoutError("model hung"), budget.snap())
    obs.tool_call_started(ToolCall("x", "slow", {}), "fs", budget.snap())
    # cancelled: the guard ends the run without ending the tool or the step
    obs.run_ended(
        _result(StopReason.CANCELLED, "cancelled at step 1"),
        budget.snap(),
    )
    assert context_api.get_current() == before
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_agent helper", "step 1", "chat", "execute_tool slow"}
    assert all(s.end_time is not None for s in spans.values())
    assert _attrs(spans["step 1"])[sc.GUARD_DECISION] == "cancelled"
    chat = spans["chat"]
    assert chat.status.status_code is StatusCode.ERROR
    assert _attrs(chat)[sc.ERROR_TYPE] == "TimeoutError"
    assert [e.name for e in chat.events] == ["exception"]
    # A cancel is a stop someone asked for: not an error of the run (the chat call's is its own).
    assert sc.ERROR_TYPE not in _attrs(spans["invoke_agent helper"])
    assert spans["invoke_agent helper"].status.status_code is StatusCode.UNSET
    assert _attrs(spans["invoke_agent helper"])[sc.OUTCOME] == "interrupted"


def test_request_and_response_model_are_kept_apart(provider: Any) -> None:
    tp, exporter = provider
    budget = Budget()
    obs = OTelObserverFactory(tp)(_info())
    obs.run_started(_info(), budget.snap())
    obs.step_started(1, budget.snap())
    obs.model_call_started(1, None, budget.snap())
    obs.model_call_ended(_tool_response(), None, budget.snap())
    obs.run_ended(_result(StopReason.COMPLETED), budget.snap())
    chat = next(s for s in exporter.get_finished_spans() if s.name.startswith("chat"))
    # The request named no model: the span is named by the operation alone (GenAI conventions)
    # and the response's model is the response model, never written into the request model.
    assert chat.name == "chat"
    assert sc.GEN_AI_REQUEST_MODEL not in _attrs(chat)
    assert _attrs(chat)[sc.GEN_AI_RESPONSE_MODEL] == "gpt-test"


def test_run_info_extras_land_on_the_run_span(provider: Any) -> None:
    tp, exporter = provider
    extra = {sc.CONVERSATION_ID: "conv-9", "x.obj": {"a": 1}, sc.RUN_ID: "forged", "x.none": None}
    info = _info(parent_run_id="run-0", attributes=extra)
    _drive(OTelObserverFactory(tp)(info), Budget(), [], StopReason.COMPLETED, info=info)
    run = _attrs(exporter.get_finished_spans()[-1])
    assert run[sc.PARENT_RUN_ID] == "run-0"
    # The old key is still read, and the run carries the conventions' keys.
    assert run[sc.GEN_AI_CONVERSATION_ID] == run[sc.OI_SESSION_ID] == "conv-9"
    assert run["x.obj"] == "{'a': 1}"
    assert run[sc.RUN_ID] == "run-1" and "x.none" not in run


def test_observer_never_raises_and_counts_the_failure(provider: Any) -> None:
    tp, _ = provider
    reset_drops()
    obs = OTelObserverFactory(tp)(_info())
    before = context_api.get_current()
    obs.run_started(_info(), Budget().snap())
    obs.step_started(1, Budget().snap())
    obs.tool_call_started(None, "f", Budget().snap())  # type: ignore[arg-type]
    obs.run_ended(None, None)  # type: ignore[arg-type]
    assert dropped().get("observer_error", 0) == 2
    # even a failing end undoes the run's context
    assert context_api.get_current() == before
    # calls out of order or after the end are ignored, not errors
    reset_drops()
    obs2 = OTelObserverFactory(tp)(_info())
    obs2.step_ended(1, "continue", Budget().snap())
    obs2.tool_call_ended(
        ToolRecord(
            call=ToolCall("q", "t"), ok=True, content="", fingerprint="f", result_fingerprint="r"
        ),
        Budget().snap(),
    )
    obs2.event(sc.EVENT_RETRY, {})
    assert dropped() == {}


def test_concurrent_async_runs_keep_their_own_trees(provider: Any) -> None:
    tp, exporter = provider
    factory = OTelObserverFactory(tp)
    tracer = tp.get_tracer("app")

    async def one_run(i: int) -> None:
        info = _info(f"run-{i}", agent_name=f"agent{i}")
        budget = Budget()
        obs = factory(info)
        obs.run_started(info, budget.snap())
        for n in (1, 2):
            obs.step_started(n, budget.snap())
            await asyncio.sleep(0)
            call = ToolCall(f"{i}-{n}", "io", {})
            obs.tool_call_started(call, "f", budget.snap())
            await asyncio.sleep(0.001 * (3 - i))
            # the tool's own work, on another thread, nests under this run's tool span
            await asyncio.to_thread(lambda: tracer.start_span("inner").end())
            with tracer.start_as_current_span(f"work {i}-{n}"):
                await asyncio.sleep(0)
            obs.tool_call_ended(
                ToolRecord(call=call, ok=True, content="", fingerprint="f", result_fingerprint="r"),
                budget.snap(),
            )
            obs.step_ended(n, "continue", budget.snap())
        obs.run_ended(_result(StopReason.COMPLETED), budget.snap())

    async def main() -> None:
        await asyncio.gather(*(one_run(i) for i in range(3)))

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    for s in spans:
        if s.name.startswith("work "):
            i, n = s.name.split()[1].split("-")
            tool = by_id[s.parent.span_id]  # type: ignore[union-attr]
            assert _attrs(tool)[sc.GEN_AI_TOOL_CALL_ID] == f"{i}-{n}"
            assert _attrs(tool)[sc.RUN_ID] == f"run-{i}"
            step = by_id[tool.parent.span_id]  # type: ignore[union-attr]
            assert step.name == f"step {n}"
            run = by_id[step.parent.span_id]  # type: ignore[union-attr]
            assert run.name == f"invoke_agent agent{i}" and run.parent is None
        if s.name == "inner":
            assert s.parent is not None and by_id[s.parent.span_id].name == "execute_tool io"
    assert len({s.context.trace_id for s in spans}) == 3


# --- the real reference loop and LoopGuard -----------------------------------------------------


REAL_LIMITS = LoopLimits(
    max_steps=4, max_tool_calls=20, max_tokens=10_000, max_wall_s=60.0, max_consecutive_failures=5
)
USAGE = Usage(100, 20, 0.001)


def _registry(clock: FakeClock, **tools: Any) -> ToolRegistry:
    reg = ToolRegistry(sleep=clock.sleep, asleep=clock.asleep, rng=lambda: 0.5)
    for name, fn in tools.items():
        reg.register(fn, name=name)
    return reg


def _check_real_tree(
    spans: tuple[ReadableSpan, ...], limits: LoopLimits, run_id: str, task_type: str
) -> dict[str, Any]:
    """Every attribute docs/telemetry.md lists, on every span kind, and the parent/child tree."""
    k = _by_kind(spans)
    assert len(k["run"]) == 1
    run_span = k["run"][0]
    ids = {s.context.span_id: s for s in spans}
    for s in spans:
        a = _attrs(s)
        assert s.context.trace_id == run_span.context.trace_id
        assert a[sc.RUN_ID] == run_id, s.name
        assert a[sc.TASK_TYPE] == task_type, s.name
        for b in sc.BUDGETS:
            assert sc.budget_used(b) in a, (s.name, b)
            lim = limits.limit_of(b)
            if lim is None:
                assert sc.budget_limit(b) not in a, (s.name, b)
            else:
                assert a[sc.budget_limit(b)] == lim, (s.name, b)
        assert sc.BUDGET_MAX_UTILIZATION in a
    for step in k["step"]:
        assert step.parent is not None and step.parent.span_id == run_span.context.span_id
        assert _attrs(step)[sc.GUARD_DECISION]
    for child in k["model"] + k["tool"]:
        assert child.parent is not None
        assert ids[child.parent.span_id].name.startswith("step ")
    for m in k["model"]:
        a = _attrs(m)
        assert m.name == "chat fake"
        assert a[sc.GEN_AI_OPERATION_NAME] == "chat"
        assert a[sc.GEN_AI_REQUEST_MODEL] == "fake"
        assert list(a[sc.GEN_AI_RESPONSE_FINISH_REASONS])
        assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == 100
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 20
    for t in k["tool"]:
        a = _attrs(t)
        assert t.name == f"execute_tool {a[sc.GEN_AI_TOOL_NAME]}"
        assert a[sc.GEN_AI_TOOL_CALL_ID]
        assert len(a[sc.TOOL_FINGERPRINT]) >= 8
        assert a[sc.TOOL_STATUS] in ("ok", "error")
        assert a[sc.TOOL_RETRIES] >= 0
        if a[sc.TOOL_STATUS] == "error":
            assert t.status.status_code is StatusCode.ERROR
            assert a[sc.ERROR_CODE] and a[sc.ERROR_FINGERPRINT]
        else:
            assert sc.ERROR_CODE not in a
    ra = _attrs(run_span)
    assert run_span.name == "invoke_agent helper"
    assert ra[sc.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert ra[sc.GEN_AI_AGENT_NAME] == "helper"
    assert ra[sc.GEN_AI_USAGE_INPUT_TOKENS] == 100 * len(k["model"])
    assert ra[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 20 * len(k["model"])
    assert ra[sc.LIMITS_VERSION] == limits.version
    for key in (
        sc.PROGRESS_RECENT_NEW_CALLS,
        sc.PROGRESS_MAX_SAME_ERROR,
        sc.PROGRESS_MAX_SAME_CALL,
    ):
        assert isinstance(ra[key], int)
    assert ra[sc.budget_used("steps")] == len(k["step"])
    assert ra[sc.budget_used("model_calls")] == len(k["model"])
    assert ra[sc.budget_used("tool_calls")] == len(k["tool"])
    return {**k, "run": run_span}


def test_reference_loop_success(provider: Any) -> None:
    tp, exporter = provider
    clock = FakeClock()
    lookup = ScriptedTool([{"rows": 1}, {"rows": 2}], params=["q"], name="lookup")
    model = FakeModel(
        [
            tool_response(ToolCall("c1", "lookup", {"q": "refund"}), usage=USAGE),
            tool_response(ToolCall("c2", "lookup", {"q": "policy"}), usage=USAGE),
            text_response("Refund issued.", usage=USAGE),
        ]
    )
    result = run(
        model, _registry(clock, lookup=lookup), "help", limits=REAL_LIMITS, task_type="support",
        agent_name="helper", run_id="run-ok", clock=clock, observer_factory=OTelObserverFactory(tp),
    )  # fmt: skip
    assert result.ok
    tree = _check_real_tree(exporter.get_finished_spans(), REAL_LIMITS, "run-ok", "support")
    ra = _attrs(tree["run"])
    assert ra[sc.STOP_REASON] == "completed" and ra[sc.OUTCOME] == "success"
    assert sc.ERROR_TYPE not in ra and sc.LIMIT not in ra
    assert [_attrs(s)[sc.GUARD_DECISION] for s in tree["step"]] == [
        "continue",
        "continue",
        "completed",
    ]
    assert len(tree["tool"]) == 2 and len(tree["model"]) == 3
    assert ra[sc.BUDGET_MAX_UTILIZATION] == pytest.approx(0.75)  # 3 of 4 steps


def test_reference_loop_limit_stop(provider: Any) -> None:
    tp, exporter = provider
    clock = FakeClock()
    limits = LoopLimits(max_steps=3, max_tokens=10_000, soft_threshold=0.5)
    result = run(
        CounterModel("echo", usage=USAGE), _registry(clock, echo=lambda text: text), "go",
        limits=limits, task_type="batch", agent_name="helper", run_id="run-limit", clock=clock,
        observer_factory=OTelObserverFactory(tp), raise_on_stop=False,
    )  # fmt: skip
    assert result.stop_reason is StopReason.MAX_STEPS
    tree = _check_real_tree(exporter.get_finished_spans(), limits, "run-limit", "batch")
    ra = _attrs(tree["run"])
    assert ra[sc.STOP_REASON] == "max_steps"
    assert ra[sc.OUTCOME] == "limit"
    assert ra[sc.LIMIT] == "steps"
    assert sc.ERROR_TYPE not in ra
    assert "max_steps=3" in result.explanation
    assert ra[sc.STOP_EXPLANATION] == redact_content(result.explanation, result.messages)
    assert "echo(…)" in str(ra[sc.STOP_EXPLANATION])
    assert tree["run"].status.status_code is StatusCode.UNSET
    assert ra[sc.budget_used("steps")] == 3 and ra[sc.BUDGET_MAX_UTILIZATION] == pytest.approx(1.0)
    assert len(tree["step"]) == 3
    # the soft threshold (50% of steps) was crossed: a warning event on a loop span
    warnings = [e for s in exporter.get_finished_spans() for e in s.events]
    assert sc.EVENT_BUDGET_WARNING in {e.name for e in warnings}


def test_reference_loop_stuck_stop(provider: Any) -> None:
    tp, exporter = provider
    clock = FakeClock()
    missing = ScriptedTool(
        [ToolError("NOT_FOUND", "no such file", transient=False)], params=["text"]
    )
    result = run(
        CounterModel("read_file", usage=USAGE), _registry(clock, read_file=missing), "go",
        limits=REAL_LIMITS, task_type="support", agent_name="helper", run_id="run-stuck",
        clock=clock, observer_factory=OTelObserverFactory(tp), raise_on_stop=False,
    )  # fmt: skip
    assert result.stop_reason is StopReason.REPEATED_ERROR
    tree = _check_real_tree(exporter.get_finished_spans(), REAL_LIMITS, "run-stuck", "support")
    ra = _attrs(tree["run"])
    assert ra[sc.STOP_REASON] == "repeated_error"
    assert ra[sc.OUTCOME] == "stuck"
    assert ra[sc.ERROR_TYPE] == "repeated_error"
    assert sc.LIMIT not in ra
    assert ra[sc.PROGRESS_MAX_SAME_ERROR] == 3
    tools = tree["tool"]
    assert len(tools) == 3
    assert {_attrs(t)[sc.ERROR_CODE] for t in tools} == {"NOT_FOUND"}
    assert len({_attrs(t)[sc.ERROR_FINGERPRINT] for t in tools}) == 1
    assert len({_attrs(t)[sc.TOOL_FINGERPRINT] for t in tools}) == 3  # new arguments each time
    assert _attrs(tree["step"][-1])[sc.GUARD_DECISION] == "repeated_error"


def test_retries_show_on_the_tool_span(provider: Any) -> None:
    tp, exporter = provider
    clock = FakeClock()
    flaky = ScriptedTool([ToolError("HTTP_503", "busy", status=503), {"ok": 1}], params=["q"])
    model = FakeModel(
        [
            tool_response(ToolCall("c1", "fetch", {"q": "x"}), usage=USAGE),
            text_response("ok", usage=USAGE),
        ]
    )
    run(
        model, _registry(clock, fetch=flaky), "go", limits=REAL_LIMITS, task_type="support",
        agent_name="helper", run_id="run-retry", clock=clock,
        observer_factory=OTelObserverFactory(tp),
    )  # fmt: skip
    tool = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool fetch")
    assert _attrs(tool)[sc.TOOL_STATUS] == "ok"
    assert _attrs(tool)[sc.TOOL_RETRIES] == 1
    assert [e.name for e in tool.events] == [sc.EVENT_RETRY]


def _hand_loop(model: FakeModel, registry: ToolRegistry, guard: LoopGuard) -> RunResult:
    """A user's own loop, driving LoopGuard."""
    messages = [Message("user", "help")]
    guard.start(messages)
    while True:
        if guard.before_step().done:
            break
        guard.model_call_started(model.model)
        response = model.complete(messages, registry.specs())
        messages.append(response.message)
        decision = guard.after_model(response)
        if decision.done:
            break
        for call in response.message.tool_calls:
            if guard.before_tool(call).done:
                break
            outcome = registry.execute(call)
            messages.append(Message("tool", outcome.content, tool_call_id=call.id))
            if guard.after_tool(call, outcome).done:
                break
        if guard.stopped:
            break
    return guard.finish(messages)


def _shape(spans: tuple[ReadableSpan, ...]) -> list[tuple[Any, ...]]:
    names = {s.context.span_id: s.name for s in spans}
    return sorted(
        (
            s.name,
            s.kind.name,
            names.get(s.parent.span_id) if s.parent else None,
            s.status.status_code.name,
            tuple(sorted((k, str(v)) for k, v in _attrs(s).items())),
            tuple(e.name for e in s.events),
        )
        for s in spans
    )


@pytest.mark.parametrize("outcome", ["success", "limit", "stuck"])
def test_loop_guard_from_a_hand_written_loop_gives_the_same_spans(
    provider: Any, outcome: str
) -> None:
    tp, exporter = provider
    factory = OTelObserverFactory(tp)
    if outcome == "success":
        script: list[Any] = [
            tool_response(ToolCall("c1", "lookup", {"q": "a"}), usage=USAGE),
            text_response("done", usage=USAGE),
        ]
        tool: Any = lambda q: {"q": q}  # noqa: E731
    elif outcome == "limit":
        script = [
            tool_response(ToolCall(f"c{i}", "lookup", {"q": str(i)}), usage=USAGE) for i in range(9)
        ]
        tool = lambda q: {"q": q}  # noqa: E731
    else:
        script = [
            tool_response(ToolCall(f"c{i}", "lookup", {"q": str(i)}), usage=USAGE) for i in range(9)
        ]
        tool = ScriptedTool([ToolError("NOT_FOUND", "gone", transient=False)], params=["q"])

    def kwargs(clock: FakeClock) -> dict[str, Any]:
        return dict(
            task_type="support", agent_name="helper", run_id=f"run-{outcome}", clock=clock,
            observer_factory=factory,
        )  # fmt: skip

    clock = FakeClock()
    ref = run(
        FakeModel(script), _registry(clock, lookup=tool), "help", limits=REAL_LIMITS,
        raise_on_stop=False, **kwargs(clock),
    )  # fmt: skip
    reference = _shape(exporter.get_finished_spans())
    exporter.clear()
    clock = FakeClock()
    reg = _registry(clock, lookup=tool)
    mine = _hand_loop(FakeModel(script), reg, LoopGuard(REAL_LIMITS, registry=reg, **kwargs(clock)))
    assert mine.stop_reason is ref.stop_reason
    assert str(ref.outcome) == outcome
    assert _shape(exporter.get_finished_spans()) == reference


def test_async_concurrent_runs_nest_sub_agents_under_their_tool(provider: Any) -> None:
    """Three arun()s at once; each delegates to a sub-agent from inside a tool: every sub-run
    nests under its own parent's tool span, and the tool's own spans under the tool."""
    tp, exporter = provider
    factory = OTelObserverFactory(tp)
    app = tp.get_tracer("app")

    async def main() -> list[RunResult]:
        async def one(i: int) -> RunResult:
            clock = FakeClock()

            async def delegate(q: str) -> str:
                with app.start_as_current_span(f"http {i}"):
                    await asyncio.sleep(0.001 * (3 - i))
                sub = await arun(
                    FakeModel([text_response(f"sub answer {i}", usage=USAGE)]),
                    _registry(clock), q, task_type="sub", agent_name=f"sub{i}",
                    run_id=f"sub-{i}", observer_factory=factory, clock=clock,
                )  # fmt: skip
                return sub.final or ""

            model = FakeModel(
                [
                    tool_response(ToolCall(f"d{i}", "delegate", {"q": f"q{i}"}), usage=USAGE),
                    text_response(f"answer {i}", usage=USAGE),
                ]
            )
            return await arun(
                model, _registry(clock, delegate=delegate), "go", task_type="support",
                agent_name=f"main{i}", run_id=f"main-{i}", observer_factory=factory, clock=clock,
            )  # fmt: skip

        return await asyncio.gather(*(one(i) for i in range(3)))

    results = asyncio.run(main())
    assert [r.final for r in results] == ["answer 0", "answer 1", "answer 2"]
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}

    def parent(s: ReadableSpan) -> ReadableSpan:
        assert s.parent is not None, s.name
        return by_id[s.parent.span_id]

    for i in range(3):
        sub_run = next(s for s in spans if s.name == f"invoke_agent sub{i}")
        tool = parent(sub_run)
        assert tool.name == "execute_tool delegate"
        assert _attrs(tool)[sc.RUN_ID] == f"main-{i}"
        assert _attrs(tool)[sc.GEN_AI_TOOL_CALL_ID] == f"d{i}"
        assert parent(parent(tool)).name == f"invoke_agent main{i}"
        http = next(s for s in spans if s.name == f"http {i}")
        assert parent(http) is tool
        sub_steps = [s for s in spans if _attrs(s).get(sc.RUN_ID) == f"sub-{i}"]
        assert {s.context.trace_id for s in sub_steps} == {tool.context.trace_id}
    assert len({s.context.trace_id for s in spans}) == 3


def test_a_failing_model_call_marks_the_chat_span(provider: Any) -> None:
    tp, exporter = provider
    clock = FakeClock()
    result = run(
        FakeModel([]), _registry(clock), "go", limits=REAL_LIMITS, task_type="support",
        agent_name="helper", run_id="run-err", clock=clock,
        observer_factory=OTelObserverFactory(tp), raise_on_stop=False,
    )  # fmt: skip
    assert result.stop_reason is StopReason.ERROR
    spans = {s.name.split()[0]: s for s in exporter.get_finished_spans()}
    chat = spans["chat"]
    assert chat.status.status_code is StatusCode.ERROR
    assert _attrs(chat)[sc.ERROR_TYPE] == "ScriptExhausted"
    assert [e.name for e in chat.events] == ["exception"]
    run_attrs = _attrs(spans["invoke_agent"])
    assert run_attrs[sc.ERROR_TYPE] == "error" and run_attrs[sc.OUTCOME] == "error"


def test_a_run_the_sampler_drops_costs_nothing_and_breaks_nothing() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    tp = TracerProvider(sampler=ALWAYS_OFF)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    reset_drops()
    clock = FakeClock()
    seen: list[bool] = []

    def lookup(q: str) -> str:
        seen.append(trace.get_current_span().get_span_context().is_valid)
        return q

    model = FakeModel([tool_response(ToolCall("c1", "lookup", {"q": "a"})), text_response("ok")])
    result = run(
        model, _registry(clock, lookup=lookup), "go", limits=REAL_LIMITS, clock=clock,
        observer_factory=OTelObserverFactory(tp),
    )  # fmt: skip
    tp.shutdown()
    assert result.ok
    assert exporter.get_finished_spans() == ()
    assert seen == [True]  # the unsampled tool span is still current: its context propagates
    assert dropped() == {}


def test_sync_tools_run_in_threads_by_arun_nest_their_spans(provider: Any) -> None:
    tp, exporter = provider
    factory = OTelObserverFactory(tp)
    app = tp.get_tracer("app")

    def probe(q: str) -> str:  # a sync tool: arun runs it in a worker thread
        with app.start_as_current_span(f"query {q}"):
            return q

    async def main() -> None:
        async def one(i: int) -> None:
            clock = FakeClock()
            model = FakeModel(
                [tool_response(ToolCall(f"p{i}", "probe", {"q": str(i)})), text_response("ok")]
            )
            await arun(
                model, _registry(clock, probe=probe), "go", run_id=f"r{i}", clock=clock,
                observer_factory=factory,
            )  # fmt: skip

        await asyncio.gather(*(one(i) for i in range(4)))

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    for i in range(4):
        query = next(s for s in spans if s.name == f"query {i}")
        assert query.parent is not None
        tool = by_id[query.parent.span_id]
        assert tool.name == "execute_tool probe"
        assert _attrs(tool)[sc.RUN_ID] == f"r{i}"


@pytest.mark.parametrize("capture", [False, True])
def test_explanation_on_the_span_shows_arguments_only_when_opted_in(
    provider: Any, capture: bool
) -> None:
    tp, exporter = provider
    clock = FakeClock()
    missing = ScriptedTool(
        [ToolError("NOT_FOUND", "no such file: secret/plan.txt", transient=False)],
        params=["path"],
    )
    calls = [ToolCall(f"c{i}", "read_file", {"path": "secret/plan.txt"}) for i in range(5)]
    model = FakeModel([tool_response(c, usage=USAGE) for c in calls])
    result = run(
        model, _registry(clock, read_file=missing), "go", limits=REAL_LIMITS,
        task_type="support", run_id="run-redact", clock=clock, raise_on_stop=False,
        observer_factory=OTelObserverFactory(tp, capture_content=capture),
    )  # fmt: skip
    assert "secret/plan.txt" in result.explanation  # the caller's own result keeps the evidence
    run_span = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    exported = str(_attrs(run_span)[sc.STOP_EXPLANATION])
    assert run_span.status.description is not None
    if capture:
        assert exported == result.explanation
    else:
        assert "secret/plan.txt" not in exported
        assert "no such file" not in exported  # the error message is tool output too
        assert "secret/plan.txt" not in run_span.status.description
        assert "read_file(…)" in exported


@pytest.mark.parametrize("capture", [False, True])
def test_explanation_on_the_span_quotes_results_only_when_opted_in(
    provider: Any, capture: bool
) -> None:
    tp, exporter = provider
    clock = FakeClock()
    calls = [ToolCall(f"c{i}", "balance", {"account": "ACME-7"}) for i in range(4)]
    model = FakeModel([tool_response(c, usage=USAGE) for c in calls])
    result = run(
        model, _registry(clock, balance=lambda account: "balance of the account: 4711.00 EUR"),
        "go", limits=REAL_LIMITS, task_type="support", run_id="run-redact-result", clock=clock,
        raise_on_stop=False, observer_factory=OTelObserverFactory(tp, capture_content=capture),
    )  # fmt: skip
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert "4711.00 EUR" in result.explanation
    run_span = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    exported = str(_attrs(run_span)[sc.STOP_EXPLANATION])
    if capture:
        assert exported == result.explanation
    else:
        assert "4711" not in exported and "ACME-7" not in exported
        assert "balance(…)" in exported and "'…'" in exported


def test_redaction_keeps_quotes_no_tool_returned() -> None:
    messages = [Message("tool", "ok: 'done'", tool_call_id="c1")]
    text = "the provider signalled 'max_tokens'; the tool said 'done' and \"done\"."
    assert redact_content(text, messages) == (
        "the provider signalled 'max_tokens'; the tool said '…' and '…'."
    )
    assert redact_content(text, []) == text
