"""Golden cases (issue 2): each asserts the stop reason, the step count and the partial result.

Everything runs through the public API: ``run``, the real ``ToolRegistry`` and the public
fakes of ``loopwatch.instrumentation.testing``. Time is a FakeClock; nothing sleeps.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from loopwatch.instrumentation.runtime.errors import AgentStuck, LimitReached, ModelStopped
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.reasons import Outcome, StopReason
from loopwatch.instrumentation.runtime.retry import (
    BreakerState,
    CircuitBreaker,
    RetryPolicy,
    ToolError,
)
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import Message, RunResult, ToolCall, Usage
from loopwatch.instrumentation.testing import (
    CounterModel,
    FakeClock,
    FakeModel,
    LoopingModel,
    ScriptedTool,
    failing_tool,
    flaky_tool,
    text_response,
    tool_call,
    tool_response,
)


def echo(text: str) -> str:
    """Repeat the text."""
    return text


def registry(**kwargs: Any) -> ToolRegistry:
    reg = ToolRegistry(breaker=None, **kwargs)
    reg.register(echo)
    return reg


def tool_steps(result: RunResult) -> list[dict[str, Any]]:
    return [s.detail for s in result.steps if s.kind == "tool"]


def tool_messages(result: RunResult) -> list[str]:
    return [m.content or "" for m in result.messages if m.role == "tool"]


# --- seed 000's three runs -----------------------------------------------------------------


def test_counter_model_stops_at_exactly_max_steps() -> None:
    with pytest.raises(LimitReached) as info:
        run(CounterModel(), registry(), "start", limits=LoopLimits(max_steps=3))
    result = info.value.result
    assert info.value.reason is StopReason.MAX_STEPS
    assert result.stop_reason is StopReason.MAX_STEPS
    assert result.outcome is Outcome.LIMIT and result.limit == "steps"
    assert result.counters["steps"] == 3
    assert result.counters["model_calls"] == 3
    assert len(tool_steps(result)) == 3
    assert tool_messages(result) == ["turn 1", "turn 2", "turn 3"]
    assert result.final is None
    assert result.explanation.startswith("Stopped after step 3: all 3 steps (max_steps=3)")
    assert "echo(text='turn 3')" in result.explanation


def test_looping_model_stops_with_repeated_action_after_one_step() -> None:
    same = ToolCall("c1", "echo", {"text": "ping"})
    with pytest.raises(AgentStuck) as info:
        run(LoopingModel(same), registry(), "start", limits=LoopLimits(max_steps=8))
    result = info.value.result
    assert result.stop_reason is StopReason.REPEATED_ACTION
    # The second step repeated the call and got the same result: nothing new, stopped at
    # step 2 (as when the repeat was refused before it ran), 6 steps before max_steps.
    assert len(tool_steps(result)) == 2
    assert result.counters["tool_calls"] == 2
    assert result.counters["steps"] == 2
    assert tool_messages(result) == ["ping", "ping"]
    assert result.explanation == (
        "Stopped at step 2: echo(text='ping') repeated the call just before it and returned "
        "the same result both times ('ping'; steps 1, 2). Tell the model what the result "
        "means, or mark the tool repeat_exempt if repeating it is legitimate."
    )


@pytest.mark.parametrize("signal", ["max_tokens", "length"])
def test_truncated_response_keeps_its_text(signal: str) -> None:
    truncated = text_response("The quarterly totals are: Q1 4,210; Q2", stop_reason=signal)
    with pytest.raises(ModelStopped) as info:
        run(FakeModel([truncated]), registry(), "Summarise the quarterly totals")
    result = info.value.result
    assert result.stop_reason is StopReason.OUTPUT_TRUNCATED
    assert result.final == "The quarterly totals are: Q1 4,210; Q2"
    assert result.counters["steps"] == 1
    assert result.messages[-1].content == "The quarterly totals are: Q1 4,210; Q2"
    assert f"(stop signal {signal!r})" in result.explanation


# --- no-progress detectors ------------------------------------------------------------------


def test_unknown_tool_called_repeatedly_stops_with_repeated_error() -> None:
    # New arguments every time, so only the error fingerprint (tool + UNKNOWN_TOOL) repeats.
    result = run(CounterModel(tool="frobnicate"), registry(), "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ERROR
    assert result.counters["steps"] == 3
    errors = [json.loads(c) for c in tool_messages(result)]
    assert [e["code"] for e in errors] == ["UNKNOWN_TOOL"] * 3
    assert [d["error_code"] for d in tool_steps(result)] == ["UNKNOWN_TOOL"] * 3
    assert (
        'frobnicate failed 3 times with the same error, UNKNOWN_TOOL: "unknown tool '
        "'frobnicate'; available tools: echo\" (steps 1-3), last for frobnicate(text='turn 3')."
    ) in result.explanation
    assert result.progress["max_same_error"] == 3


def _file_tools() -> ToolRegistry:
    reg = ToolRegistry(breaker=None)

    def read_file(path: str) -> str:
        """Read a file."""
        raise ToolError("NOT_FOUND", f"no such file: {path}")

    def ls() -> str:
        """List the directory."""
        return "src/ README.md"

    def grep(pattern: str) -> str:
        """Search the files."""
        return f"src/app.ts:1: {pattern}"

    for fn in (read_file, ls, grep):
        reg.register(fn)
    return reg


def test_same_missing_file_read_three_times_between_other_calls() -> None:
    model = FakeModel(
        [
            tool_call("read_file", path="src/foo.ts"),
            tool_call("ls"),
            tool_call("read_file", path="src/foo.ts"),
            tool_call("grep", pattern="foo"),
            tool_call("read_file", path="src/foo.ts"),
            "never reached",
        ]
    )
    result = run(model, _file_tools(), "fix foo", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_TOOL_CALL
    assert result.counters["steps"] == 5
    assert len(tool_steps(result)) == 5
    assert result.explanation == (
        "Stopped at step 5: read_file(path='src/foo.ts') returned NOT_FOUND 3 times "
        "(steps 1, 3, 5). Check the path or name, or list what exists first."
    )
    assert result.progress["max_same_call"] == 3


class Shell:
    """cd and ls over a fake folder tree: every cd('..') changes the state."""

    def __init__(self) -> None:
        self.cwd = "/a/b/c/d"

    def cd(self, path: str) -> str:
        """Change directory."""
        self.cwd = self.cwd.rsplit("/", 1)[0] or "/"
        return self.cwd

    def ls(self) -> str:
        """List the current directory."""
        return f"listing of {self.cwd}"


def _shell_registry() -> ToolRegistry:
    shell = Shell()
    reg = ToolRegistry(breaker=None)
    reg.register(shell.cd, name="cd")
    reg.register(shell.ls, name="ls")
    return reg


def _climb_script() -> list[Any]:
    climb: list[Any] = []
    for _ in range(3):
        climb += [tool_call("cd", path=".."), tool_call("ls")]
    return [*climb, "found it in /a"]


def test_cd_up_three_times_with_new_results_does_not_stop() -> None:
    # cd, ls, cd, ls, cd, ls: the same calls, but every result is new, so no detector fires.
    result = run(
        FakeModel(_climb_script()), _shell_registry(), "find it", limits=LoopLimits(max_steps=10)
    )
    assert result.stop_reason is StopReason.COMPLETED
    assert result.counters["steps"] == 7
    assert tool_messages(result)[::2] == ["/a/b/c", "/a/b", "/a"]
    assert result.final == "found it in /a"


def test_counting_calls_alone_stops_the_same_climb() -> None:
    # The option docs/runtime.md ("The detectors") keeps available: stricter, and it stops this
    # legitimate run.
    result = run(
        FakeModel(_climb_script()),
        _shell_registry(),
        "find it",
        limits=LoopLimits(max_steps=10, count_calls_only=True),
        raise_on_stop=False,
    )
    assert result.stop_reason is StopReason.REPEATED_TOOL_CALL
    assert result.counters["steps"] == 5
    assert "cd(path='..') was called 3 times (steps 1, 3, 5)" in result.explanation


def test_cycle_a_b_a_b_stops() -> None:
    reg = ToolRegistry(breaker=None)

    def search(q: str) -> str:
        """Search."""
        return f"no results for {q}"

    reg.register(search)
    a, b = {"q": "alpha"}, {"q": "beta"}
    model = FakeModel([tool_call("search", **x) for x in (a, b, a, b, a)])
    result = run(model, reg, "look", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert result.counters["steps"] == 4
    assert len(tool_steps(result)) == 3  # the 4th call (B again) never ran
    assert "search(q='beta') would complete a cycle A,B,A,B" in result.explanation


# --- budgets --------------------------------------------------------------------------------


def test_token_budget_stops() -> None:
    model = CounterModel(usage=Usage(600, 100))
    result = run(model, registry(), "go", limits=LoopLimits(max_tokens=2000), raise_on_stop=False)
    assert result.stop_reason is StopReason.TOKEN_BUDGET and result.limit == "tokens"
    assert result.counters["steps"] == 3
    assert result.usage.total_tokens == 2100
    # Step 3's model call went over the budget: its tool call does not start.
    assert result.explanation.startswith(
        "Stopped at step 3 before echo(text='turn 3'): the token budget is used up "
        "(2100 of max_tokens=2000)."
    )
    assert len(tool_steps(result)) == 2


def test_cost_budget_stops() -> None:
    model = CounterModel(usage=Usage(10, 10, cost_usd=0.01))
    limits = LoopLimits(max_cost_usd=0.025)
    result = run(model, registry(), "go", limits=limits, raise_on_stop=False)
    assert result.stop_reason is StopReason.COST_BUDGET and result.limit == "cost_usd"
    assert result.counters["steps"] == 3
    assert result.usage.cost_usd == pytest.approx(0.03)
    assert len(tool_steps(result)) == 2
    assert "the cost budget is used up ($0.0300 of max_cost_usd=0.025)" in result.explanation


def test_time_budget_stops_on_a_fake_clock() -> None:
    clock = FakeClock()
    model = CounterModel(clock=clock, latency_s=10.0)
    result = run(
        model, registry(), "go", limits=LoopLimits(max_wall_s=25), clock=clock, raise_on_stop=False
    )
    # t=10 after step 1, t=20 after step 2; step 3's model call ends at t=30, past the
    # deadline, so its tool call never starts.
    assert result.stop_reason is StopReason.TIMEOUT and result.limit == "wall_s"
    assert result.counters["steps"] == 3
    assert result.counters["wall_s"] == 30.0
    assert len(tool_steps(result)) == 2
    assert "Stopped at step 3 before echo(text='turn 3')" in result.explanation


# --- interruptions and completion ----------------------------------------------------------


def test_cancel_stops_with_no_tool_started_after_it() -> None:
    cancel = threading.Event()
    reg = ToolRegistry(breaker=None)
    first = ScriptedTool(["done"], params=("x",), name="first", on_call=lambda _: cancel.set())
    second = ScriptedTool(["never"], params=("x",), name="second")
    reg.register(first, name="first")
    reg.register(second, name="second")
    model = FakeModel([tool_response(tool_call("first", x="1"), tool_call("second", x="2"))])
    result = run(model, reg, "go", cancel=cancel, raise_on_stop=False)
    assert result.stop_reason is StopReason.CANCELLED
    assert result.outcome is Outcome.INTERRUPTED
    assert result.counters["steps"] == 1
    assert len(first.calls) == 1 and second.calls == []
    assert [d["tool"] for d in tool_steps(result)] == ["first"]
    assert "before second(x='2'): the run was cancelled" in result.explanation


def test_done_tool_completes_with_its_arguments() -> None:
    reg = registry()
    reg.register_done()
    model = FakeModel(
        [tool_call("echo", text="checking"), tool_call("done", answer="42"), "never reached"]
    )
    result = run(model, reg, "what is 6*7?")
    assert result.ok and result.stop_reason is StopReason.COMPLETED
    assert result.final == "42"
    assert result.counters["steps"] == 2
    assert result.counters["tool_calls"] == 1  # the done call is not a tool run
    assert result.explanation == ""


def test_verify_rejecting_twice_gives_completion_rejected() -> None:
    seen: list[str | None] = []

    def verify(candidate: RunResult) -> list[str]:
        seen.append(candidate.final)
        return ["cite at least one tool result"]

    model = FakeModel(["it is 42", "really, 42"])
    with pytest.raises(AgentStuck) as info:
        run(model, registry(), "answer", verify=verify)
    result = info.value.result
    assert result.stop_reason is StopReason.COMPLETION_REJECTED
    assert result.counters["steps"] == 2
    assert seen == ["it is 42", "really, 42"]
    assert result.final == "really, 42"
    feedback = [m.content for m in result.messages if m.role == "user"][1]
    assert feedback is not None and "- cite at least one tool result" in feedback
    assert "rejected the answer 2 times (max_completion_rejects=2)" in result.explanation


def test_verify_passing_after_one_reject_completes() -> None:
    def verify(candidate: RunResult) -> list[str]:
        return [] if "source" in (candidate.final or "") else ["name the source"]

    result = run(FakeModel(["42", "42 (source: echo)"]), registry(), "answer", verify=verify)
    assert result.stop_reason is StopReason.COMPLETED
    assert result.counters["steps"] == 2
    assert result.final == "42 (source: echo)"
    assert [s.detail["unmet"] for s in result.steps if s.kind == "verify"] == [
        ["name the source"],
        [],
    ]


# --- the tool layer under the loop --------------------------------------------------------------


def test_transient_error_is_retried_then_succeeds() -> None:
    clock = FakeClock()
    keys = iter(["key-1", "key-2"])
    reg = ToolRegistry(
        breaker=None, sleep=clock.sleep, rng=lambda: 0.5, key_factory=lambda: next(keys)
    )
    send = flaky_tool(
        2, ToolError("HTTP_503", "busy", status=503), "sent", params=("to",), idempotent=True
    )
    reg.register(send, name="send_email", side_effects=True)
    model = FakeModel([tool_call("send_email", to="ops@example.com"), "sent it"])
    result = run(model, reg, "mail ops", clock=clock)
    assert result.stop_reason is StopReason.COMPLETED
    assert result.counters["steps"] == 2
    assert len(send.calls) == 3
    # Full jitter with rng=0.5: half of 100 ms, then half of 200 ms.
    assert clock.sleeps == pytest.approx([0.05, 0.1])
    assert [c["idempotency_key"] for c in send.calls] == ["key-1"] * 3
    assert tool_steps(result)[0]["retries"] == 2
    assert tool_messages(result) == ["sent"]


def test_permanent_error_is_not_retried() -> None:
    clock = FakeClock()
    reg = ToolRegistry(breaker=None, sleep=clock.sleep)
    lookup = failing_tool(ToolError("HTTP_404", "no such user", status=404), params=("user",))
    reg.register(lookup, name="lookup")
    model = FakeModel([tool_call("lookup", user="bob"), "bob does not exist"])
    result = run(model, reg, "find bob")
    assert result.stop_reason is StopReason.COMPLETED
    assert len(lookup.calls) == 1 and clock.sleeps == []
    error = json.loads(tool_messages(result)[0])
    assert error["code"] == "HTTP_404"
    assert tool_steps(result)[0]["retries"] == 0


def test_breaker_opens_then_half_opens() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_s=30.0, clock=clock)
    reg = ToolRegistry(breaker=breaker, retry=RetryPolicy(max_attempts=1), sleep=clock.sleep)
    outage = ToolError("HTTP_503", "down", status=503)
    api = ScriptedTool([outage, outage, "up again"], params=("q",), name="api")
    reg.register(api, name="api")

    model = FakeModel([tool_call("api", q=str(i)) for i in range(3)])
    first = run(model, reg, "go", clock=clock, raise_on_stop=False)
    assert first.stop_reason is StopReason.CIRCUIT_OPEN and first.outcome is Outcome.ERROR
    assert first.counters["steps"] == 3
    assert len(api.calls) == 2  # the third call was refused by the open circuit
    assert json.loads(tool_messages(first)[2])["code"] == "CIRCUIT_OPEN"
    assert "circuit breaker of api is open" in first.explanation
    assert breaker.state("api") is BreakerState.OPEN

    clock.advance(30.0)
    assert breaker.state("api") is BreakerState.HALF_OPEN
    second = run(FakeModel([tool_call("api", q="probe"), "ok"]), reg, "again", clock=clock)
    assert second.stop_reason is StopReason.COMPLETED
    assert tool_messages(second) == ["up again"]
    assert breaker.state("api") is BreakerState.CLOSED


# --- saving and resuming a stopped run --------------------------------------------------------


def test_stopped_run_saves_to_json_and_resumes_with_a_bigger_budget() -> None:
    stopped = run(
        CounterModel(), registry(), "go", limits=LoopLimits(max_steps=2), raise_on_stop=False
    )
    saved = stopped.to_json()
    loaded = RunResult.from_json(saved)
    assert loaded == stopped
    resumed = run(
        FakeModel(["finished"]), registry(), None, resume=loaded, limits=LoopLimits(max_steps=5)
    )
    assert resumed.stop_reason is StopReason.COMPLETED
    assert resumed.messages[: len(loaded.messages)] == loaded.messages
    assert resumed.counters["steps"] == 1


def test_resume_answers_calls_that_never_ran() -> None:
    looping = FakeModel([tool_call("echo", text="ping"), tool_call("echo", text="ping")])
    stopped = run(looping, registry(), "go", raise_on_stop=False)
    assert stopped.stop_reason is StopReason.REPEATED_ACTION
    model = FakeModel(["done"])
    run(model, registry(), "try again", resume=RunResult.from_json(stopped.to_json()))
    sent = model.calls[0]
    calls = [c.id for m in sent for c in m.tool_calls]
    answered = [m.tool_call_id for m in sent if m.role == "tool"]
    assert sorted(calls) == sorted(answered)
    assert sent[-1] == Message("user", "try again")
