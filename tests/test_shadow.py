"""Shadow limits: candidate limits evaluated on live runs, not enforced (docs/import.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard.cli import main
from loopwatch.instrumentation.runtime.guard import LoopGuard
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import ToolCall, Usage
from loopwatch.instrumentation.telemetry.pipeline import instrument
from loopwatch.instrumentation.testing import FakeModel, text_response, tool_response
from loopwatch.queries.analysis.history import shadow_evaluations
from loopwatch.queries.store.database import connect_read_only
from opentelemetry.sdk.trace import TracerProvider

USAGE = Usage(100, 10, 0.001)


def _registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(lambda page: {"page": page, "rows": [page * 10]}, name="fetch")
    return reg


def _model(tool_steps: int) -> FakeModel:
    """``tool_steps`` steps each fetching a new page, then an answer: tool_steps + 1 steps."""
    script = [
        tool_response(ToolCall(f"c{i}", "fetch", {"page": i}), usage=USAGE)
        for i in range(tool_steps)
    ]
    return FakeModel([*script, text_response("done", usage=USAGE)])


POLICY = LimitPolicy(
    defaults=LoopLimits(max_steps=12),
    shadow_defaults={"max_steps": 4},
)


def test_the_policy_reads_shadow_tables_from_toml() -> None:
    policy = LimitPolicy.from_toml(
        "[defaults]\nmax_steps = 12\n[task_types.support]\nmax_steps = 20\n"
        "[shadow.defaults]\nmax_steps = 4\n[shadow.task_types.support]\nmax_tokens = 500\n"
    )
    assert policy.for_task("support").max_steps == 20
    support = policy.shadow_for("support")
    assert support is not None and (support.max_steps, support.max_tokens) == (4, 500)
    other = policy.shadow_for("other")
    assert other is not None and (other.max_steps, other.max_tokens) == (4, None)
    assert LimitPolicy.from_toml(policy.to_toml()) == policy
    assert LimitPolicy().shadow_for("x") is None
    with pytest.raises(ValueError, match=r"\[shadow.task_types.support\]: max_steps must be"):
        LimitPolicy(shadow={"support": {"max_steps": 0}})
    with pytest.raises(ValueError, match=r"unknown table\(s\) shadow.candidates"):
        LimitPolicy.from_toml("[shadow.candidates]\nmax_steps = 3\n")


@pytest.mark.parametrize("tool_steps", range(0, 9))
def test_a_tighter_candidate_changes_no_outcome_and_records_the_would_be_stop(
    tool_steps: int,
) -> None:
    plain = run(_model(tool_steps), _registry(), "go", limits=LoopLimits(max_steps=12))
    shadowed = run(_model(tool_steps), _registry(), "go", limits=POLICY)
    # the enforced limits decide, exactly as without a candidate
    assert shadowed.stop_reason is plain.stop_reason is StopReason.COMPLETED
    assert {k: v for k, v in shadowed.counters.items() if k != "wall_s"} == {
        k: v for k, v in plain.counters.items() if k != "wall_s"
    }
    assert shadowed.final == plain.final == "done"
    steps = tool_steps + 1
    if steps > 4:  # the candidate's max_steps = 4 would have stopped exactly these runs
        assert shadowed.shadow["stop_reason"] == "max_steps"
        assert shadowed.shadow["step"] == 4
        assert shadowed.shadow["saved"]["steps"] == steps - 4
        assert shadowed.shadow["saved"]["tokens"] == (steps - 4) * 110
        assert "max_steps=4" in shadowed.shadow["explanation"]
    else:
        assert shadowed.shadow["stop_reason"] == "finish"
        assert "saved" not in shadowed.shadow
    assert shadowed.shadow["limits_version"] == LoopLimits(max_steps=4).version
    assert plain.shadow == {}


def test_a_candidate_detector_is_evaluated_too() -> None:
    # the same call and result three times, then an answer: the enforced max_same_call = 5
    # lets it finish; a candidate of 2 would stop it at the second one
    call = ToolCall("c", "fetch", {"page": 1})
    model = FakeModel([tool_response(call), call, call, "done"])
    policy = LimitPolicy(defaults=LoopLimits(max_same_call=5), shadow_defaults={"max_same_call": 2})
    guard_result = run(model, _registry(), "go", limits=policy, repeat_exempt=["fetch"])
    assert guard_result.stop_reason is StopReason.COMPLETED
    assert guard_result.shadow["stop_reason"] == "finish"  # exempt tools stay exempt
    model = FakeModel([tool_response(call), call, call, "done"])
    result = run(model, _registry(), "go", limits=policy, raise_on_stop=False)
    assert result.stop_reason is StopReason.REPEATED_ACTION  # the enforced guard's own rule
    model = FakeModel(
        [
            tool_response(call),
            ToolCall("d", "fetch", {"page": 2}),
            ToolCall("e", "fetch", {"page": 1}),
            "done",
        ]
    )
    result = run(model, _registry(), "go", limits=policy)
    assert result.stop_reason is StopReason.COMPLETED
    assert result.shadow["stop_reason"] == "repeated_tool_call"
    assert result.shadow["step"] == 3


def test_an_explicit_candidate_on_a_hand_written_loop() -> None:
    guard = LoopGuard(LoopLimits(max_steps=10), shadow=LoopLimits(max_steps=1))
    guard.start()
    for i in range(2):
        assert not guard.before_step().done
        response = tool_response(ToolCall(f"c{i}", "fetch", {"page": i}))
        guard.after_model(response)
        assert not guard.before_tool(response.message.tool_calls[0]).done
        guard.after_tool(response.message.tool_calls[0], f"page {i}")
        guard.end_step()
    guard.before_step()
    guard.after_model(text_response("ok"))
    result = guard.finish()
    assert result.stop_reason is StopReason.COMPLETED
    assert result.shadow["stop_reason"] == "max_steps" and result.shadow["step"] == 1
    assert result.shadow["saved"]["steps"] == 2


def test_shadow_results_reach_the_store_and_the_report(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "live.duckdb"
    tp = TracerProvider()
    handle = instrument(tracer_provider=tp, store=db)
    try:
        lengths = [0, 1, 2, 3, 4, 5, 6, 7, 8, 2]
        results = [
            run(_model(n), _registry(), "go", limits=POLICY, task_type="batch") for n in lengths
        ]
        assert handle.force_flush()
    finally:
        handle.shutdown()
    exceeding = sum(1 for n in lengths if n + 1 > 4)
    assert sum(1 for r in results if r.shadow["stop_reason"] == "max_steps") == exceeding
    con = connect_read_only(db)
    try:
        rows = con.execute(
            "SELECT attributes->>'$.\"loopwatch.shadow.stop_reason\"', "
            "TRY_CAST(attributes->>'$.\"loopwatch.shadow.step\"' AS INT) FROM spans "
            "WHERE operation = 'invoke_agent' ORDER BY start_ns"
        ).fetchall()
        (evaluation,) = shadow_evaluations(con)
    finally:
        con.close()
    assert [r[0] for r in rows] == ["max_steps" if n + 1 > 4 else "finish" for n in lengths]
    assert {r[1] for r in rows if r[0] == "max_steps"} == {4}
    assert evaluation.task_type == "batch"
    assert evaluation.runs == len(lengths)
    assert evaluation.successful_runs == len(lengths)
    assert evaluation.successful_cut == exceeding  # every run succeeded: all would-be cuts
    assert evaluation.failed_runs == 0 and evaluation.enforced_stopped == 0
    assert [(s.reason, s.runs) for s in evaluation.stops] == [("max_steps", exceeding)]
    code = main(["report", "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Shadow limits on live runs (evaluated, not enforced)" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("batch ") and "max_steps 5" in ln)
    assert f"{exceeding}/10" in row
