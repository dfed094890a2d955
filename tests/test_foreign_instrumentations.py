"""Other instrumentations' real packages, driven against the local server that speaks OpenAI's
wire format (tests/wire_server.py), their spans exported over OTLP/HTTP to a real ``serve``:
each run is rebuilt with its task type, steps, tokens and derived stop (docs/foreign.md).

Each package is in the ``test`` extra; a test skips, naming the package, where it is absent.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from serving import ServeProcess, store_rows
from wire_server import Reply, wire_server

COLUMNS = (
    "task_type, agent_name, source, stop_reason, limit_name, steps, tool_calls, input_tokens, "
    "output_tokens, replay_decision, replay_step, explanation"
)


def chat(
    tool_args: dict[str, Any] | None = None, text: str | None = None, call: int = 1
) -> dict[str, Any]:
    """A Chat Completions answer: a call of ``lookup`` with ``tool_args``, else ``text``."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_args is not None:
        message["tool_calls"] = [{"id": f"call_{call}", "type": "function", "function": {
            "name": "lookup", "arguments": json.dumps(tool_args)}}]  # fmt: skip
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if tool_args is not None else "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }  # fmt: skip


def repeats_then_answer(n: int) -> list[Reply]:
    """``n`` identical lookups (the tool answers the same each time), then an answer."""
    return [Reply(body=chat({"order_id": "7"}, call=k)) for k in range(n)] + [
        Reply(body=chat(text="Your order is pending."))
    ]


class Live:
    """A real serve, and a tracer provider exporting to it over OTLP/HTTP (protobuf)."""

    def __init__(self, tmp_path: Path, service: str) -> None:
        self.db = tmp_path / "live.duckdb"
        self.server = ServeProcess(self.db, "--foreign-grace-s", "0")
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        endpoint = f"http://127.0.0.1:{self.server.otlp}/v1/traces"
        self.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))

    def runs(self) -> list[dict[str, Any]]:
        """Every span exported (each answered 200 = committed), serve stopped, its runs."""
        assert self.provider.force_flush()
        self.provider.shutdown()
        assert self.server.stop() == 0
        rows = store_rows(self.db, f"SELECT {COLUMNS} FROM runs ORDER BY start_ns")
        names = [c.strip() for c in COLUMNS.split(",")]
        return [dict(zip(names, r, strict=True)) for r in rows]


@pytest.fixture
def live(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    handle = Live(tmp_path, service=request.node.name[:40])
    try:
        yield handle
    finally:
        handle.server.kill()


# --- OpenAI Agents SDK through OpenInference ---------------------------------------------------


def _agents_run(live: Live, replies: list[Reply], max_turns: int) -> None:
    pytest.importorskip("agents", reason="openai-agents is in the test extra")
    oi = pytest.importorskip(
        "openinference.instrumentation.openai_agents",
        reason="openinference-instrumentation-openai-agents is in the test extra",
    )
    import openai
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from agents.exceptions import MaxTurnsExceeded

    @function_tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        return f"order {order_id}: pending"

    set_tracing_disabled(False)  # other tests switch the SDK's own tracing off
    instrumentor = oi.OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=live.provider)
    try:
        with wire_server(*replies, default=Reply(body=chat({"order_id": "7"}))) as server:
            client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k")
            model = OpenAIChatCompletionsModel("gpt-4o", client)
            agent = Agent(name="support-bot", model=model, tools=[lookup])
            with contextlib.suppress(MaxTurnsExceeded):  # the limit's own end: in the spans
                Runner.run_sync(agent, "where is my order?", max_turns=max_turns)
    finally:
        instrumentor.uninstrument()
        set_tracing_disabled(True)


def test_openai_agents_via_openinference_turn_limit(live: Live) -> None:
    _agents_run(live, [Reply(body=chat({"order_id": "7"}, call=k)) for k in range(3)], max_turns=3)
    (run,) = live.runs()
    assert (run["source"], run["task_type"], run["agent_name"]) == (
        "foreign",
        "support-bot",
        "support-bot",
    )
    assert (run["stop_reason"], run["limit_name"]) == ("max_steps", "steps")
    assert "Max turns exceeded" in run["explanation"]
    assert (run["steps"], run["tool_calls"], run["input_tokens"]) == (3, 3, 300)


def test_openai_agents_via_openinference_repeat_shows_the_would_be_stop(live: Live) -> None:
    _agents_run(live, repeats_then_answer(3), max_turns=10)
    (run,) = live.runs()
    assert run["stop_reason"] == "completed"
    assert (run["steps"], run["tool_calls"], run["output_tokens"]) == (4, 3, 40)
    assert (run["replay_decision"], run["replay_step"]) == ("repeated_action", 2)


# --- pydantic-ai's native instrumentation ------------------------------------------------------


def _pydantic_ai_run(live: Live, replies: list[Reply], request_limit: int) -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the test extra")
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    with wire_server(*replies, default=Reply(body=chat({"order_id": "7"}))) as server:
        provider = OpenAIProvider(base_url=server.url + "/v1", api_key="k")
        settings = InstrumentationSettings(tracer_provider=live.provider)
        agent = Agent(
            OpenAIChatModel("gpt-4o", provider=provider),
            name="billing",
            capabilities=[Instrumentation(settings=settings)],
        )

        @agent.tool_plain
        def lookup(order_id: str) -> str:
            """Find an order."""
            return f"order {order_id}: pending"

        with contextlib.suppress(UsageLimitExceeded):
            agent.run_sync(
                "where is my order?", usage_limits=UsageLimits(request_limit=request_limit)
            )


def test_pydantic_ai_native_spans_usage_limit(live: Live) -> None:
    _pydantic_ai_run(live, [Reply(body=chat({"order_id": "7"}, call=k)) for k in range(2)], 2)
    (run,) = live.runs()
    assert (run["source"], run["task_type"], run["agent_name"]) == ("foreign", "billing", "billing")
    assert (run["stop_reason"], run["limit_name"]) == ("max_model_calls", "model_calls")
    assert "request_limit of 2" in run["explanation"]
    assert (run["steps"], run["tool_calls"], run["input_tokens"]) == (2, 2, 200)


def test_pydantic_ai_native_spans_repeat(live: Live) -> None:
    _pydantic_ai_run(live, repeats_then_answer(3), request_limit=20)
    (run,) = live.runs()
    assert (run["stop_reason"], run["steps"], run["tool_calls"]) == ("completed", 4, 3)
    assert (run["replay_decision"], run["replay_step"]) == ("repeated_action", 2)


# --- OpenAI client instrumentations (no agent span: the run is the trace's root) ---------------


def _client_loop(live: Live, instrumentor: Any) -> None:
    """A hand-written loop: each model call asks for lookup until the answer; the caller's own
    root span holds the run (these instrumentations trace model calls only)."""
    import openai

    instrumentor.instrument(tracer_provider=live.provider)
    try:
        with wire_server(*repeats_then_answer(2)) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="k")
            tracer = live.provider.get_tracer("support-loop")
            with tracer.start_as_current_span("support loop"):
                messages: list[Any] = [{"role": "user", "content": "where is my order?"}]
                for _ in range(5):
                    answer = client.chat.completions.create(model="gpt-4o", messages=messages)
                    choice = answer.choices[0]
                    if choice.finish_reason != "tool_calls":
                        break
                    messages.append(choice.message.model_dump(exclude_none=True))
                    call_id = choice.message.tool_calls[0].id
                    messages.append({"role": "tool", "tool_call_id": call_id,
                                     "content": "order 7: pending"})  # fmt: skip
    finally:
        instrumentor.uninstrument()


@pytest.mark.parametrize(
    ("module", "attribute", "package"),
    [
        ("openinference.instrumentation.openai", "OpenAIInstrumentor",
         "openinference-instrumentation-openai"),
        ("opentelemetry.instrumentation.openai_v2", "OpenAIInstrumentor",
         "opentelemetry-instrumentation-openai-v2"),
        ("opentelemetry.instrumentation.openai", "OpenAIInstrumentor",
         "opentelemetry-instrumentation-openai (OpenLLMetry)"),
    ],
)  # fmt: skip
def test_openai_client_instrumentations(
    live: Live, module: str, attribute: str, package: str
) -> None:
    mod = pytest.importorskip(module, reason=f"{package} is in the test extra")
    _client_loop(live, getattr(mod, attribute)())
    (run,) = live.runs()
    assert run["source"] == "foreign"
    assert run["task_type"] == live.provider.resource.attributes["service.name"]
    assert (run["steps"], run["input_tokens"], run["output_tokens"]) == (3, 300, 30)
    assert run["stop_reason"] == "completed", run["explanation"]


# --- LangGraph through OpenInference's LangChain instrumentation ------------------------------


def test_langgraph_via_openinference_recursion_limit(live: Live) -> None:
    oi = pytest.importorskip(
        "openinference.instrumentation.langchain",
        reason="openinference-instrumentation-langchain is in the test extra",
    )
    lc_openai = pytest.importorskip(
        "langchain_openai", reason="langchain-openai is in the test extra"
    )
    from langchain_core.tools import tool
    from langgraph.errors import GraphRecursionError
    from langgraph.prebuilt import create_react_agent

    @tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        return f"order {order_id}: pending"

    instrumentor = oi.LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=live.provider)
    try:
        replies = [Reply(body=chat({"order_id": "7"}, call=k)) for k in range(20)]
        with wire_server(*replies) as server:
            model = lc_openai.ChatOpenAI(model="gpt-4o", base_url=server.url + "/v1", api_key="k")
            agent = create_react_agent(model, [lookup], name="orders")
            with pytest.raises(GraphRecursionError):
                agent.invoke({"messages": [("user", "where is my order?")]}, {"recursion_limit": 5})
    finally:
        instrumentor.uninstrument()
    (run,) = live.runs()
    assert (run["source"], run["agent_name"]) == ("foreign", "orders")
    assert run["task_type"] == live.provider.resource.attributes["service.name"]
    assert (run["stop_reason"], run["limit_name"]) == ("max_steps", "steps")
    assert "Recursion limit of 5" in run["explanation"]
    assert (run["steps"], run["tool_calls"], run["input_tokens"]) == (3, 2, 300)
    assert (run["replay_decision"], run["replay_step"]) == ("repeated_action", 2)


# --- smolagents through OpenInference's smolagents instrumentation -----------------------------


def _answer(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-2", "object": "chat.completion", "created": 0, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }  # fmt: skip


def test_smolagents_via_openinference_step_limit(live: Live) -> None:
    oi = pytest.importorskip(
        "openinference.instrumentation.smolagents",
        reason="openinference-instrumentation-smolagents is in the test extra",
    )
    smolagents = pytest.importorskip("smolagents", reason="smolagents is in the test extra")

    @smolagents.tool
    def lookup(order_id: str) -> str:
        """Find an order.

        Args:
            order_id: the order's id
        """
        return f"order {order_id}: pending"

    instrumentor = oi.SmolagentsInstrumentor()
    instrumentor.instrument(tracer_provider=live.provider)
    try:
        replies = [Reply(body=chat({"order_id": "7"}, call=k)) for k in range(3)]
        with wire_server(*replies, default=Reply(body=_answer("It is pending."))) as server:
            model = smolagents.OpenAIServerModel(
                model_id="gpt-4o", api_base=server.url + "/v1", api_key="k"
            )
            agent = smolagents.ToolCallingAgent(
                tools=[lookup], model=model, max_steps=3, name="orders", verbosity_level=0
            )
            agent.run("where is my order?")
    finally:
        instrumentor.uninstrument()
    (run,) = live.runs()
    assert (run["source"], run["agent_name"]) == ("foreign", "orders.run")
    assert (run["stop_reason"], run["limit_name"]) == ("max_steps", "steps")
    assert "max_steps=3 and 4 model calls" in run["explanation"]
    assert (run["steps"], run["tool_calls"], run["input_tokens"]) == (4, 3, 400)
    assert (run["replay_decision"], run["replay_step"]) == ("repeated_action", 2)
