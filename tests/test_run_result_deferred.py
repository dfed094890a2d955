"""A guard's RunResult builds ``steps`` and ``progress`` on first read (docs/runtime.md, "What the
guard costs"): the values are those of the run as it stood at ``finish()``, and everything that
reads a result field by field (``to_dict``, ``==``, pickling, copying) sees them."""

from __future__ import annotations

import copy
import pickle

from loopwatch.instrumentation.runtime.guard import LoopGuard
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.toolspec import ToolOutcome
from loopwatch.instrumentation.runtime.types import (
    Message,
    ModelResponse,
    RunResult,
    Step,
    ToolCall,
    Usage,
)


def _stuck_run() -> LoopGuard:
    # the same failing call twice in a row: repeated_action stops it at step 2
    guard = LoopGuard(LoopLimits(max_steps=10))
    guard.start([Message("user", "go")])
    for n in range(1, 5):
        if guard.before_step().done:
            break
        call = ToolCall(f"c{n}", "read_file", {"path": "src/a.py"})
        message = Message("assistant", None, (call,))
        guard.after_model(ModelResponse(message, "tool_use", Usage(10, 5)))
        if guard.before_tool(call).done:
            break
        outcome = ToolOutcome(call=call, ok=False, content="NOT_FOUND", error_code="NOT_FOUND")
        if guard.after_tool(call, outcome).done or guard.end_step().done:
            break
    return guard


def test_steps_and_progress_are_those_the_guard_holds_at_finish() -> None:
    guard = _stuck_run()
    result = guard.finish()
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert result.steps == guard.records
    assert result.progress == guard.progress()
    assert [s.kind for s in result.steps] == ["tool", "tool", "stop"]
    assert result.steps[0].detail == {
        "tool": "read_file",
        "call_id": "c1",
        "status": "error",
        "retries": 0,
        "error_code": "NOT_FOUND",
    }
    assert result.progress == {"recent_new_calls": 1, "max_same_error": 2, "max_same_call": 2}


def test_what_the_guard_logs_after_finish_does_not_reach_the_result() -> None:
    guard = _stuck_run()
    result = guard.finish()
    guard.model_call_failed(RuntimeError("late"))  # logged, but the run had ended
    assert len(guard.records) == len(result.steps) + 1
    assert result.steps[-1].kind == "stop"


def test_to_dict_equality_pickle_and_copy_see_the_deferred_fields() -> None:
    result = _stuck_run().finish()
    data = result.to_dict()
    assert data["steps"][0]["detail"]["call_id"] == "c1"
    assert data["progress"]["max_same_call"] == 2
    assert RunResult.from_json(result.to_json()) == result
    for other in (pickle.loads(pickle.dumps(result)), copy.copy(result), copy.deepcopy(result)):
        assert other == result and other.steps == result.steps


def test_a_result_built_with_its_fields_reads_them_as_given() -> None:
    steps = [Step(1, "stop", {"reason": "completed"})]
    result = RunResult(
        [], steps, "ok", StopReason.COMPLETED, StopReason.COMPLETED.outcome, Usage(), ""
    )
    assert result.steps is steps and result.progress == {}
    try:
        result.no_such_field  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_field" in str(exc)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")
