"""What the framework integrations add to a framework's own loop, side by side, per step.

Each framework runs the same agent with its own fake model (one new tool call per step, then an
answer), in interleaved rounds; the median round is reported, in microseconds per step:

- pydantic-ai (``FunctionModel``): ``plain`` (no spans); ``spans`` (pydantic-ai's own
  ``Instrumentation``); ``loopwatch`` (the same spans, annotated by ``LoopwatchCapability``, the
  guard deciding every step). Target: ``loopwatch / spans`` <= 1.3.
- LangGraph (``GenericFakeChatModel``, a ReAct graph) and the OpenAI Agents SDK
  (``ScriptedModel``), which emit no OTel spans of their own: ``plain``; ``guard`` (the handler /
  hooks with no span output); ``loopwatch`` (the guard plus loopwatch's full span tree).
  Target: ``loopwatch / plain`` <= 1.3.

Spans go to a ``TracerProvider`` whose exporter does nothing, so the numbers are span creation,
not export.

    python benchmarks/bench_integrations.py [--quick] [--steps N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from loopwatch.instrumentation import LoopLimits, set_observer_factory
from loopwatch.instrumentation.tracing import OTelObserverFactory
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

TARGET = 1.3
LIMITS = LoopLimits(max_steps=1000, max_same_call=None, max_idle_turns=None)


class NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider() -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(NullExporter()))
    return tp


# --- pydantic-ai -----------------------------------------------------------------------------


def pydantic_ai_variants(steps: int, tp: TracerProvider) -> dict[str, Callable[[], None]]:
    from loopwatch.instrumentation.integrations.pydantic_ai import LoopwatchCapability
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.usage import UsageLimits

    def model(messages: list[Any], info: Any) -> ModelResponse:
        n = (len(messages) - 1) // 2
        if n < steps - 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"order_id": f"A-{n}"})])
        return ModelResponse(parts=[TextPart("done")])

    def agent(*caps: Any) -> Any:
        a = Agent(FunctionModel(model), capabilities=list(caps))

        @a.tool_plain
        def lookup(order_id: str) -> str:
            return f"order {order_id}: shipped"

        return a

    spans = InstrumentationSettings(tracer_provider=tp)
    agents = {
        "plain": agent(),
        "spans": agent(Instrumentation(settings=spans)),
        "loopwatch": agent(Instrumentation(settings=spans), LoopwatchCapability(limits=LIMITS)),
    }
    limits = UsageLimits(request_limit=None)
    return {
        name: (lambda a=a: a.run_sync("go", usage_limits=limits) and None)
        for name, a in agents.items()
    }


# --- LangGraph --------------------------------------------------------------------------------


def langgraph_variants(steps: int, tp: TracerProvider) -> dict[str, Callable[[], None]]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from loopwatch.instrumentation.integrations.langgraph import LoopwatchCallbackHandler

    def script() -> Iterator[AIMessage]:
        for i in range(steps - 1):
            call = {"name": "lookup", "args": {"order_id": f"A-{i}"}, "id": f"c{i}"}
            yield AIMessage("", tool_calls=[call])
        yield AIMessage("done")

    @tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        return f"order {order_id}: shipped"

    def graph() -> Any:
        model = GenericFakeChatModel(messages=script())

        def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        b = StateGraph(MessagesState)
        b.add_node("agent", agent)
        b.add_node("tools", ToolNode([lookup]))
        b.add_edge(START, "agent")
        b.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
        b.add_edge("tools", "agent")
        return b.compile(name="bench")

    inputs = {"messages": [("user", "go")]}
    config = {"recursion_limit": 10 * steps}

    def plain() -> None:
        graph().invoke(inputs, config=config)

    def guarded() -> None:
        handler = LoopwatchCallbackHandler(limits=LIMITS)
        graph().invoke(inputs, config={**config, "callbacks": [handler]})

    return {"plain": plain, "guard": guarded, "loopwatch": guarded}


# --- OpenAI Agents SDK ------------------------------------------------------------------------


def openai_agents_variants(steps: int, tp: TracerProvider) -> dict[str, Callable[[], None]]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
    from loopwatch.instrumentation.integrations.openai_agents import LoopwatchRunHooks

    set_tracing_disabled(True)

    @function_tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        return f"order {order_id}: shipped"

    def agent() -> Any:
        script = [
            ModelStep(output=[function_call("lookup", {"order_id": f"A-{i}"}, call_id=f"c{i}")])
            for i in range(steps - 1)
        ]
        script.append(ModelStep(output=[assistant_message("done")]))
        return Agent(name="bench", model=ScriptedModel(script), tools=[lookup])

    def plain() -> None:
        asyncio.run(Runner.run(agent(), "go", max_turns=10 * steps))

    def guarded() -> None:
        hooks = LoopwatchRunHooks(limits=LIMITS)
        asyncio.run(Runner.run(agent(), "go", max_turns=10 * steps, hooks=hooks))

    return {"plain": plain, "guard": guarded, "loopwatch": guarded}


FRAMEWORKS: dict[str, tuple[Callable[..., dict[str, Callable[[], None]]], str]] = {
    "pydantic-ai": (pydantic_ai_variants, "spans"),
    "langgraph": (langgraph_variants, "plain"),
    "openai-agents": (openai_agents_variants, "plain"),
}


def measure(
    variants: dict[str, Callable[[], None]],
    factory: OTelObserverFactory,
    rounds: int,
    runs: int,
    steps: int,
) -> dict[str, float]:
    """Median seconds per step of each variant over interleaved rounds."""
    per_round: dict[str, list[float]] = {name: [] for name in variants}
    for name, fn in variants.items():  # warm-up
        set_observer_factory(factory if name == "loopwatch" else None)
        fn()
    for _ in range(rounds):
        for name, fn in variants.items():
            set_observer_factory(factory if name == "loopwatch" else None)
            start = time.perf_counter()
            for _ in range(runs):
                fn()
            per_round[name].append((time.perf_counter() - start) / (runs * steps))
    set_observer_factory(None)
    return {name: statistics.median(v) for name, v in per_round.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (fewer rounds)")
    parser.add_argument("--steps", type=int, default=10, help="steps per run")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None, help="runs per variant per round")
    parser.add_argument("--only", choices=sorted(FRAMEWORKS), default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    runs = args.runs or (3 if args.quick else 10)
    tp = _provider()
    factory = OTelObserverFactory(tp)
    ok = True
    for framework, (make, base) in FRAMEWORKS.items():
        if args.only and framework != args.only:
            continue
        med = measure(make(args.steps, tp), factory, rounds, runs, args.steps)
        ratio = med["loopwatch"] / med[base]
        ok = ok and ratio <= TARGET
        print(f"{framework}: {args.steps} steps/run, {runs} runs x {rounds} rounds, median round")
        for name, seconds in med.items():
            print(f"  {name:<10}{seconds * 1e6:>10.1f} us/step")
        print(f"  loopwatch / {base}: {ratio:.3f}  (target <= {TARGET})")
    tp.shutdown()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
