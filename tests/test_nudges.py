"""Detectors that warn before they stop: with on_stuck = "nudge" a detector's first trip hands
the model a corrective message naming the evidence; the run stops only if it trips again."""

from __future__ import annotations

import asyncio
import json

import pytest
from loopwatch.instrumentation.runtime.errors import AgentStuck
from loopwatch.instrumentation.runtime.fingerprint import short_hash, stable_json
from loopwatch.instrumentation.runtime.guard import LoopGuard
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.loop import arun, run
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import Message, RunResult
from loopwatch.instrumentation.testing import FakeModel, tool_call

NUDGE = LoopLimits(on_stuck="nudge")


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    def read_file(path: str) -> str:
        """Read a file."""
        return json.dumps({"error": f"no such file {path!r}", "code": "NOT_FOUND"})

    listing = iter(range(1000))

    @registry.tool
    def ls(path: str = ".") -> str:
        """List a folder (a new listing each time)."""
        return f"listing {next(listing)} of {path}: a.ts b.ts"

    return registry


def _read() -> object:
    return tool_call("read_file", path="src/foo.ts")


def _ls(path: str) -> object:
    return tool_call("ls", path=path)


def _nudges_sent(result: RunResult) -> list[str]:
    return [m.content or "" for m in result.messages if m.role == "user"][1:]


def test_a_model_that_obeys_the_nudge_completes() -> None:
    # The case: the same call, the same NOT_FOUND, three times (not in a row).
    model = FakeModel([_read(), _ls("src"), _read(), _ls("lib"), _read(), "It is b.ts."])
    result = run(model, _registry(), "open foo", limits=NUDGE)
    assert result.stop_reason is StopReason.COMPLETED and result.final == "It is b.ts."
    assert [(n["detector"], n["step"]) for n in result.nudges] == [("repeated_tool_call", 5)]
    (sent,) = _nudges_sent(result)
    assert sent == result.nudges[0]["message"]
    assert "read_file(path='src/foo.ts') returned NOT_FOUND 3 times (steps 1, 3, 5)" in sent
    assert sent.endswith("try something else, or answer with what you have.")
    # the model's last call saw the nudge as the newest message
    assert model.calls[-1][-1] == Message("user", sent)
    assert any(s.kind == "nudge" for s in result.steps)


def test_a_model_that_ignores_the_nudge_stops_with_the_detector_after_it() -> None:
    model = FakeModel([_read()], then=_read())
    with pytest.raises(AgentStuck) as caught:
        run(model, _registry(), "open foo", limits=NUDGE)
    result = caught.value.result
    # repeated_action trips at step 2 (the call just before, same result): nudged; step 3
    # repeats it again: stopped, naming the nudge.
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert result.counters["steps"] == 3
    assert [(n["detector"], n["step"]) for n in result.nudges] == [("repeated_action", 2)]
    assert "nudged at step 2 and did not change course" in result.explanation
    assert len(_nudges_sent(result)) == 1


def test_stop_stays_the_default() -> None:
    model = FakeModel([_read()], then=_read())
    result = run(model, _registry(), "open foo", raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ACTION and result.counters["steps"] == 2
    assert result.nudges == [] and _nudges_sent(result) == []
    assert LoopLimits().on_stuck == "stop" and LoopLimits().max_nudges == 1


def test_max_nudges_per_detector() -> None:
    limits = LoopLimits(on_stuck="nudge", max_nudges=2)
    result = run(FakeModel([_read()], then=_read()), _registry(), "x", limits=limits,
                 raise_on_stop=False)  # fmt: skip
    assert result.stop_reason is StopReason.REPEATED_ACTION and result.counters["steps"] == 4
    assert [n["step"] for n in result.nudges] == [2, 3]


def test_on_stuck_per_detector_and_task_type_from_the_limits_file() -> None:
    policy = LimitPolicy.from_toml(
        "[defaults]\n"
        "[task_types.coding]\n"
        'on_stuck = { repeated_tool_call = "nudge", tool_failures = "stop" }\n'
        "[task_types.support]\n"
        'on_stuck = "nudge"\nmax_nudges = 2\n'
    )
    coding = policy.for_task("coding")
    assert coding.on_stuck_for("repeated_tool_call") == "nudge"
    assert coding.on_stuck_for("repeated_action") == "stop"
    assert policy.for_task("support").max_nudges == 2
    assert policy.for_task("other").on_stuck == "stop"
    assert LimitPolicy.from_toml(policy.to_toml()) == policy
    # coding: repeated_action (not named) stops at once
    result = run(FakeModel([_read()], then=_read()), _registry(), "x", limits=policy,
                 task_type="coding", raise_on_stop=False)  # fmt: skip
    assert result.stop_reason is StopReason.REPEATED_ACTION and result.nudges == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"on_stuck": "warn"}, 'on_stuck must be "stop", "nudge"'),
        ({"on_stuck": {"max_steps": "nudge"}}, "on_stuck must map detectors"),
        ({"on_stuck": {"no_progress": "later"}}, "on_stuck must map detectors"),
        ({"max_nudges": 0}, "max_nudges"),
    ],
)
def test_bad_escalation_says_what_is_wrong(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoopLimits(**changes)  # type: ignore[arg-type]


def test_the_limits_version_of_old_limits_does_not_change() -> None:
    data = LoopLimits().to_dict()
    del data["on_stuck"], data["max_nudges"]
    del data["max_cost_per_min"], data["max_tokens_per_min"]  # left out while off, as well
    assert LoopLimits().version == short_hash(stable_json(data))
    assert NUDGE.version != LoopLimits().version


def test_no_progress_nudges_at_the_next_step() -> None:
    limits = LoopLimits(on_stuck={"no_progress": "nudge"}, max_idle_turns=2, max_steps=10)
    # steps 1-2 answer nothing new (empty text with a pause is no progress): use a progress
    # signal that says no, then the model answers after the nudge.
    model = FakeModel([tool_call("ls"), tool_call("ls"), "done"])
    result = run(model, _registry(), "x", limits=limits, progress=lambda report: False)
    assert result.stop_reason is StopReason.COMPLETED
    assert [(n["detector"], n["step"]) for n in result.nudges] == [("no_progress", 2)]
    assert "2 steps in a row" in _nudges_sent(result)[0]


def test_arun_delivers_the_nudge_too() -> None:
    model = FakeModel([_read(), _ls("src"), _read(), _ls("lib"), _read(), "b.ts"])
    result = asyncio.run(arun(model, _registry(), "open foo", limits=NUDGE))
    assert result.stop_reason is StopReason.COMPLETED and len(result.nudges) == 1
    assert model.calls[-1][-1].content == result.nudges[0]["message"]


def test_a_hand_written_loop_can_take_the_nudge_itself() -> None:
    guard = LoopGuard(NUDGE)
    guard.start([Message("user", "x")])
    for _ in (1, 2):
        assert not guard.before_step().done
        call = tool_call("read_file", path="a")
        guard.after_model(FakeModel([call]).complete([], []))
        assert guard.before_tool(call).action == "continue"
        d = guard.after_tool(call, '{"error": "missing", "code": "NOT_FOUND"}')
        guard.end_step()
    assert d.feedback and "repeated the call just before it" in d.feedback
    assert guard.take_nudge() == d.feedback and guard.take_nudge() is None
    assert guard.before_step().feedback is None  # taken: not handed over twice
    assert [x.detector for x in guard.nudges] == ["repeated_action"]
