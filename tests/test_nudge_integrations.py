"""Nudges through each framework integration, the way the framework allows: pydantic-ai (a
request hook hands the model a changed request), the OpenAI Agents SDK (the input list the
hook is given is the one the model gets), LangGraph (a node takes the nudge from the handler:
callbacks see a copy of the messages). Real frameworks, their own scripted models."""

from __future__ import annotations

import itertools
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from loopwatch.instrumentation import AgentStuck, LoopLimits
from loopwatch.instrumentation.integrations.langgraph import LoopwatchCallbackHandler
from loopwatch.instrumentation.integrations.openai_agents import LoopwatchRunHooks, run_sync
from loopwatch.instrumentation.integrations.pydantic_ai import LoopwatchCapability
from pydantic_ai import Agent as PaiAgent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

set_tracing_disabled(True)
NUDGE = LoopLimits(on_stuck="nudge", max_steps=8)
SAME = "order A-1: not found"


# --- pydantic-ai ------------------------------------------------------------------------------


def _pai_nudged(messages: list[ModelMessage]) -> bool:
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(
        isinstance(p, UserPromptPart) and str(p.content).startswith("Loop check")
        for p in last.parts
    )


def _pai_agent(obey: bool) -> tuple[PaiAgent[None, str], LoopwatchCapability]:
    counter = itertools.count()

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        i = next(counter)
        if obey and _pai_nudged(messages):
            return ModelResponse(parts=[TextPart("A-1 does not exist.")])
        part = ToolCallPart("lookup", {"order_id": "A-1"}, tool_call_id=f"c{i}")
        return ModelResponse(parts=[part])

    cap = LoopwatchCapability(limits=NUDGE, task_type="support")
    agent = PaiAgent(FunctionModel(fn), capabilities=[cap], retries=20)

    @agent.tool_plain
    def lookup(order_id: str) -> str:
        """Find an order."""
        return SAME

    return agent, cap


def test_pydantic_ai_model_that_obeys_the_nudge_completes() -> None:
    agent, cap = _pai_agent(obey=True)
    out = agent.run_sync("Where is A-1?")
    assert out.output == "A-1 does not exist."
    result = cap.last_result
    assert result is not None and result.stop_reason == "completed"
    assert [n["detector"] for n in result.nudges] == ["repeated_action"]


def test_pydantic_ai_model_that_ignores_the_nudge_stops() -> None:
    agent, _ = _pai_agent(obey=False)
    try:
        agent.run_sync("Where is A-1?")
    except AgentStuck as exc:
        result = exc.result
    else:
        raise AssertionError("the run should have stopped")
    assert result.stop_reason == "repeated_action" and len(result.nudges) == 1
    assert "nudged at step 2" in result.explanation


# --- OpenAI Agents SDK ------------------------------------------------------------------------


def _sdk_agent(steps: list[Any]) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(steps)

    @function_tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        return SAME

    return Agent(name="support-bot", model=model, tools=[lookup]), model


def _sdk_call(i: int) -> ModelStep:
    return ModelStep(output=[function_call("lookup", {"order_id": "A-1"}, call_id=f"c{i}")])


def test_openai_agents_hand_the_nudge_to_the_next_model_call() -> None:
    agent, model = _sdk_agent(
        [_sdk_call(0), _sdk_call(1), ModelStep(output=[assistant_message("gone")])]
    )
    hooks = LoopwatchRunHooks(limits=NUDGE, task_type="support")
    out = run_sync(agent, "Where is A-1?", hooks=hooks)
    assert out.final_output == "gone"
    assert hooks.result is not None and [n["step"] for n in hooks.result.nudges] == [2]
    last_input = model.calls[-1].input
    assert isinstance(last_input, list | tuple)
    assert last_input[-1] == {"role": "user", "content": hooks.result.nudges[0]["message"]}


def test_openai_agents_model_that_ignores_the_nudge_stops() -> None:
    agent, _ = _sdk_agent([_sdk_call(i) for i in range(6)])
    hooks = LoopwatchRunHooks(limits=NUDGE, task_type="support")
    try:
        run_sync(agent, "Where is A-1?", hooks=hooks)
    except AgentStuck as exc:
        assert exc.result.stop_reason == "repeated_action" and len(exc.result.nudges) == 1
    else:
        raise AssertionError("the run should have stopped")


# --- LangGraph --------------------------------------------------------------------------------


def _graph(handler: LoopwatchCallbackHandler, obey: bool) -> Any:
    def script() -> Any:
        n = itertools.count()
        while True:
            yield AIMessage(
                "",
                tool_calls=[{"name": "lookup", "args": {"order_id": "A-1"}, "id": f"c{next(n)}"}],
            )

    calls = script()
    model = GenericFakeChatModel(messages=calls)

    @tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        return SAME

    def agent(state: MessagesState) -> dict[str, Any]:
        nudge = handler.take_nudge()  # callbacks see a copy: the node adds the nudge
        if nudge is not None and obey:
            return {"messages": [HumanMessage(nudge), AIMessage("A-1 does not exist.")]}
        extra = [] if nudge is None else [HumanMessage(nudge)]
        return {"messages": [*extra, model.invoke([*state["messages"], *extra])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile(name="support-graph")


def test_langgraph_node_takes_the_nudge() -> None:
    handler = LoopwatchCallbackHandler(limits=NUDGE, task_type="support")
    out = _graph(handler, obey=True).invoke(
        {"messages": [("user", "Where is A-1?")]}, config={"callbacks": [handler]}
    )
    assert out["messages"][-1].content == "A-1 does not exist."
    assert out["messages"][-2].content.startswith("Loop check at step 2:")
    assert handler.last_result.stop_reason == "completed"
    assert len(handler.last_result.nudges) == 1


def test_langgraph_run_that_ignores_the_nudge_stops() -> None:
    handler = LoopwatchCallbackHandler(limits=NUDGE, task_type="support")
    try:
        _graph(handler, obey=False).invoke(
            {"messages": [("user", "Where is A-1?")]}, config={"callbacks": [handler]}
        )
    except AgentStuck as exc:
        assert exc.result.stop_reason == "repeated_action" and len(exc.result.nudges) == 1
    else:
        raise AssertionError("the run should have stopped")
