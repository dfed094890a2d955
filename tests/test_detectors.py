"""The detectors (issue 8): working loops go on, stuck loops stop, one rule live and in replay.

Golden cases run through the public API (``run``, the real ``ToolRegistry``, the public fakes):
each pattern a recorded successful run showed, and its truly stuck opposite, stopped at the same
step as before this change or earlier.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopwatch.instrumentation.runtime.arguments import InvalidArguments, comparable_arguments
from loopwatch.instrumentation.runtime.arguments import parse_arguments as strict_parse_arguments
from loopwatch.instrumentation.runtime.detectors import (
    DETECTORS,
    Detector,
    Detectors,
    Finding,
    RecordedCall,
    RecordedStep,
    normalize_error,
    replay,
    replay_peaks,
)
from loopwatch.instrumentation.runtime.guard import LoopGuard
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import arun, run
from loopwatch.instrumentation.runtime.outcomes import ErrorResult, tool_error
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.retry import ToolError
from loopwatch.instrumentation.runtime.tools import INVALID_RESULT, ToolOutcome, ToolRegistry
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, RunResult, ToolCall
from loopwatch.instrumentation.testing import (
    FakeModel,
    ScriptedTool,
    ScriptExhausted,
    tool_call,
    tool_response,
)

ANY = {"type": "object", "properties": {}, "additionalProperties": True}


def tool_results(result: RunResult) -> list[str]:
    return [m.content or "" for m in result.messages if m.role == "tool"]


# --- 1. repeated_error: the same error, not the same code ---------------------------------


def test_three_different_errors_each_fixed_are_not_a_repeated_error() -> None:
    reg = ToolRegistry(breaker=None)
    deploy = ScriptedTool(
        [
            ToolError("DEPLOY_FAILED", "config file missing: deploy.toml"),
            ToolError("DEPLOY_FAILED", "port 8080 in use"),
            ToolError("DEPLOY_FAILED", "certificate expired on 2024-05-13"),
            "deployed",
        ],
        params=("attempt",),
        name="deploy",
    )
    reg.register(deploy, name="deploy")
    fix = ScriptedTool(["fixed"], params=("what",), name="fix")
    reg.register(fix, name="fix")
    script: list[Any] = []
    for i, what in enumerate(["config", "port", "certificate"], start=1):
        script += [tool_call("deploy", attempt=str(i)), tool_call("fix", what=what)]
    script += [tool_call("deploy", attempt="4"), "Deployed."]
    result = run(FakeModel(script), reg, "deploy it", limits=LoopLimits(max_steps=10))
    assert result.stop_reason is StopReason.COMPLETED and result.final == "Deployed."
    assert len(deploy.calls) == 4
    assert result.progress["max_same_error"] == 1


def test_the_same_error_three_times_is_still_a_repeated_error() -> None:
    reg = ToolRegistry(breaker=None)
    reg.register(
        ScriptedTool([ToolError("NOT_FOUND", "src/foo.ts")], params=("path", "hint"), name="read"),
        name="read",
    )
    model = FakeModel([tool_call("read", path="src/foo.ts", hint=str(i)) for i in range(5)])
    result = run(model, reg, "go", raise_on_stop=False)
    # Different arguments each time (so no repeated call): the error itself repeats.
    assert result.stop_reason is StopReason.REPEATED_ERROR
    assert result.counters["steps"] == 3  # as before this change
    assert result.explanation == (
        "Stopped at step 3: read failed 3 times with the same error, NOT_FOUND: 'src/foo.ts' "
        "(steps 1-3), last for read(path='src/foo.ts', hint='2'). Check the path or name, or "
        "list what exists first."
    )


def test_errors_that_differ_only_in_what_varies_by_nature_are_one_error() -> None:
    messages = [
        "order 8f3a9c2e1d not found at 2024-05-13T10:00:00Z (request 41)",
        "order 77b1e0aa94 not found at 2024-05-14T11:30:12Z (request 42)",
        "order 0c9d8e7f6a not found at 2024-05-15 09:00 (request 1043)",
    ]
    reg = ToolRegistry(breaker=None)
    reg.register(
        ScriptedTool([ToolError("NOT_FOUND", m) for m in messages], params=("id",), name="get"),
        name="get",
    )
    model = FakeModel([tool_call("get", id=str(i)) for i in range(4)])
    result = run(model, reg, "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ERROR and result.counters["steps"] == 3


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("no such file 'src/a.ts'", "no such file 'src/b/c.ts'"),
        ("flight HAT030 not available on 2024-05-13", "flight HAT271 not available on 2024-05-10"),
        ("total is 375, paid 299", "total is 1,203, paid 833.50"),
        (
            "job 3fa85f64-5717-4562-b3fc-2c963f66afa6 failed",
            "job 00000000-0000-0000-0000-0000000000ff failed",
        ),
        ("see https://x.io/a?b=1", "see http://y.org/"),
        ("checksum deadbeef01 mismatch", "checksum 0xCAFE mismatch"),
    ],
)
def test_normalized_errors_are_equal(a: str, b: str) -> None:
    assert normalize_error(a) == normalize_error(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("config file missing", "port in use"),
        ("no such file src/a.ts", "no such file src/b.ts"),  # unquoted: the path is the message
        ("permission denied", "permission granted"),
    ],
)
def test_different_errors_stay_different(a: str, b: str) -> None:
    assert normalize_error(a) != normalize_error(b)


# --- 2. repeated_action: a repeat is a loop only when it brings nothing new ----------------


def _shell() -> tuple[ToolRegistry, list[str]]:
    cwd = ["/home/u/project/src"]
    reg = ToolRegistry(breaker=None)

    def cd(path: str) -> str:
        """Change directory."""
        if path == "..":
            cwd[0] = cwd[0].rsplit("/", 1)[0] or "/"
        return f"now in {cwd[0]}"

    def pop() -> str:
        """Pop the stack."""
        return "popped"

    reg.register(cd)
    reg.register(pop)
    return reg, cwd


def test_climbing_two_folders_with_cd_twice_goes_on() -> None:
    reg, cwd = _shell()
    model = FakeModel([tool_call("cd", path=".."), tool_call("cd", path=".."), "In /home/u."])
    result = run(model, reg, "go up two levels")
    assert result.stop_reason is StopReason.COMPLETED
    assert cwd == ["/home/u"]
    assert tool_results(result) == ["now in /home/u/project", "now in /home/u"]


def test_the_same_call_with_the_same_result_is_a_repeated_action() -> None:
    reg, _ = _shell()
    model = FakeModel([tool_call("cd", path="."), tool_call("cd", path="."), "never"])
    result = run(model, reg, "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert result.counters["steps"] == 2  # as when the repeat was refused before it ran
    assert result.explanation == (
        "Stopped at step 2: cd(path='.') repeated the call just before it and returned the same "
        "result both times ('now in /home/u/project/src'; steps 1, 2). Tell the model what the "
        "result means, or mark the tool repeat_exempt if repeating it is legitimate."
    )


def test_two_calls_in_one_response_with_the_same_result_stop_at_the_second() -> None:
    reg, _ = _shell()
    model = FakeModel([tool_response(tool_call("pop"), tool_call("pop"), tool_call("pop"))])
    result = run(model, reg, "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert result.counters["tool_calls"] == 2


def test_a_cycle_repeating_the_same_results_is_refused_before_it_runs() -> None:
    reg = ToolRegistry(breaker=None)
    reg.register(ScriptedTool(["a"], params=("x",), name="a"), name="a")
    b = ScriptedTool(["b"], params=("x",), name="b")
    reg.register(b, name="b")
    model = FakeModel([tool_call("a", x="1"), tool_call("b", x="1")] * 3)
    result = run(model, reg, "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert result.counters["steps"] == 4 and len(b.calls) == 1
    assert result.explanation.startswith(
        "Stopped at step 4: b(x='1') would complete a cycle A,B,A,B with A = a(x='1'); the "
        "repeat of A returned the same result as before ('a', steps 1, 3)"
    )


# --- 3. no_progress: a new call or a new result is progress --------------------------------


def _writer() -> tuple[ToolRegistry, ScriptedTool]:
    reg = ToolRegistry(breaker=None)
    write = ScriptedTool(["ok"], params=("path", "text"), name="write")
    reg.register(write, name="write")
    return reg, write


def test_seven_writes_of_seven_files_acknowledged_ok_are_progress() -> None:
    reg, write = _writer()
    script: list[Any] = [tool_call("write", path=f"f{i}.txt", text="x") for i in range(7)]
    result = run(FakeModel([*script, "Wrote 7 files."]), reg, "write them")
    assert result.stop_reason is StopReason.COMPLETED and len(write.calls) == 7


def test_writes_that_repeat_the_same_file_with_the_same_ack_are_no_progress() -> None:
    reg, write = _writer()
    model = FakeModel([tool_call("write", path="f.txt", text="x") for _ in range(9)])
    # repeat_exempt: only no_progress is left to notice it (the repeat detectors skip the tool).
    result = run(model, reg, "go", repeat_exempt=["write"], raise_on_stop=False)
    assert result.stop_reason is StopReason.NO_PROGRESS
    assert result.counters["steps"] == 6  # step 1 was new, steps 2-6 were not: as before
    assert len(write.calls) == 6
    assert result.explanation == (
        "Stopped at step 6: 5 steps in a row (steps 2-6) made no call not made before and got "
        "no result not seen before (max_idle_turns=5). Check what the model is waiting for, or "
        "raise max_idle_turns for this task type."
    )


def test_the_callers_progress_signal_overrides_the_default() -> None:
    reg, _ = _writer()
    script: list[Any] = [tool_call("write", path=f"f{i}.txt", text="x") for i in range(5)]
    reports: list[Any] = []

    def never(report: Any) -> bool:
        reports.append(report)
        return False

    limits = LoopLimits(max_idle_turns=2)
    result = run(FakeModel(script), reg, "go", progress=never, limits=limits, raise_on_stop=False)
    assert result.stop_reason is StopReason.NO_PROGRESS and result.counters["steps"] == 2
    assert "made no progress by the run's progress signal" in result.explanation
    # Step 1 got a new result; step 2 the same "ok" for a new call.
    assert [(r.new_results, r.new_calls) for r in reports] == [(1, 0), (0, 1)]


# --- 4. one classification of a tool's outcome ---------------------------------------------


def test_returned_error_dicts_stop_with_tool_failures_under_run() -> None:
    reg = ToolRegistry(breaker=None)
    bodies = [
        {"error": "rate plan unknown", "code": "BAD_PLAN"},
        {"error": "account locked", "code": "LOCKED"},
        {"error": "quota exceeded", "code": "QUOTA"},
    ]
    reg.register(ScriptedTool(bodies, params=("n",), name="bill"), name="bill")
    model = FakeModel([tool_call("bill", n=str(i)) for i in range(6)])
    result = run(model, reg, "go", raise_on_stop=False)
    assert result.stop_reason is StopReason.TOOL_FAILURES  # was `completed` after 6 such results
    assert result.counters["steps"] == 3
    assert [s.detail["error_code"] for s in result.steps if s.kind == "tool"] == [
        "BAD_PLAN",
        "LOCKED",
        "QUOTA",
    ]
    # The body goes back to the model as the tool returned it.
    assert json.loads(tool_results(result)[0]) == bodies[0]


def test_the_same_outcome_classification_in_run_the_guard_and_replay() -> None:
    body = {"error": "no seat", "code": "FULL"}
    reg = ToolRegistry(breaker=None)
    reg.register(ScriptedTool([body], params=("n",), name="book"), name="book")
    outcome = reg.execute(ToolCall("c1", "book", {"n": "1"}))
    assert not outcome.ok and outcome.error_code == "FULL" and outcome.error_message == "no seat"
    guard = LoopGuard(LoopLimits(max_consecutive_failures=1))
    guard.before_step()
    call = ToolCall("c2", "book", {"n": "2"})
    assert guard.before_tool(call).action.value == "continue"
    # Hand-written loops passing the text: the same rule.
    d = guard.after_tool(call, outcome.content)
    assert d.reason is StopReason.TOOL_FAILURES
    info = tool_error(outcome.content)
    assert info is not None and info.code == "FULL"
    steps = [RecordedStep(1, [RecordedCall("book", {"n": "1"}, outcome.content, ok=False)])]
    assert replay(steps, LoopLimits(max_consecutive_failures=1)) is not None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"error": "x"}, ("UNKNOWN_ERROR", "x")),
        ({"error": {"message": "bad key", "type": "auth"}}, ("auth", "bad key")),
        ({"error": None, "data": 1}, None),
        ({"error": ""}, None),
        ('{"error": "gone", "code": "HTTP_410"}', ("HTTP_410", "gone")),
        ('{"result": "error"}', None),
        ("Error: seat taken", None),  # no rule for this tool
        (ErrorResult("Error: seat taken", code="TAKEN"), ("TAKEN", "Error: seat taken")),
        ([{"error": "x"}], None),
    ],
)
def test_tool_error_rule(value: Any, expected: tuple[str, str] | None) -> None:
    info = tool_error(value)
    assert (None if info is None else (info.code, info.message)) == expected


def test_a_tools_own_error_prefix_makes_its_text_a_failure() -> None:
    reg = ToolRegistry(breaker=None)
    reg.register(
        ScriptedTool(["Error: flight HAT030 not available"], params=("n",), name="book"),
        name="book",
        error_prefix="Error:",
    )
    reg.register(ScriptedTool(["Error: this is data"], params=("n",), name="echo"), name="echo")
    failed = reg.execute(ToolCall("c1", "book", {"n": "1"}))
    assert not failed.ok and failed.content == "Error: flight HAT030 not available"
    assert failed.error_code == "UNKNOWN_ERROR"
    assert reg.execute(ToolCall("c2", "echo", {"n": "1"})).ok
    # The registry-wide rule applies to tools registered without their own.
    reg2 = ToolRegistry(breaker=None, error_prefix=("Error:", "ERR "))
    reg2.register(ScriptedTool(["ERR 42"], params=("n",), name="t"), name="t")
    assert not reg2.execute(ToolCall("c3", "t", {"n": "1"})).ok
    with pytest.raises(ValueError, match="error_prefix must not be empty"):
        reg.register(lambda: "x", name="bad", error_prefix="")


def test_tools_see_their_call_id_and_return_marked_errors_as_they_are() -> None:
    recorded = {"call_a": "ok: booked", "call_b": "Error: seat 3A taken"}
    reg = ToolRegistry(breaker=None)

    def book(seat: str, tool_call_id: str) -> Any:
        """Book a seat."""
        text = recorded[tool_call_id]
        return ErrorResult(text, code="TAKEN") if text.startswith("Error:") else text

    reg.register(book)
    assert "tool_call_id" not in json.dumps(reg.specs())
    ok = reg.execute(ToolCall("call_a", "book", {"seat": "1A"}))
    bad = reg.execute(ToolCall("call_b", "book", {"seat": "3A", "tool_call_id": "forged"}))
    assert ok.ok and ok.content == "ok: booked"
    assert not bad.ok and bad.content == "Error: seat 3A taken" and bad.error_code == "TAKEN"


def test_a_result_whose_repr_raises_is_a_failed_call_not_an_escaped_exception() -> None:
    class Weird:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

        __str__ = __repr__

    reg = ToolRegistry(breaker=None)
    reg.register(lambda: Weird(), name="weird", parameters=ANY)
    outcome = reg.execute(ToolCall("c1", "weird", {}))
    assert not outcome.ok and outcome.error_code == INVALID_RESULT
    assert outcome.error_message == (
        "weird returned a Weird that could not be turned into text (RuntimeError: no repr)"
    )
    result = run(FakeModel([tool_call("weird"), "done"]), reg, "go")
    assert result.stop_reason is StopReason.COMPLETED


# --- run() and arun(): the conversation so far, attributes, rough edges -------------------


def test_run_takes_the_conversation_so_far() -> None:
    earlier = [
        Message("system", "You book flights."),
        Message("user", "Hi, I am mia_li_3668."),
        Message("assistant", "Hello Mia, how can I help?"),
        Message("user", "Book JFK to SEA on May 20."),
    ]
    model = FakeModel(["Booked."])
    result = run(model, ToolRegistry(), earlier, system="ignored: the conversation has one")
    assert model.calls[0] == earlier
    assert result.messages[:4] == earlier and result.final == "Booked."
    model2 = FakeModel(["Hi."])
    run(model2, ToolRegistry(), earlier[1:2], system="Be brief.")
    assert model2.calls[0] == [Message("system", "Be brief."), earlier[1]]
    with pytest.raises(TypeError, match="got dict at index 0"):
        run(FakeModel(["x"]), ToolRegistry(), [{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="user_input is required"):
        run(FakeModel(["x"]), ToolRegistry(), [Message("system", "s")])


def test_arun_takes_the_conversation_and_attributes() -> None:
    import asyncio

    from loopwatch.instrumentation.runtime.observer import RunInfo

    seen: list[RunInfo] = []

    class Factory:
        def __call__(self, info: RunInfo) -> Any:
            seen.append(info)
            from loopwatch.instrumentation.runtime.observer import NoOpObserver

            return NoOpObserver()

    convo = [Message("user", "a"), Message("assistant", "b"), Message("user", "c")]
    result = asyncio.run(
        arun(FakeModel(["d"]), ToolRegistry(), convo, attributes={"task.label": "ok"},
             observer_factory=Factory())
    )  # fmt: skip
    assert result.final == "d" and seen[0].attributes == {"task.label": "ok"}
    assert result.messages[:3] == convo


def test_resume_accepts_the_saved_json_text() -> None:
    reg, _ = _writer()
    stopped = run(
        FakeModel([tool_call("write", path="a", text="x")] * 2, then="never"),
        reg,
        "go",
        limits=LoopLimits(max_steps=1),
        raise_on_stop=False,
    )
    saved = stopped.to_json()
    result = run(FakeModel(["Done."]), reg, "go on", resume=saved)
    assert result.ok and result.messages[: len(stopped.messages)] == stopped.messages
    with pytest.raises(TypeError, match=r"load it with RunResult\.from_json"):
        run(FakeModel(["x"]), reg, None, resume=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="could not be read as a saved run"):
        run(FakeModel(["x"]), reg, None, resume="not json")


@pytest.mark.parametrize("value", ["plain text", None])
def test_a_model_returning_no_model_response_says_what_came(value: Any) -> None:
    class Sloppy:
        def complete(self, messages: Any, tools: Any) -> Any:
            return value

    result = run(Sloppy(), ToolRegistry(), "hi", raise_on_stop=False)
    assert result.stop_reason is StopReason.ERROR
    assert result.explanation == (
        "Stopped at step 1: the model call raised TypeError: the model's complete() must return "
        f"a ModelResponse, got {type(value).__name__}: {value!r}."
    )


def test_fake_model_out_of_script_says_so() -> None:
    model = FakeModel(["only one"])
    model.complete([], [])
    with pytest.raises(ScriptExhausted, match="call 2 asked for a response, the script has 1"):
        model.complete([], [])
    result = run(FakeModel([tool_call("echo")]), ToolRegistry(), "go", raise_on_stop=False)
    assert "ScriptExhausted: FakeModel ran out of script" in result.explanation


# --- the same decision fed by the guard and by a replay -----------------------------------

NAMES = ["a", "b", "poll"]


@st.composite
def scripts(draw: st.DrawFn) -> tuple[list[list[tuple[str, dict[str, str], Any]]], LoopLimits]:
    """Steps of tool calls, each (tool, arguments, what the tool returns)."""
    results = st.one_of(
        st.sampled_from(["ok", "r1", "r2"]),
        st.builds(lambda m: {"error": m, "code": "E"}, st.sampled_from(["x", "y 1", "y 2"])),
        st.sampled_from([ErrorResult("Error: z", code="Z"), ErrorResult("Error: w 7")]),
    )
    call = st.tuples(st.sampled_from(NAMES), st.sampled_from([{}, {"k": "1"}, {"k": "2"}]), results)
    steps = draw(st.lists(st.lists(call, min_size=1, max_size=3), min_size=1, max_size=10))
    small = st.one_of(st.none(), st.integers(2, 4))
    limits = LoopLimits(
        max_steps=None,
        max_same_call=draw(small),
        max_same_error=draw(small),
        max_consecutive_failures=draw(small),
        max_idle_turns=draw(st.one_of(st.none(), st.integers(1, 3))),
        count_calls_only=draw(st.booleans()),
    )
    return steps, limits


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_detectors_decide_the_same_fed_by_the_guard_or_by_a_replay(
    case: tuple[list[list[tuple[str, dict[str, str], Any]]], LoopLimits],
) -> None:
    steps, limits = case
    returns: dict[str, Any] = {}
    responses: list[ModelResponse | str] = []
    recorded: list[RecordedStep] = []
    n = 0
    for index, step in enumerate(steps, start=1):
        calls = []
        rec = []
        for name, args, value in step:
            n += 1
            call = ToolCall(f"c{n}", name, args)
            returns[call.id] = value
            calls.append(call)
            info = tool_error(value)
            text = value.content if isinstance(value, ErrorResult) else (
                value if isinstance(value, str) else json.dumps(value)
            )  # fmt: skip
            rec.append(
                ToolOutcome(
                    call=ToolCall("", name, args),
                    ok=info is None,
                    content=text,
                    error_code=None if info is None else info.code,
                    error_message=None if info is None else info.message,
                )
            )
        responses.append(tool_response(*calls))
        recorded.append(RecordedStep(index, rec))
    responses.append("done")

    reg = ToolRegistry(breaker=None)

    def tool(tool_call_id: str, **arguments: Any) -> Any:
        return returns[tool_call_id]

    for name in NAMES:
        reg.register(tool, name=name, parameters=ANY, repeat_exempt=name == "poll")
    result = run(FakeModel(responses), reg, "go", limits=limits, raise_on_stop=False)
    finding = replay(recorded, limits, repeat_exempt=("poll",))
    if result.stop_reason is StopReason.COMPLETED:
        assert finding is None
    else:
        assert result.stop_reason in DETECTORS, result.explanation
        assert finding is not None
        assert (finding.reason, finding.explanation) == (result.stop_reason, result.explanation)
        assert finding.step == result.counters["steps"]


# --- the detector objects on their own ----------------------------------------------------


def test_replay_peaks_are_the_evidence_a_threshold_is_compared_with() -> None:
    nf = RecordedCall(
        "read", "fp-read-a", "res-nf", ok=False, error_code="NOT_FOUND", error_message=""
    )
    steps = [
        RecordedStep(1, [nf]),
        RecordedStep(2, [nf]),
        RecordedStep(3, [RecordedCall("ls", "fp-ls", "res-ls")]),
        RecordedStep(4, [nf]),
    ]
    assert replay_peaks(steps) == {
        "repeated_action": 2,
        "repeated_tool_call": 3,
        "repeated_error": 3,
        "tool_failures": 2,
        "no_progress": 1,
    }
    finding = replay(steps, LoopLimits())
    assert finding is not None and finding.reason is StopReason.REPEATED_ACTION
    assert finding.step == 2 and not finding.before_call


def test_detectors_are_typed_objects_a_caller_can_read() -> None:
    d = Detectors.for_limits(LoopLimits(max_same_error=2))
    assert [x.reason for x in d.all] == list(DETECTORS)
    e1 = ToolOutcome(
        call=ToolCall("", "t", {"a": 1}), ok=False, content="boom 1", error_code="E",
        error_message="boom 1",
    )  # fmt: skip
    assert d.after_call(e1, 1) is None
    entry = d.last_entry
    assert entry is not None and entry.new_result and not entry.new_call and entry.count == 1
    e2 = ToolOutcome(
        call=ToolCall("", "t", {"a": 2}), ok=False, content="boom 2", error_code="E",
        error_message="boom 2",
    )  # fmt: skip
    found = d.after_call(e2, 2)
    assert found is not None and found.reason is StopReason.REPEATED_ERROR
    assert d.repeated_error.peak == 2 and d.tool_failures.streak == 2
    assert found.explanation.startswith(
        "Stopped at step 2: t failed 2 times with the same error, E: 'boom 2' (steps 1, 2)"
    )


def test_the_guard_exposes_its_detectors() -> None:
    guard = LoopGuard()
    assert isinstance(guard.detectors, Detectors)
    assert guard.detectors.no_progress.limit == LoopLimits().max_idle_turns


def _parsed_the_slow_way(text: str) -> Any:
    try:
        return strict_parse_arguments(text)
    except InvalidArguments:
        return text


@given(
    st.text(alphabet=st.sampled_from(' \t\n\r{}[]"-0123456789.eE+tfnNIaruls,:xyz\ufeff'))
    | st.from_regex(r"\s*(\{.*\}|\[.*\]|-?\d+(\.\d+)?|true|false|null|NaN|-?Infinity)\s*")
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_text_that_cannot_be_json_is_kept_without_parsing(text: str) -> None:
    # The first-character test only skips the parser where it would refuse: same answer.
    got, want = comparable_arguments(text), _parsed_the_slow_way(text)
    assert got == want or (got != got and want != want)  # NaN is itself, not equal
    assert type(got) is type(want)


def test_tool_event_is_gone_but_still_imports_and_says_what_replaces_it() -> None:
    from loopwatch.instrumentation.detectors import ToolEvent as face_name
    from loopwatch.instrumentation.runtime import detectors as detectors_module
    from loopwatch.instrumentation.runtime import tally as tally_module

    assert face_name is detectors_module.ToolEvent is tally_module.ToolEvent
    with pytest.raises(TypeError, match=r"ToolOutcome\(call=ToolCall.*Writing your own detector"):
        face_name(1, "t", {"a": 1}, "r")


class _SlowReads:
    """A detector written against the protocol: stops on a third read of one path, whatever
    came back (what a user's own rule looks like)."""

    reason = StopReason.REPEATED_TOOL_CALL
    peak = 0

    def __init__(self) -> None:
        self.paths: dict[str, list[int]] = {}

    def after_call(
        self, outcome: ToolOutcome, step: int, arguments: Any, entry: Any, exempt: bool
    ) -> Finding | None:
        if outcome.call.name != "read" or exempt:
            return None
        steps = self.paths.setdefault(arguments["path"], [])
        steps.append(step)
        self.peak = max(self.peak, len(steps))
        if len(steps) < 3:
            return None
        return Finding(self.reason, step, f"read {arguments['path']} {len(steps)} times")


def test_a_detector_of_ones_own_reads_the_one_record() -> None:
    own: Detector = _SlowReads()
    d = Detectors()
    found = None
    for step, result in enumerate(["a", "b", "c"], start=1):
        outcome = ToolOutcome(call=ToolCall("", "read", '{"path": "x"}'), ok=True, content=result)
        assert d.after_call(outcome, step) is None  # arguments parsed from the text
        entry = d.last_entry
        assert entry is not None and entry.new_result and entry.arguments == {"path": "x"}
        found = own.after_call(outcome, step, entry.arguments, entry, False)
    assert found is not None and found.step == 3 and own.peak == 3


def test_the_guard_feeds_the_registrys_own_record_to_the_detectors_and_the_trace() -> None:
    reg = ToolRegistry()
    reg.register(lambda path: f"text of {path}", name="read", description="read")
    guard = LoopGuard(registry=reg)
    guard.before_step()
    call = ToolCall("c1", "read", {"path": "a"})
    guard.after_model(ModelResponse(Message("assistant", None, (call,)), "tool_use"))
    assert not guard.before_tool(call).done
    outcome = reg.execute(call)
    guard.after_tool(call, outcome)
    assert guard.log.entries[-1] == (1, outcome) and guard.log.entries[-1][1] is outcome
    # a text outcome is classified once into a record of its own
    call2 = ToolCall("c2", "read", {"path": "b"})
    guard.after_tool(call2, '{"error": "nope", "code": "E1"}')
    step, record = guard.log.entries[-1]
    assert (step, record.ok, record.error_code, record.error_message) == (1, False, "E1", "nope")
    assert guard.detectors.last_entry is not None and guard.detectors.last_entry.new_result
