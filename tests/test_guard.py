"""LoopGuard: provider signals, gates, caps, budgets, observer hook, parents, hand-driven use."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation import drops, observer, semconv
from loopwatch.instrumentation.runtime.errors import AgentLoopError, RunFailed, RunInterrupted
from loopwatch.instrumentation.runtime.fingerprint import call_fingerprint, error_fingerprint
from loopwatch.instrumentation.runtime.guard import LAST_STEP_NOTICE, Action, LoopGuard, StepReport
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.observer import BudgetSnapshot, RunInfo, ToolRecord
from loopwatch.instrumentation.runtime.reasons import OUTCOME_OF, Outcome, StopReason
from loopwatch.instrumentation.runtime.retry import ToolError
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import (
    Message,
    ModelResponse,
    RunResult,
    ToolCall,
    Usage,
)
from loopwatch.instrumentation.testing import (
    CounterModel,
    FakeClock,
    FakeModel,
    LoopingModel,
    ScriptedTool,
    flaky_tool,
    text_response,
    tool_call,
    tool_response,
)

ROOT = Path(__file__).resolve().parent.parent


def echo(text: str) -> str:
    """Repeat the text."""
    return text


def registry() -> ToolRegistry:
    reg = ToolRegistry(breaker=None)
    reg.register(echo)
    return reg


class Recorder:
    """A RunObserver that writes down every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.calls if n == name]

    def run_started(self, info: RunInfo, budget: BudgetSnapshot) -> None:
        self.calls.append(("run_started", (info, budget)))

    def step_started(self, step: int, budget: BudgetSnapshot) -> None:
        self.calls.append(("step_started", (step, budget)))

    def model_call_started(self, step: int, model: str | None, budget: BudgetSnapshot) -> None:
        self.calls.append(("model_call_started", (step, model, budget)))

    def model_call_ended(
        self, response: ModelResponse | None, error: BaseException | None, budget: BudgetSnapshot
    ) -> None:
        self.calls.append(("model_call_ended", (response, error, budget)))

    def tool_call_started(self, call: ToolCall, fingerprint: str, budget: BudgetSnapshot) -> None:
        self.calls.append(("tool_call_started", (call, fingerprint, budget)))

    def tool_call_ended(self, record: ToolRecord, budget: BudgetSnapshot) -> None:
        self.calls.append(("tool_call_ended", (record, budget)))

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        self.calls.append(("event", (name, dict(attributes))))

    def step_ended(self, step: int, decision: str, budget: BudgetSnapshot) -> None:
        self.calls.append(("step_ended", (step, decision, budget)))

    def run_ended(self, result: RunResult, budget: BudgetSnapshot) -> None:
        self.calls.append(("run_ended", (result, budget)))


class Exploding(Recorder):
    def __getattribute__(self, name: str) -> Any:
        if name in {"calls", "names", "of"} or name.startswith("__"):
            return object.__getattribute__(self, name)
        raise RuntimeError(f"observer bug in {name}")


@pytest.fixture(autouse=True)
def _clean_globals() -> Iterator[None]:
    drops.reset_drops()
    observer.set_observer_factory(None)
    yield
    observer.set_observer_factory(None)


# --- provider stop signals ----------------------------------------------------------------------


def _decide(response: ModelResponse, **kw: Any) -> tuple[LoopGuard, Any]:
    guard = LoopGuard(**kw)
    assert guard.before_step().action is Action.CONTINUE
    return guard, guard.after_model(response)


@pytest.mark.parametrize("signal", ["end_turn", "stop", "stop_sequence", "END_TURN", None])
def test_completion_signals_complete(signal: str | None) -> None:
    guard, d = _decide(text_response("hi", stop_reason=signal))
    assert d.action is Action.COMPLETE and d.reason is StopReason.COMPLETED and d.done
    assert guard.finish().final == "hi"


@pytest.mark.parametrize("signal", ["tool_use", "tool_calls", "function_call"])
def test_tool_signals_continue(signal: str) -> None:
    _, d = _decide(tool_response(tool_call("echo", text="x"), stop_reason=signal))
    assert d.action is Action.RUN_TOOLS and not d.done


@pytest.mark.parametrize(
    "signal", ["max_tokens", "length", "model_context_window_exceeded", "max_output_tokens"]
)
def test_truncation_signals(signal: str) -> None:
    guard, d = _decide(text_response("half an ans", stop_reason=signal))
    assert d.reason is StopReason.OUTPUT_TRUNCATED and d.stop
    assert guard.finish().final == "half an ans"


@pytest.mark.parametrize("signal", ["refusal", "content_filter"])
def test_refusal_signals(signal: str) -> None:
    _, d = _decide(text_response("", stop_reason=signal))
    assert d.reason is StopReason.REFUSAL


def test_unknown_signal_stops_with_error_naming_it() -> None:
    guard, d = _decide(text_response("?", stop_reason="server_tool_limit"))
    assert d.reason is StopReason.ERROR
    assert "unknown provider stop signal 'server_tool_limit'" in d.explanation
    assert guard.finish().outcome is Outcome.ERROR


def test_pause_turn_resends() -> None:
    _, d = _decide(text_response("", stop_reason="pause_turn"))
    assert d.action is Action.RESEND and not d.done


def test_tool_signal_without_calls_is_an_error() -> None:
    _, d = _decide(text_response("", stop_reason="tool_calls"))
    assert d.reason is StopReason.ERROR
    assert "signalled 'tool_calls' but the response has no tool call" in d.explanation


def test_tool_calls_outrank_a_stop_signal() -> None:
    # Decision: a response with tool calls runs them even if the provider said "stop".
    _, d = _decide(tool_response(tool_call("echo", text="x"), stop_reason="stop"))
    assert d.action is Action.RUN_TOOLS


def test_pause_turn_through_run_calls_the_model_again() -> None:
    model = FakeModel([text_response("", stop_reason="pause_turn"), "answer"])
    result = run(model, registry(), "go")
    assert result.final == "answer" and result.counters["model_calls"] == 2
    assert len(model.calls[1]) == len(model.calls[0]) + 1  # the paused turn was kept


# --- the guard's state machine ----------------------------------------------------------------


def test_stop_is_sticky_and_finish_is_built_once() -> None:
    guard = LoopGuard(LoopLimits(max_steps=1))
    guard.before_step()
    guard.after_model(tool_response(tool_call("echo", text="a")))
    d = guard.before_step()
    assert d.reason is StopReason.MAX_STEPS
    assert guard.before_tool(tool_call("echo", text="b")) is d
    assert guard.after_model(text_response("late")) is d
    assert guard.stop(StopReason.CANCELLED) is d
    assert guard.finish() is guard.finish()


def test_a_loop_that_skips_before_step_still_counts_steps() -> None:
    guard = LoopGuard(LoopLimits(max_steps=2))
    assert guard.after_model(tool_response(tool_call("echo", text="a"))).action is Action.RUN_TOOLS
    assert guard.after_model(tool_response(tool_call("echo", text="b"))).action is Action.RUN_TOOLS
    assert guard.steps == 2 and guard.model_calls == 2
    d = guard.after_model(tool_response(tool_call("echo", text="c")))
    assert d.reason is StopReason.MAX_STEPS and guard.model_calls == 2


def test_finish_without_a_decision_is_an_error() -> None:
    guard = LoopGuard()
    guard.before_step()
    result = guard.finish([Message("user", "hi")])
    assert result.stop_reason is StopReason.ERROR
    assert "ended without a stop decision" in result.explanation
    assert result.messages == [Message("user", "hi")]


def test_caller_can_stop_for_its_own_reason() -> None:
    guard = LoopGuard()
    guard.before_step()
    d = guard.stop("guardrail", "Stopped at step 1: the caller's policy said so.")
    assert d.reason is StopReason.GUARDRAIL
    assert guard.finish().explanation == "Stopped at step 1: the caller's policy said so."


def test_run_result_is_filled() -> None:
    limits = LoopLimits(max_steps=2, max_tokens=10_000)
    result = run(
        CounterModel(usage=Usage(10, 5)),
        registry(),
        "go",
        limits=limits,
        task_type="triage",
        agent_name="triager",
        raise_on_stop=False,
    )
    assert re.fullmatch(r"[0-9a-f]{32}", result.run_id)
    assert result.task_type == "triage" and result.agent_name == "triager"
    assert result.limit == "steps"
    assert result.limits_version == limits.version
    assert set(result.counters) == set(semconv.BUDGETS)
    assert result.counters["tokens"] == 30 and result.counters["model_calls"] == 2
    assert result.progress == {"recent_new_calls": 2, "max_same_error": 0, "max_same_call": 1}
    assert result.outcome is OUTCOME_OF[result.stop_reason]
    assert [(s.index, s.kind) for s in result.steps] == [
        (1, "tool"),
        (2, "warning"),
        (2, "tool"),
        (2, "stop"),
    ]


def test_recent_new_calls_counts_only_the_last_window() -> None:
    calls = [tool_call("echo", text=t) for t in ("a", "b", "a", "c", "b")]
    model = FakeModel([*calls, "done"])
    result = run(model, registry(), "go", limits=LoopLimits(max_steps=10))
    # Steps 4-6 (window of 3): c is new, b was seen at step 2, step 6 called no tool.
    assert result.progress["recent_new_calls"] == 1
    assert result.progress["max_same_call"] == 2


# --- soft warnings and the last step -------------------------------------------------------------


def test_soft_warning_at_80_percent() -> None:
    rec = Recorder()
    result = run(
        CounterModel(),
        registry(),
        "go",
        limits=LoopLimits(max_steps=5),
        observer=rec,
        raise_on_stop=False,
    )
    warnings = [s for s in result.steps if s.kind == "warning"]
    assert [(w.index, w.detail["budget"]) for w in warnings] == [(4, "steps")]
    events = [a for a in rec.of("event") if a[0] == semconv.EVENT_BUDGET_WARNING]
    assert events == [
        (
            semconv.EVENT_BUDGET_WARNING,
            {
                "loopwatch.budget": "steps",
                "loopwatch.budget.used": 4.0,
                "loopwatch.budget.limit": 5.0,
                "loopwatch.budget.threshold": 0.8,
            },
        )
    ]


def test_no_warning_when_soft_threshold_is_off() -> None:
    result = run(
        CounterModel(),
        registry(),
        "go",
        limits=LoopLimits(max_steps=5, soft_threshold=None),
        raise_on_stop=False,
    )
    assert not [s for s in result.steps if s.kind == "warning"]


def test_answer_on_last_step_offers_no_tools() -> None:
    model = FakeModel([tool_call("echo", text="a"), tool_call("echo", text="b"), "final"])
    limits = LoopLimits(max_steps=3, answer_on_last_step=True)
    result = run(model, registry(), "go", limits=limits)
    assert result.final == "final"
    assert [len(t) for t in model.tools_offered] == [1, 1, 0]
    assert model.calls[2][-1] == Message("user", LAST_STEP_NOTICE)


# --- gates and caps ------------------------------------------------------------------------------


def _gated(**flags: Any) -> tuple[ToolRegistry, ScriptedTool]:
    reg = registry()
    delete = ScriptedTool(["deleted"], params=("path",), name="delete")
    reg.register(delete, name="delete", **flags)
    return reg, delete


def test_refused_approval_is_permission_denied() -> None:
    reg, delete = _gated(requires_approval=True)
    asked: list[ToolCall] = []

    def approver(call: ToolCall) -> bool:
        asked.append(call)
        return False

    model = FakeModel([tool_call("delete", path="/etc")])
    with pytest.raises(RunInterrupted) as info:
        run(model, reg, "clean up", approver=approver)
    assert info.value.reason is StopReason.PERMISSION_DENIED
    assert delete.calls == [] and [c.name for c in asked] == ["delete"]
    assert "the approver refused delete(path='/etc')" in info.value.result.explanation


def test_granted_approval_runs_the_tool() -> None:
    reg, delete = _gated(requires_approval=True)
    model = FakeModel([tool_call("delete", path="/tmp/x"), "done"])
    assert run(model, reg, "clean up", approver=lambda call: True).ok
    assert delete.calls == [{"path": "/tmp/x"}]


def test_approval_without_an_approver_is_refused() -> None:
    reg, delete = _gated(requires_approval=True)
    result = run(FakeModel([tool_call("delete", path="a")]), reg, "x", raise_on_stop=False)
    assert result.stop_reason is StopReason.PERMISSION_DENIED and delete.calls == []
    assert "requires approval and no approver is set" in result.explanation


def test_guardrail_vetoes_a_call() -> None:
    reg, delete = _gated()

    def outside_tmp(call: ToolCall) -> str | None:
        path = call.arguments["path"] if isinstance(call.arguments, dict) else ""
        return None if str(path).startswith("/tmp/") else f"{path} is outside /tmp"

    model = FakeModel([tool_call("delete", path="/tmp/a"), tool_call("delete", path="/home")])
    result = run(model, reg, "x", guardrails=[outside_tmp], raise_on_stop=False)
    assert result.stop_reason is StopReason.GUARDRAIL and result.outcome is Outcome.INTERRUPTED
    assert delete.calls == [{"path": "/tmp/a"}]
    assert result.explanation == (
        "Stopped at step 2: a guardrail vetoed delete(path='/home'): /home is outside /tmp."
    )


def test_per_tool_cap() -> None:
    model = CounterModel()
    limits = LoopLimits(max_calls_per_tool={"echo": 2})
    result = run(model, registry(), "go", limits=limits, raise_on_stop=False)
    assert result.stop_reason is StopReason.MAX_TOOL_CALLS and result.limit == "tool_calls"
    assert result.counters["tool_calls"] == 2 and result.counters["steps"] == 3
    assert "echo was called 2 times, its cap (max_calls_per_tool)" in result.explanation


def test_an_answer_past_the_budget_is_accepted() -> None:
    reg = registry()
    reg.register_done()
    big = Usage(5000, 100)
    for final in (
        text_response("the answer", usage=big),
        tool_response(ToolCall("d1", "done", '{"answer": "the answer"}'), usage=big),
    ):
        result = run(FakeModel([final]), reg, "go", limits=LoopLimits(max_tokens=1000))
        assert result.ok and result.final == "the answer"


def test_describe_call_cuts_long_values() -> None:
    from loopwatch.instrumentation.runtime.guard import describe_call

    assert describe_call(ToolCall("1", "f", {"a": "x", "n": 2})) == "f(a='x', n=2)"
    long = describe_call(ToolCall("1", "f", {"a": "y" * 100}), width=20)
    assert long == "f(a='yyyyyyyyyyyyyyyy...)"
    assert describe_call(ToolCall("1", "f", "{raw")) == "f({raw)"


def test_run_wide_tool_and_model_call_caps() -> None:
    r1 = run(
        CounterModel(), registry(), "go", limits=LoopLimits(max_tool_calls=2), raise_on_stop=False
    )
    assert r1.stop_reason is StopReason.MAX_TOOL_CALLS and r1.counters["tool_calls"] == 2
    r2 = run(
        CounterModel(), registry(), "go", limits=LoopLimits(max_model_calls=2), raise_on_stop=False
    )
    assert r2.stop_reason is StopReason.MAX_MODEL_CALLS and r2.limit == "model_calls"
    assert r2.counters["model_calls"] == 2


# --- detectors ---------------------------------------------------------------------------


def test_repeat_exempt_tool_polls_until_idle() -> None:
    reg = ToolRegistry(breaker=None)
    poll = ScriptedTool(["pending"], params=("job",), name="poll")
    reg.register(poll, name="poll", repeat_exempt=True)
    limits = LoopLimits(max_steps=20, max_idle_turns=3)
    result = run(
        LoopingModel(tool_call("poll", job="7")), reg, "wait", limits=limits, raise_on_stop=False
    )
    # Not repeated_action nor repeated_tool_call: step 1 brought a new result, steps 2-4 none.
    assert result.stop_reason is StopReason.NO_PROGRESS
    assert result.counters["steps"] == 4 and len(poll.calls) == 4
    assert (
        "3 steps in a row (steps 2-4) made no call not made before and got no result not seen "
        "before (max_idle_turns=3)" in result.explanation
    )


def test_repeat_exempt_by_argument() -> None:
    result = run(
        LoopingModel(tool_call("echo", text="same")),
        registry(),
        "go",
        limits=LoopLimits(max_steps=3),
        repeat_exempt=["echo"],
        raise_on_stop=False,
    )
    assert result.stop_reason is StopReason.MAX_STEPS


def test_consecutive_failures_across_tools() -> None:
    reg = ToolRegistry(breaker=None)
    for name, code in (("a", "E1"), ("b", "E2"), ("c", "E3")):
        reg.register(ScriptedTool([ToolError(code, "bad")], params=("x",), name=name), name=name)
    model = FakeModel([tool_call(n, x="1") for n in "abc"])
    result = run(model, reg, "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.TOOL_FAILURES
    assert result.explanation.startswith(
        "Stopped at step 3: 3 tool calls in a row failed (steps 1-3), the last c(x='1') with "
        "E3: 'bad'."
    )


def test_a_success_resets_the_failure_count() -> None:
    reg = registry()
    reg.register(ScriptedTool([ToolError("E", "bad")], params=("x",), name="bad"), name="bad")
    script = [
        tool_call("bad", x="1"),
        tool_call("bad", x="2"),
        tool_call("echo", text="ok"),
        tool_call("bad", x="3"),
        "done",
    ]
    limits = LoopLimits(max_same_error=None)
    assert run(FakeModel(script), reg, "go", limits=limits).ok


def test_custom_progress_signal() -> None:
    reports: list[StepReport] = []

    def progress(report: StepReport) -> bool:
        reports.append(report)
        return False

    limits = LoopLimits(max_idle_turns=2)
    result = run(
        CounterModel(), registry(), "go", limits=limits, progress=progress, raise_on_stop=False
    )
    assert result.stop_reason is StopReason.NO_PROGRESS and result.counters["steps"] == 2
    assert [r.index for r in reports] == [1, 2]
    assert reports[0].new_results == 1 and reports[0].tools[0].status == "ok"


def test_non_json_arguments_become_invalid_arguments_for_the_model() -> None:
    bad = ToolCall("c1", "echo", '{"text": "unterminated')
    model = FakeModel([tool_response(bad), "sorry"])
    result = run(model, registry(), "go")
    error = json.loads(next(m.content for m in result.messages if m.role == "tool") or "")
    assert error["code"] == "INVALID_ARGUMENTS"
    assert result.ok


def test_raw_string_arguments_compare_like_parsed_ones() -> None:
    first = ToolCall("c1", "echo", '{"text": "x"}')
    second = ToolCall("c2", "echo", {"text": "x"})
    result = run(FakeModel([first, second]), registry(), "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ACTION


# --- errors ---------------------------------------------------------------------------------------


def test_model_exception_stops_with_error_and_chains_the_cause() -> None:
    class Broken:
        def complete(self, messages: Any, tools: Any) -> ModelResponse:
            raise ConnectionError("provider unreachable")

    with pytest.raises(RunFailed) as info:
        run(Broken(), registry(), "go")
    assert isinstance(info.value.__cause__, ConnectionError)
    result = info.value.result
    assert result.stop_reason is StopReason.ERROR
    assert result.explanation == (
        "Stopped at step 1: the model call raised ConnectionError: provider unreachable."
    )


def test_verify_exception_stops_with_error() -> None:
    def verify(result: RunResult) -> list[str]:
        raise ValueError("checker broke")

    result = run(FakeModel(["x"]), registry(), "go", verify=verify, raise_on_stop=False)
    assert result.stop_reason is StopReason.ERROR
    assert "the completion check raised ValueError: checker broke" in result.explanation


def test_agent_loop_error_pickles_and_reads_well() -> None:
    result = run(
        CounterModel(), registry(), "go", limits=LoopLimits(max_steps=1), raise_on_stop=False
    )
    err = AgentLoopError.for_result(result)
    assert str(err).startswith("max_steps: Stopped after step 1")
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err) and copy.reason is StopReason.MAX_STEPS
    assert copy.result == result and copy.outcome is Outcome.LIMIT


# --- the observer hook -------------------------------------------------------------------


def test_observer_hears_the_lifecycle_in_order() -> None:
    rec = Recorder()
    model = FakeModel([tool_call("echo", text="a"), "done"])
    result = run(model, registry(), "go", observer=rec, task_type="t1")
    assert rec.names() == [
        "run_started",
        "step_started",
        "model_call_started",
        "model_call_ended",
        "tool_call_started",
        "tool_call_ended",
        "step_ended",
        "step_started",
        "model_call_started",
        "model_call_ended",
        "step_ended",
        "run_ended",
    ]
    info, budget = rec.of("run_started")[0]
    assert info.run_id == result.run_id and info.task_type == "t1"
    assert info.limits_version == result.limits_version and info.parent_run_id is None
    assert set(budget.used) == set(semconv.BUDGETS) == set(budget.limits)
    assert [a[1] for a in rec.of("step_ended")] == ["continue", "completed"]
    ((record, _),) = rec.of("tool_call_ended")
    call = ToolCall(record.call.id, "echo", {"text": "a"})
    assert record.fingerprint == call_fingerprint(call) and record.status == "ok"
    assert rec.of("tool_call_started")[0][1] == record.fingerprint
    assert rec.of("run_ended")[0][0] is result


def test_budget_snapshot_max_utilization() -> None:
    rec = Recorder()
    run(
        CounterModel(usage=Usage(50, 50)),
        registry(),
        "go",
        observer=rec,
        limits=LoopLimits(max_steps=4, max_tokens=1000),
        raise_on_stop=False,
    )
    _, budget = rec.of("run_ended")[0]
    assert budget.used["steps"] == 4 and budget.limits["steps"] == 4
    assert budget.used["tokens"] == 400 and budget.limits["tokens"] == 1000
    assert budget.limits["cost_usd"] is None
    assert budget.max_utilization == 1.0
    decisions = [a[1] for a in rec.of("step_ended")]
    # The last step's span carries the stop: its end found no step left.
    assert decisions == ["continue", "continue", "continue", "max_steps"]


def test_observer_sees_errors_and_retries() -> None:
    rec = Recorder()
    reg = ToolRegistry(breaker=None, sleep=lambda s: None, rng=lambda: 0.0)
    reg.register(flaky_tool(1, TimeoutError("slow"), "ok", params=("q",)), name="fetch")
    reg.register(
        ScriptedTool([ToolError("NOT_FOUND", "gone")], params=("q",), name="get"), name="get"
    )
    model = FakeModel([tool_call("fetch", q="a"), tool_call("get", q="b"), "done"])
    run(model, reg, "go", observer=rec)
    records = [a[0] for a in rec.of("tool_call_ended")]
    assert [r.retries for r in records] == [1, 0]
    assert records[1].error_code == "NOT_FOUND"
    assert records[1].error_fingerprint == error_fingerprint("get", "NOT_FOUND", "gone")
    retries = [a[1] for a in rec.of("event") if a[0] == semconv.EVENT_RETRY]
    assert retries == [
        {
            semconv.GEN_AI_TOOL_NAME: "fetch",
            "loopwatch.retry.attempt": 1,
            "loopwatch.retry.delay_s": 0.0,
            semconv.ERROR_CODE: "TIMEOUT",
        }
    ]


def test_completion_rejected_event() -> None:
    rec = Recorder()
    run(
        FakeModel(["a", "b"]),
        registry(),
        "go",
        observer=rec,
        verify=lambda r: ["x"],
        raise_on_stop=False,
    )
    events = [a for a in rec.of("event") if a[0] == semconv.EVENT_COMPLETION_REJECTED]
    assert len(events) == 2


def test_a_failing_observer_never_changes_the_result() -> None:
    plain = run(
        CounterModel(),
        registry(),
        "go",
        limits=LoopLimits(max_steps=3),
        raise_on_stop=False,
        run_id="r1",
    )
    broken = run(
        CounterModel(),
        registry(),
        "go",
        limits=LoopLimits(max_steps=3),
        raise_on_stop=False,
        run_id="r1",
        observer=Exploding(),
    )
    assert broken.stop_reason is plain.stop_reason
    assert broken.messages == plain.messages and broken.steps == plain.steps
    assert drops.dropped()["observer_error"] > 10


def test_observer_factory_is_used_and_its_failure_counted() -> None:
    made: list[Recorder] = []

    def factory(info: RunInfo) -> Recorder:
        made.append(Recorder())
        return made[-1]

    observer.set_observer_factory(factory)
    run(FakeModel(["hi"]), registry(), "go")
    assert len(made) == 1 and made[0].names()[0] == "run_started"

    def broken_factory(info: RunInfo) -> Recorder:
        raise RuntimeError("no exporter")

    observer.set_observer_factory(broken_factory)
    assert run(FakeModel(["hi"]), registry(), "go").ok
    assert drops.dropped() == {"observer_error": 1}


def test_explicit_observer_beats_the_factory() -> None:
    observer.set_observer_factory(lambda info: pytest.fail("factory must not be called"))
    rec = Recorder()
    run(FakeModel(["hi"]), registry(), "go", observer=rec)
    assert rec.names()[-1] == "run_ended"


# --- parent guards (sub-agents, outer loops) ------------------------------------------------------


def test_child_draws_from_the_parent_budget() -> None:
    parent = LoopGuard(LoopLimits(max_model_calls=5), agent_name="planner")
    parent.start()
    assert parent.before_step().action is Action.CONTINUE
    parent.after_model(tool_response(tool_call("delegate", task="x")))
    child = run(
        CounterModel(),
        registry(),
        "sub-task",
        parent=parent,
        raise_on_stop=False,
        limits=LoopLimits(max_steps=50),
    )
    assert child.stop_reason is StopReason.MAX_MODEL_CALLS
    assert child.counters["model_calls"] == 4  # 5 - the parent's own call
    assert "model-call budget of the parent run" in child.explanation
    assert parent.model_calls == 5 and parent.tool_calls == 4
    parent.end_step()
    assert parent.before_step().reason is StopReason.MAX_MODEL_CALLS


def test_child_stops_at_the_parent_deadline_and_cancel() -> None:
    clock = FakeClock()
    parent = LoopGuard(LoopLimits(max_wall_s=30), clock=clock)
    parent.start()
    model = CounterModel(clock=clock, latency_s=10)
    child = run(
        model,
        registry(),
        "sub",
        parent=parent,
        raise_on_stop=False,
        limits=LoopLimits(max_steps=50),
    )
    assert child.stop_reason is StopReason.TIMEOUT
    assert "wall-clock budget of the parent run" in child.explanation

    cancelled = LoopGuard(cancel=lambda: True)
    assert (
        run(CounterModel(), registry(), "x", parent=cancelled, raise_on_stop=False).stop_reason
        is StopReason.CANCELLED
    )


def test_child_reports_its_parent_to_the_observer() -> None:
    parent = LoopGuard(run_id="p" * 32)
    rec = Recorder()
    run(FakeModel(["hi"]), registry(), "x", parent=parent, observer=rec)
    info, _ = rec.of("run_started")[0]
    assert info.parent_run_id == "p" * 32


# --- the hand-written loop in docs/runtime.md runs as written ----------------------------


@pytest.mark.parametrize("doc", ["docs/runtime.md", "README.md"])
def test_docs_hand_written_loop_example_runs(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "LoopGuard(" in b and "guard.finish()" in b)
    namespace: dict[str, Any] = {}
    exec(compile(example, doc, "exec"), namespace)
    result = namespace["result"]
    assert isinstance(result, RunResult) and result.ok
    assert result.final == "Order A-17 has shipped."


class _Stands(Exception):
    def __init__(self, reason: object) -> None:
        super().__init__(f"stands for {reason!r}")
        self.stop_reason = reason


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("circuit_open", "circuit_open"),
        (StopReason.REFUSAL, "refusal"),
        ("completed", "error"),  # an exception never ends a run as a success
        ("no such reason", "error"),
        (None, "error"),
    ],
)
def test_a_model_error_may_say_which_stop_it_stands_for(reason: object, expected: str) -> None:
    guard = LoopGuard(LoopLimits())
    guard.start([Message("user", "hi")])
    guard.before_step()
    d = guard.model_call_failed(_Stands(reason))
    assert d.done and d.reason == expected
    assert guard.finish().explanation == (
        f"Stopped at step 1: the model call raised _Stands: stands for {reason!r}."
    )


def test_complete_keeps_the_answer_a_framework_returned() -> None:
    guard = LoopGuard(LoopLimits())
    guard.start([Message("user", "hi")])
    guard.before_step()
    d = guard.complete("It has shipped.")
    assert d.done and d.reason == "completed" and d.final == "It has shipped."
    assert guard.stop(StopReason.CANCELLED).reason == "completed"  # the first stop wins
    result = guard.finish()
    assert result.stop_reason == "completed" and result.final == "It has shipped."
    assert "Stopped" not in result.explanation
