"""Cost per ended span of MetricsSpanProcessor, next to a bare SpanProcessor that does nothing.

Two views, both measured side by side in one run (arms interleaved, best of the repeats):

1. ``on_end`` alone, on already-ended spans of each kind (run, tool, chat, other): the
   processor's own cost per span.
2. The full span life (start, set the attributes of docs/telemetry.md,
   end) through a real ``TracerProvider``
   for one typical run (1 run span, 4 step, 4 chat and 6 tool spans): what an agent pays per span
   with the processor installed, as a ratio to the same provider with the do-nothing processor.

    python benchmarks/bench_metrics.py [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry


class BareProcessor(SpanProcessor):
    """A SpanProcessor that does nothing: the baseline."""

    def on_end(self, span: ReadableSpan) -> None:
        pass


class Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def budget(step: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for b in sc.BUDGETS:
        attrs[sc.budget_used(b)] = step
    attrs[sc.budget_limit("steps")] = 8
    attrs[sc.budget_limit("tokens")] = 100_000
    attrs[sc.BUDGET_MAX_UTILIZATION] = step / 8
    return attrs


def emit_run(tracer: Tracer, n: int) -> None:
    """One typical run: run > 4 x (step > chat + tools), 6 tool spans in all."""
    common = {sc.RUN_ID: f"run-{n}", sc.TASK_TYPE: f"task{n % 5}"}
    with tracer.start_as_current_span(f"{sc.SPAN_RUN} agent") as run:
        for step in range(1, 5):
            with tracer.start_as_current_span(f"{sc.SPAN_STEP} {step}") as s:
                s.set_attributes({**common, **budget(step), sc.GUARD_DECISION: "continue"})
                with tracer.start_as_current_span(f"{sc.SPAN_MODEL} m") as chat:
                    chat.set_attributes(
                        {**common, **budget(step), sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT}
                    )
                for call in range(1 if step < 3 else 2):
                    with tracer.start_as_current_span(f"{sc.SPAN_TOOL} search") as tool:
                        tool.set_attributes(
                            {
                                **common,
                                **budget(step),
                                sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                                sc.GEN_AI_TOOL_NAME: f"tool{call}",
                                sc.GEN_AI_TOOL_CALL_ID: f"c{step}{call}",
                                sc.TOOL_STATUS: "ok",
                                sc.TOOL_RETRIES: call,
                            }
                        )
        run.set_attributes(
            {
                **common,
                **budget(4),
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.STOP_REASON: "completed",
                sc.OUTCOME: "success",
            }
        )


SPANS_PER_RUN = 1 + 4 + 4 + 6


def best_of(repeats: int, arms: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Interleave the arms so machine noise hits them alike; keep each arm's best time."""
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(repeats):
        for name, arm in arms.items():
            times[name].append(arm())
    return {name: min(ts) for name, ts in times.items()}


def time_on_end(
    processor: SpanProcessor, spans: list[ReadableSpan], loops: int
) -> Callable[[], float]:
    def arm() -> float:
        on_end = processor.on_end
        t0 = time.perf_counter()
        for _ in range(loops):
            for span in spans:
                on_end(span)
        return (time.perf_counter() - t0) / (loops * len(spans))

    return arm


def time_full(processor: SpanProcessor, runs: int) -> Callable[[], float]:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")

    def arm() -> float:
        t0 = time.perf_counter()
        for n in range(runs):
            emit_run(tracer, n)
        return (time.perf_counter() - t0) / (runs * SPANS_PER_RUN)

    return arm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    repeats, loops, runs = (3, 200, 200) if args.quick else (7, 2000, 1000)

    collect = Collect()
    provider = TracerProvider()
    provider.add_span_processor(collect)
    emit_run(provider.get_tracer("bench"), 0)
    by_kind: dict[str, list[ReadableSpan]] = {"run": [], "tool": [], "chat": [], "other": []}
    for span in collect.spans:
        op = (span.attributes or {}).get(sc.GEN_AI_OPERATION_NAME)
        kinds = {sc.OP_INVOKE_AGENT: "run", sc.OP_EXECUTE_TOOL: "tool", sc.OP_CHAT: "chat"}
        kind = kinds.get(str(op), "other")
        by_kind[kind].append(span)

    print(f"bench_metrics ({'quick' if args.quick else 'full'}): best of {repeats}, µs per span")
    print(f"{'':28}{'bare':>10}{'metrics':>10}{'extra':>10}{'ratio':>8}")
    for kind, spans in by_kind.items():
        res = best_of(
            repeats,
            {
                "bare": time_on_end(BareProcessor(), spans, loops),
                "metrics": time_on_end(MetricsSpanProcessor(CollectorRegistry()), spans, loops),
            },
        )
        bare, ours = res["bare"] * 1e6, res["metrics"] * 1e6
        label = f"on_end, {kind} span"
        print(f"{label:28}{bare:>10.2f}{ours:>10.2f}{ours - bare:>10.2f}{ours / bare:>8.1f}")

    res = best_of(
        repeats,
        {
            "bare": time_full(BareProcessor(), runs),
            "metrics": time_full(MetricsSpanProcessor(CollectorRegistry()), runs),
        },
    )
    bare, ours = res["bare"] * 1e6, res["metrics"] * 1e6
    label = f"full span life ({SPANS_PER_RUN}/run)"
    print(f"{label:28}{bare:>10.2f}{ours:>10.2f}{ours - bare:>10.2f}{ours / bare:>8.2f}")
    kinds = ", ".join(f"{k}={len(v)}" for k, v in by_kind.items())
    print(f"(spans per run by kind: {kinds}; ratio = metrics / bare, side by side in this run)")


if __name__ == "__main__":
    main()
