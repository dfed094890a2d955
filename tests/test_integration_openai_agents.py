"""OpenAI Agents SDK runs driven by its own ScriptedModel, with the loopwatch run hooks: stop
reasons, explanations and the spans in a real DuckDB store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool, set_tracing_disabled
from agents.exceptions import AgentsException, MaxTurnsExceeded, ModelBehaviorError
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage as SdkUsage
from loopwatch.instrumentation import AgentStuck, LimitReached, LoopLimits, instrument
from loopwatch.instrumentation.integrations.openai_agents import (
    GuardStop,
    LoopwatchRunHooks,
    run,
    run_sync,
)
from opentelemetry.sdk.trace import TracerProvider

set_tracing_disabled(True)


def _usage() -> SdkUsage:
    return SdkUsage(requests=1, input_tokens=100, output_tokens=10, total_tokens=110)


def _script(*args: dict[str, Any], final: str | None = "done", forever: int = 40) -> ScriptedModel:
    steps: list[Any] = [
        ModelStep(output=[function_call("lookup", a, call_id=f"c{i}")], usage=_usage())
        for i, a in enumerate(args)
    ]
    if final is not None:
        steps.append(ModelStep(output=[assistant_message(final)], usage=_usage()))
    else:
        steps += [
            ModelStep(output=[function_call("lookup", args[-1], call_id=f"r{i}")], usage=_usage())
            for i in range(forever)
        ]
    return ScriptedModel(steps)


def _agent(model: ScriptedModel, lookup_fn: Callable[[str], str] | None = None) -> Agent[Any]:
    @function_tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        if lookup_fn is not None:
            return lookup_fn(order_id)
        return f"order {order_id}: shipped"

    return Agent(name="support-bot", model=model, tools=[lookup])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Callable[[], tuple[list[Any], list[Any]]]]:
    from loopwatch.queries.store.database import connect_read_only

    tp = TracerProvider()
    db = tmp_path / "runs.duckdb"
    handle = instrument(tracer_provider=tp, store=db)

    def read() -> tuple[list[Any], list[Any]]:
        handle.shutdown()
        con = connect_read_only(db)
        try:
            runs = con.execute(
                "SELECT agent_name, task_type, stop_reason, outcome, limit_name, explanation,"
                " steps, model_calls, tool_calls, input_tokens FROM runs"
            ).fetchall()
            spans = con.execute(
                "SELECT name, operation, run_id IS NOT NULL, step, tool_status, error_code"
                " FROM spans ORDER BY start_ns"
            ).fetchall()
        finally:
            con.close()
        return runs, spans

    yield read
    handle.shutdown()
    tp.shutdown()


def test_a_run_that_completes(store: Callable[[], Any]) -> None:
    hooks = LoopwatchRunHooks(limits=LoopLimits(max_steps=6), task_type="support")
    agent = _agent(_script({"order_id": "A-1"}, {"order_id": "B-2"}, final="Both shipped."))
    result = run_sync(agent, "Where are A-1 and B-2?", hooks=hooks)
    assert result.final_output == "Both shipped."
    assert hooks.result is not None and hooks.result.stop_reason == "completed"
    runs, spans = store()
    assert runs == [
        ("support-bot", "support", "completed", "success", None, "", 3.0, 3.0, 2.0, 300)
    ]
    names = [s[0] for s in spans]
    assert names.count("invoke_agent support-bot") == 1
    assert [n for n in names if n.startswith("step")] == ["step 1", "step 2", "step 3"]
    assert names.count("execute_tool lookup") == 2


def test_the_same_call_with_the_same_result_stops_as_repeated_tool_call(
    store: Callable[[], Any],
) -> None:
    a, b, c = {"order_id": "A-1"}, {"order_id": "B-2"}, {"order_id": "C-3"}
    hooks = LoopwatchRunHooks(limits=LoopLimits(max_steps=20))
    with pytest.raises(AgentStuck) as caught:
        asyncio.run(run(_agent(_script(a, b, a, c, a, b)), "go", hooks=hooks))
    # the SDK's own exception mechanism: an AgentsException carrying the SDK's run data
    assert isinstance(caught.value, GuardStop) and isinstance(caught.value, AgentsException)
    assert caught.value.run_data is not None
    result = caught.value.result
    assert result.stop_reason == "repeated_tool_call"
    assert (
        "lookup(order_id='A-1') returned the same result 3 times ('order A-1: shipped') "
        "(steps 1, 3, 5)"
    ) in result.explanation
    runs, _ = store()
    assert [(r[2], r[3]) for r in runs] == [("repeated_tool_call", "stuck")]
    assert runs[0][5].startswith(
        "Stopped at step 5: lookup(…) returned the same result 3 times ('…') (steps 1, 3, 5)."
    )


def test_the_step_cap_stops_with_max_steps(store: Callable[[], Any]) -> None:
    hooks = LoopwatchRunHooks(limits=LoopLimits(max_steps=3))
    many = [{"order_id": f"X-{i}"} for i in range(10)]
    with pytest.raises(LimitReached) as caught:
        run_sync(_agent(_script(*many, final=None)), "go", hooks=hooks)
    assert caught.value.result.stop_reason == "max_steps"
    assert "all 3 steps (max_steps=3) are used" in caught.value.result.explanation
    runs, _ = store()
    assert [(r[2], r[4], r[6]) for r in runs] == [("max_steps", "steps", 3.0)]


def test_max_turns_exceeded_is_recorded_as_max_steps(store: Callable[[], Any]) -> None:
    hooks = LoopwatchRunHooks(limits=LoopLimits(max_steps=None))
    many = [{"order_id": f"T-{i}"} for i in range(10)]
    with pytest.raises(MaxTurnsExceeded):
        run_sync(_agent(_script(*many, final=None)), "go", hooks=hooks, max_turns=2)
    assert hooks.result is not None and hooks.result.stop_reason == "max_steps"
    assert "the Agents SDK ended the run with MaxTurnsExceeded" in hooks.result.explanation
    runs, _ = store()
    assert [(r[2], r[3], r[4]) for r in runs] == [("max_steps", "limit", "steps")]


def test_a_tool_that_keeps_failing_stops_with_tool_failures(store: Callable[[], Any]) -> None:
    def broken(order_id: str) -> str:
        raise RuntimeError(f"order {order_id} is not in the database")

    hooks = LoopwatchRunHooks(
        limits=LoopLimits(max_steps=20, max_same_error=None, max_consecutive_failures=3)
    )
    many = [{"order_id": f"Y-{i}"} for i in range(10)]
    with pytest.raises(AgentStuck) as caught:
        run_sync(_agent(_script(*many, final=None), broken), "go", hooks=hooks)
    result = caught.value.result
    assert result.stop_reason == "tool_failures"
    assert "3 tool calls in a row failed" in result.explanation
    runs, spans = store()
    assert [(r[2], r[8]) for r in runs] == [("tool_failures", 3.0)]
    assert [(s[4], s[5]) for s in spans if s[1] == "execute_tool"] == [("error", "TOOL_ERROR")] * 3


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ModelBehaviorError("Responses stream ended with terminal event `response.incomplete`. "
                            "status=incomplete; incomplete_details=IncompleteDetails("
                            "reason='max_output_tokens')."), "output_truncated"),
        (ModelBehaviorError("Tool lookup not found in agent support-bot"), "error"),
    ],
    ids=["incomplete", "behavior"],
)  # fmt: skip
def test_the_sdks_model_errors_are_mapped(error: Exception, reason: str) -> None:
    hooks = LoopwatchRunHooks()
    with pytest.raises(ModelBehaviorError):
        run_sync(_agent(ScriptedModel([ModelStep.raise_error(error)])), "go", hooks=hooks)
    assert hooks.result is not None and hooks.result.stop_reason == reason


def test_a_refusal_part_stops_with_refusal() -> None:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputRefusal

    refusal = ResponseOutputMessage(
        id="m", type="message", role="assistant", status="completed",
        content=[ResponseOutputRefusal(type="refusal", refusal="I can't help with that.")],
    )  # fmt: skip
    hooks = LoopwatchRunHooks()
    with pytest.raises(GuardStop) as caught:
        run_sync(_agent(ScriptedModel([ModelStep(output=[refusal])])), "go", hooks=hooks)
    assert caught.value.result.stop_reason == "refusal"
    assert caught.value.result.final == "I can't help with that."


def test_a_rejected_answer_stops_with_completion_rejected() -> None:
    hooks = LoopwatchRunHooks(verify=lambda r: ["say when"])
    with pytest.raises(AgentStuck) as caught:
        run_sync(_agent(_script(final="Shipped.")), "go", hooks=hooks)
    assert caught.value.result.stop_reason == "completion_rejected"
    assert "say when" in caught.value.result.explanation


def test_a_guardrail_tripwire_is_recorded_as_guardrail(store: Callable[[], Any]) -> None:
    from agents import GuardrailFunctionOutput, input_guardrail
    from agents.exceptions import InputGuardrailTripwireTriggered

    @input_guardrail
    def no_refund_fraud(ctx: Any, agent: Any, text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info="fraud", tripwire_triggered=True)

    agent = _agent(_script({"order_id": "A-1"}))
    agent.input_guardrails = [no_refund_fraud]
    hooks = LoopwatchRunHooks()
    with pytest.raises(InputGuardrailTripwireTriggered):
        run_sync(agent, "refund me twice", hooks=hooks)
    assert hooks.result is not None and hooks.result.stop_reason == "guardrail"
    runs, _ = store()
    assert [(r[2], r[3]) for r in runs] == [("guardrail", "interrupted")]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: MaxTurnsExceeded("Max turns (2) exceeded"), "max_steps"),
        (lambda: __import__("agents.exceptions").exceptions.ModelRefusalError("no"), "refusal"),
        (lambda: __import__("agents.exceptions").exceptions.ModelTimeoutError(5.0), "timeout"),
        (lambda: ModelBehaviorError("Chat Completions response terminated with "
                                    "finish_reason='length' but produced no text"),
         "output_truncated"),
        (lambda: ValueError("boom"), "error"),
    ],
    ids=["max-turns", "refusal", "model-timeout", "length", "other"],
)  # fmt: skip
def test_stop_reason_for_the_sdks_exceptions(make: Callable[[], Exception], reason: str) -> None:
    from loopwatch.instrumentation.integrations.openai_agents import stop_reason_for

    assert stop_reason_for(make()) == reason
