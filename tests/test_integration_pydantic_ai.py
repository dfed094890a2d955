"""pydantic-ai agents driven by its own FunctionModel / TestModel, with the loopwatch capability:
stop reasons, explanations and the spans in a real DuckDB store."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation import (
    AgentLoopError,
    AgentStuck,
    LimitReached,
    LoopLimits,
    instrument,
)
from loopwatch.instrumentation.clients import ModelPrice
from loopwatch.instrumentation.integrations.pydantic_ai import LoopwatchCapability
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage, UsageLimits

Script = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


def _calls(*args: dict[str, Any], final: str | None = "done") -> Script:
    """A model that calls lookup with each of ``args`` in turn (then answers ``final``,
    or keeps repeating the last call when ``final`` is None)."""
    counter = itertools.count()

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        i = next(counter)
        usage = RequestUsage(input_tokens=100, output_tokens=10)
        if i < len(args) or final is None:
            a = args[min(i, len(args) - 1)]
            part = ToolCallPart("lookup", a, tool_call_id=f"c{i}")
            return ModelResponse(parts=[part], usage=usage, model_name="m-1")
        return ModelResponse(parts=[TextPart(final)], usage=usage, model_name="m-1")

    return fn


def _agent(
    script: Script,
    tp: TracerProvider | None,
    limits: LoopLimits,
    *,
    tool: Callable[[str], str] | None = None,
    **cap: Any,
) -> Agent[None, str]:
    caps: list[Any] = [LoopwatchCapability(limits=limits, task_type="support", **cap)]
    if tp is not None:
        caps.append(Instrumentation(settings=InstrumentationSettings(tracer_provider=tp)))
    agent = Agent(
        FunctionModel(script, model_name="m-1"), name="support-bot", capabilities=caps, retries=20
    )

    @agent.tool_plain
    def lookup(order_id: str) -> str:
        """Find an order."""
        if tool is not None:
            return tool(order_id)
        return f"order {order_id}: shipped"

    return agent


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[TracerProvider, Path]]:
    tp = TracerProvider()
    db = tmp_path / "runs.duckdb"
    handle = instrument(tracer_provider=tp, store=db)
    _handles[db] = handle
    yield tp, db
    handle.shutdown()
    tp.shutdown()


_handles: dict[Path, Any] = {}


def _stored(db: Path, tp: TracerProvider) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The runs and spans in the store, read once the writer has closed the file."""
    from loopwatch.queries.store.database import connect_read_only

    handle = _handles.pop(db, None)
    if handle is not None:
        handle.shutdown()
    con = connect_read_only(db)
    try:
        runs = con.execute(
            "SELECT agent_name, task_type, stop_reason, outcome, limit_name, explanation, steps,"
            " model_calls, tool_calls, input_tokens, cost_usd FROM runs"
        ).fetchall()
        spans = con.execute(
            "SELECT name, operation, run_id IS NOT NULL, step, tool_status, error_code"
            " FROM spans ORDER BY start_ns"
        ).fetchall()
    finally:
        con.close()
    return runs, spans


@pytest.mark.parametrize("instrumented", [True, False], ids=["annotated", "own-spans"])
def test_a_run_that_completes(instrumented: bool, tmp_path: Path) -> None:
    tp = TracerProvider()
    db = tmp_path / "runs.duckdb"
    handle = instrument(tracer_provider=tp, store=db)
    prices = {"m-1": ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)}
    script = _calls({"order_id": "A-1"}, {"order_id": "B-2"}, final="Both shipped.")
    agent = _agent(script, tp if instrumented else None, LoopLimits(max_steps=6), prices=prices)
    result = agent.run_sync("Where are A-1 and B-2?")
    assert result.output == "Both shipped."
    handle.shutdown()
    runs, spans = _stored(db, tp)
    assert runs == [
        ("support-bot", "support", "completed", "success", None, "", 3.0, 3.0, 2.0, 300,
         pytest.approx(3 * (100 * 1.0 + 10 * 2.0) / 1e6)),
    ]  # fmt: skip
    names = [s[0] for s in spans]
    # one span per run, model call and tool call: pydantic-ai's annotated, or loopwatch's own
    assert names.count("invoke_agent support-bot") == 1
    assert sum(n.startswith("chat") for n in names) == 3
    assert names.count("execute_tool lookup") == 2
    assert all(s[2] for s in spans if s[1] in ("chat", "execute_tool", "invoke_agent"))
    tools = [s for s in spans if s[0] == "execute_tool lookup"]
    assert [(s[3], s[4]) for s in tools] == [(1, "ok"), (2, "ok")]
    assert sum(n.startswith("step ") for n in names) == (0 if instrumented else 3)


def test_the_same_call_with_the_same_result_stops_as_repeated_tool_call(
    store: tuple[TracerProvider, Path],
) -> None:
    tp, db = store
    a, b, c = {"order_id": "A-1"}, {"order_id": "B-2"}, {"order_id": "C-3"}
    agent = _agent(_calls(a, b, a, c, a, b), tp, LoopLimits(max_steps=20))
    with pytest.raises(AgentStuck) as caught:
        agent.run_sync("go")
    result = caught.value.result
    assert result.stop_reason == "repeated_tool_call"
    assert result.explanation.startswith(
        "Stopped at step 5: lookup(order_id='A-1') returned the same result 3 times "
        "('order A-1: shipped') (steps 1, 3, 5)."
    )
    runs, _ = _stored(db, tp)
    assert [(r[2], r[3]) for r in runs] == [("repeated_tool_call", "stuck")]
    # the explanation leaves the process without the arguments (no content-capture opt-in)
    assert runs[0][5].startswith(
        "Stopped at step 5: lookup(…) returned the same result 3 times ('…') (steps 1, 3, 5)."
    )


def test_the_step_cap_stops_with_max_steps(store: tuple[TracerProvider, Path]) -> None:
    tp, db = store
    agent = _agent(
        _calls(*({"order_id": f"X-{i}"} for i in range(10)), final=None),
        tp,
        LoopLimits(max_steps=3),
    )
    with pytest.raises(LimitReached) as caught:
        agent.run_sync("go")
    result = caught.value.result
    assert result.stop_reason == "max_steps" and result.limit == "steps"
    assert "all 3 steps (max_steps=3) are used" in result.explanation
    runs, _ = _stored(db, tp)
    assert [(r[2], r[3], r[4], r[6]) for r in runs] == [("max_steps", "limit", "steps", 3)]


def test_a_tool_that_keeps_failing_stops_with_tool_failures(
    store: tuple[TracerProvider, Path],
) -> None:
    tp, db = store

    def broken(order_id: str) -> str:
        raise ModelRetry(f"order {order_id} is not in the database")

    agent = _agent(
        _calls(*({"order_id": f"Y-{i}"} for i in range(10)), final=None),
        tp,
        LoopLimits(max_steps=20, max_same_error=None, max_consecutive_failures=3),
        tool=broken,
    )
    with pytest.raises(AgentStuck) as caught:
        agent.run_sync("go")
    result = caught.value.result
    assert result.stop_reason == "tool_failures"
    assert "3 tool calls in a row failed" in result.explanation
    runs, spans = _stored(db, tp)
    assert [(r[2], r[3], r[8]) for r in runs] == [("tool_failures", "stuck", 3)]
    assert [(s[4], s[5]) for s in spans if s[1] == "execute_tool"] == [("error", "MODEL_RETRY")] * 3


def test_a_tool_exception_ends_the_run_as_error_and_is_raised_unchanged(
    store: tuple[TracerProvider, Path],
) -> None:
    tp, db = store

    def broken(order_id: str) -> str:
        raise ValueError("database is down")

    agent = _agent(_calls({"order_id": "Z-1"}), tp, LoopLimits(max_steps=20), tool=broken)
    # pydantic-ai ends a run on a tool's plain exception; the guard records it, the caller
    # gets the exception it would get without loopwatch
    with pytest.raises(ValueError, match="database is down"):
        agent.run_sync("go")
    runs, spans = _stored(db, tp)
    assert [(r[2], r[3]) for r in runs] == [("error", "error")]
    assert "the agent run raised ValueError: database is down" in runs[0][5]
    assert [(s[4], s[5]) for s in spans if s[1] == "execute_tool"] == [("error", "TOOL_EXCEPTION")]


def test_pydantic_ais_usage_limit_is_recorded_as_the_matching_limit(
    store: tuple[TracerProvider, Path],
) -> None:
    tp, db = store
    cap = LoopwatchCapability(limits=LoopLimits(max_steps=20))
    agent = Agent(
        FunctionModel(_calls(*({"order_id": f"U-{i}"} for i in range(10)), final=None)),
        capabilities=[cap, Instrumentation(settings=InstrumentationSettings(tracer_provider=tp))],
    )

    @agent.tool_plain
    def lookup(order_id: str) -> str:
        """Find an order."""
        return "shipped"

    with pytest.raises(UsageLimitExceeded):  # pydantic-ai's own end reaches the caller as is
        agent.run_sync("go", usage_limits=UsageLimits(request_limit=2))
    assert cap.last_result is not None
    assert cap.last_result.stop_reason == "max_model_calls"
    assert "pydantic-ai's usage limit was reached" in cap.last_result.explanation
    runs, _ = _stored(db, tp)
    assert [(r[2], r[4]) for r in runs] == [("max_model_calls", "model_calls")]


@pytest.mark.parametrize(
    ("finish", "reason"),
    [("length", "output_truncated"), ("content_filter", "refusal")],
)
def test_model_stop_signals(finish: str, reason: str) -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("partial")], finish_reason=finish)  # type: ignore[arg-type]

    agent = _agent(fn, None, LoopLimits())
    with pytest.raises(AgentLoopError) as caught:
        agent.run_sync("go")
    assert caught.value.result.stop_reason == reason
    assert caught.value.result.final == "partial"


def test_testmodel_with_structured_output_completes_through_the_output_tool() -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        status: str

    seen: list[Any] = []
    agent = Agent(
        TestModel(),
        output_type=Answer,
        capabilities=[LoopwatchCapability(limits=LoopLimits(max_steps=5),
                                          observer=None, verify=lambda r: seen.append(r) or [])],
    )  # fmt: skip

    @agent.tool_plain
    def lookup(order_id: str) -> str:
        """Find an order."""
        return "shipped"

    out = agent.run_sync("go")
    assert isinstance(out.output, Answer)
    assert len(seen) == 1 and json.loads(seen[0].final) == out.output.model_dump()


def test_a_rejected_answer_goes_back_to_the_model_as_a_retry_prompt() -> None:
    answers = iter(["Shipped.", "Shipped, arriving Friday."])
    prompts: list[str] = []

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts.append(str(messages[-1]))
        return ModelResponse(parts=[TextPart(next(answers))])

    def verify(result: Any) -> list[str]:
        return [] if "Friday" in (result.final or "") else ["say when it arrives"]

    cap = LoopwatchCapability(limits=LoopLimits(max_steps=5), verify=verify)
    agent = Agent(FunctionModel(fn), capabilities=[cap])
    assert agent.run_sync("Where is A-1?").output == "Shipped, arriving Friday."
    assert cap.last_result is not None and cap.last_result.stop_reason == "completed"
    assert cap.last_result.counters["steps"] == 2
    assert "say when it arrives" in prompts[1]


def test_answers_rejected_to_the_cap_stop_with_completion_rejected() -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Shipped.")])

    cap = LoopwatchCapability(
        limits=LoopLimits(max_steps=5, max_completion_rejects=2), verify=lambda r: ["the ETA"]
    )
    with pytest.raises(AgentStuck) as caught:
        Agent(FunctionModel(fn), capabilities=[cap]).run_sync("go")
    assert caught.value.result.stop_reason == "completion_rejected"


def test_parallel_tool_calls_in_one_step() -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("lookup", {"order_id": "A-1"}, tool_call_id="a"),
                    ToolCallPart("lookup", {"order_id": "B-2"}, tool_call_id="b"),
                ]
            )
        return ModelResponse(parts=[TextPart("both")])

    cap = LoopwatchCapability(limits=LoopLimits(max_steps=5))
    agent = Agent(FunctionModel(fn), capabilities=[cap])

    @agent.tool_plain
    def lookup(order_id: str) -> str:
        """Find an order."""
        return f"order {order_id}: shipped"

    agent.run_sync("go")
    result = cap.last_result
    assert result is not None and result.stop_reason == "completed"
    assert (result.counters["steps"], result.counters["tool_calls"]) == (2, 2)
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] in (["a", "b"], ["b", "a"])


def test_each_run_gets_a_copy_with_every_option_and_fresh_state() -> None:
    cap = LoopwatchCapability(
        limits=LoopLimits(max_steps=3),
        task_type="support",
        agent_name="bot",
        prices={"m-1": ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)},
        repeat_exempt=("lookup",),
        capture_content=True,
    )
    copy = asyncio.run(cap.for_run(None))  # type: ignore[arg-type]  # for_run reads no context
    options = [f.name for f in dataclasses.fields(cap) if f.init]
    assert {n: getattr(copy, n) for n in options} == {n: getattr(cap, n) for n in options}
    assert copy is not cap and copy.guard is None and copy.last_result is None
