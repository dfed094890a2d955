"""LangGraph graphs driven by langchain-core's fake chat model, with the loopwatch callback
handler: stop reasons, explanations and the spans in a real DuckDB store, sync and async."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import ToolException, tool
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from loopwatch.instrumentation import AgentStuck, LimitReached, LoopLimits, instrument
from loopwatch.instrumentation.integrations.langgraph import LoopwatchCallbackHandler
from opentelemetry.sdk.trace import TracerProvider


def _calls(*args: dict[str, Any], final: str | None = "done") -> Iterator[AIMessage]:
    """AIMessages calling lookup with each of ``args`` (then answering ``final``, or repeating
    the last call forever when ``final`` is None)."""
    n = itertools.count()
    for a in args:
        i = next(n)
        yield AIMessage("", tool_calls=[{"name": "lookup", "args": a, "id": f"c{i}"}],
                        usage_metadata={"input_tokens": 100, "output_tokens": 10,
                                        "total_tokens": 110})  # fmt: skip
    if final is not None:
        yield AIMessage(final, usage_metadata={"input_tokens": 100, "output_tokens": 10,
                                               "total_tokens": 110})  # fmt: skip
        return
    while True:
        i = next(n)
        yield AIMessage("", tool_calls=[{"name": "lookup", "args": args[-1], "id": f"c{i}"}])


def _graph(
    messages: Iterator[AIMessage],
    lookup_fn: Callable[[str], str] | None = None,
    *,
    errors: str = "raise",
) -> Any:
    """A ReAct graph: agent -> tools -> agent ... ``errors``: who turns a tool's exception into
    a ToolMessage: ``tool`` (the tool's handle_tool_error), ``node`` (ToolNode), or nobody."""
    model = GenericFakeChatModel(messages=messages)

    @tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        if lookup_fn is not None:
            return lookup_fn(order_id)
        return f"order {order_id}: shipped"

    lookup.handle_tool_error = errors == "tool"

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup], handle_tool_errors=errors == "node"))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile(name="support-graph")


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


def _invoke(graph: Any, handler: LoopwatchCallbackHandler, mode: str, **config: Any) -> Any:
    inputs = {"messages": [("user", "Where are my orders?")]}
    cfg = {"callbacks": [handler], **config}
    if mode == "async":
        return asyncio.run(graph.ainvoke(inputs, config=cfg))
    return graph.invoke(inputs, config=cfg)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_that_completes(mode: str, store: Callable[[], Any]) -> None:
    handler = LoopwatchCallbackHandler(limits=LoopLimits(max_steps=6), task_type="support")
    graph = _graph(_calls({"order_id": "A-1"}, {"order_id": "B-2"}, final="Both shipped."))
    out = _invoke(graph, handler, mode)
    assert out["messages"][-1].content == "Both shipped."
    assert handler.last_result.stop_reason == "completed"
    runs, spans = store()
    assert runs == [
        ("support-graph", "support", "completed", "success", None, "", 3.0, 3.0, 2.0, 300)
    ]
    names = [s[0] for s in spans]
    assert names.count("invoke_agent support-graph") == 1
    assert [n for n in names if n.startswith("step")] == ["step 1", "step 2", "step 3"]
    assert names.count("execute_tool lookup") == 2
    assert all(s[2] for s in spans)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_same_call_with_the_same_result_stops_as_repeated_tool_call(
    mode: str, store: Callable[[], Any]
) -> None:
    a, b, c = {"order_id": "A-1"}, {"order_id": "B-2"}, {"order_id": "C-3"}
    handler = LoopwatchCallbackHandler(limits=LoopLimits(max_steps=20), task_type="support")
    with pytest.raises(AgentStuck) as caught:
        _invoke(_graph(_calls(a, b, a, c, a, b)), handler, mode)
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


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_step_cap_stops_with_max_steps(mode: str, store: Callable[[], Any]) -> None:
    handler = LoopwatchCallbackHandler(limits=LoopLimits(max_steps=3))
    many = [{"order_id": f"X-{i}"} for i in range(10)]
    with pytest.raises(LimitReached) as caught:
        _invoke(_graph(_calls(*many, final=None)), handler, mode)
    assert caught.value.result.stop_reason == "max_steps"
    assert "all 3 steps (max_steps=3) are used" in caught.value.result.explanation
    runs, _ = store()
    assert [(r[2], r[4], r[6]) for r in runs] == [("max_steps", "steps", 3.0)]


def test_langgraphs_recursion_limit_is_recorded_as_max_steps(store: Callable[[], Any]) -> None:
    handler = LoopwatchCallbackHandler(limits=LoopLimits(max_steps=None))
    many = [{"order_id": f"R-{i}"} for i in range(50)]
    with pytest.raises(GraphRecursionError):
        _invoke(_graph(_calls(*many, final=None)), handler, "sync", recursion_limit=5)
    assert handler.last_result.stop_reason == "max_steps"
    assert "LangGraph's recursion limit was reached" in handler.last_result.explanation
    runs, _ = store()
    assert [(r[2], r[3], r[4]) for r in runs] == [("max_steps", "limit", "steps")]


@pytest.mark.parametrize(
    ("mode", "errors"), [("sync", "tool"), ("async", "tool"), ("sync", "node")]
)
def test_a_tool_that_keeps_failing_stops_with_tool_failures(
    mode: str, errors: str, store: Callable[[], Any]
) -> None:
    def broken(order_id: str) -> str:
        raise ToolException(f"order {order_id} is not in the database")

    handler = LoopwatchCallbackHandler(
        limits=LoopLimits(max_steps=20, max_same_error=None, max_consecutive_failures=3)
    )
    many = [{"order_id": f"Y-{i}"} for i in range(10)]
    # counted from the ToolMessage with status="error" (tool), or from on_tool_error (node)
    graph = _graph(_calls(*many, final=None), broken, errors=errors)
    with pytest.raises(AgentStuck) as caught:
        _invoke(graph, handler, mode)
    result = caught.value.result
    assert result.stop_reason == "tool_failures"
    assert "3 tool calls in a row failed" in result.explanation
    runs, spans = store()
    assert [(r[2], r[8]) for r in runs] == [("tool_failures", 3.0)]
    failed = [(s[4], s[5]) for s in spans if s[1] == "execute_tool"]
    code = "TOOL_ERROR" if errors == "tool" else "TOOL_EXCEPTION"
    assert failed == [("error", code)] * 3


def test_one_handler_serves_concurrent_runs(store: Callable[[], Any]) -> None:
    handler = LoopwatchCallbackHandler(limits=LoopLimits(max_steps=6))

    async def both() -> list[Any]:
        g1 = _graph(_calls({"order_id": "A-1"}, final="one"))
        g2 = _graph(_calls({"order_id": "B-1"}, {"order_id": "B-2"}, final="two"))
        inputs = {"messages": [("user", "hi")]}
        cfg: Any = {"callbacks": [handler]}
        return list(await asyncio.gather(g1.ainvoke(inputs, cfg), g2.ainvoke(inputs, cfg)))

    outs = asyncio.run(both())
    assert [o["messages"][-1].content for o in outs] == ["one", "two"]
    runs, _ = store()
    assert sorted((r[2], r[6], r[8]) for r in runs) == [
        ("completed", 2.0, 1.0),
        ("completed", 3.0, 2.0),
    ]


def test_a_rejected_answer_stops_with_completion_rejected() -> None:
    handler = LoopwatchCallbackHandler(limits=LoopLimits(), verify=lambda r: ["say when"])
    with pytest.raises(AgentStuck) as caught:
        _invoke(_graph(_calls(final="Shipped.")), handler, "sync")
    result = caught.value.result
    assert result.stop_reason == "completion_rejected"
    assert "cannot return the unmet criteria to the model" in result.explanation
    assert "say when" in result.explanation
