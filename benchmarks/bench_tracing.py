"""Per-step cost of loopwatch's tracing against bare OpenTelemetry SDK calls, side by side.

Three variants of the same reference loop (``run``), the same scripted model and the same tool:

- ``plain``: no observer (what the guard costs alone, for context);
- ``bare``: an observer written with bare SDK calls that emits the same spans with the same
  attributes (start_span, set_attributes, attach/detach, end) and nothing else;
- ``loopwatch``: the observer ``instrument()`` installs (``OTelObserverFactory``).

Both span-emitting variants use the same ``TracerProvider`` with an exporter that does nothing, so
the numbers are span creation, not export. Variants are interleaved round by round and the median
round is reported. Target: ``loopwatch / bare`` <= 1.3 per step.

    python benchmarks/bench_tracing.py [--quick] [--steps N] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.observer import (
    BudgetSnapshot,
    RunInfo,
    RunObserver,
    ToolRecord,
)
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import (
    Message,
    ModelResponse,
    RunResult,
    ToolCall,
    Usage,
)
from loopwatch.instrumentation.telemetry.tracing import OTelObserverFactory
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

TARGET = 1.3


class NullExporter(SpanExporter):
    """Accepts every span and does nothing with it."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class StepModel:
    """Asks for one new tool call per step, then answers at ``steps``."""

    model = "bench-model"

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.n = 0

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        self.n += 1
        usage = Usage(50, 10, 0.0001)
        if self.n >= self.steps:
            return ModelResponse(Message("assistant", "done"), "end_turn", usage, self.model)
        call = ToolCall(f"call-{self.n}", "lookup", {"page": self.n})
        return ModelResponse(Message("assistant", None, (call,)), "tool_calls", usage, self.model)


def lookup(page: int) -> dict[str, int]:
    """Look a page up."""
    return {"page": page, "rows": page * 7}


# --- the same spans with bare SDK calls --------------------------------------------------------

_KEYS = [(b, sc.budget_used(b), sc.budget_limit(b)) for b in sc.BUDGETS]


def _budget(b: BudgetSnapshot) -> dict[str, Any]:
    a: dict[str, Any] = {}
    for name, uk, lk in _KEYS:
        a[uk] = b.used[name]
        if b.limits.get(name) is not None:
            a[lk] = b.limits[name]
    a[sc.BUDGET_MAX_UTILIZATION] = b.max_utilization
    return a


class BareObserver:
    """The spans of docs/telemetry.md, written the way a user would with the SDK alone."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.t = tracer
        self.common: dict[str, Any] = {}
        self.tokens: list[Any] = []
        self.run: Any = None
        self.step: Any = None
        self.model: Any = None
        self.tool: Any = None
        self.step_n = 0

    def _enter(self, span: Any) -> None:
        self.tokens.append(context_api.attach(trace.set_span_in_context(span)))

    def _exit(self) -> None:
        context_api.detach(self.tokens.pop())

    def run_started(self, info: RunInfo, budget: BudgetSnapshot) -> None:
        self.common = {sc.RUN_ID: info.run_id, sc.TASK_TYPE: info.task_type}
        self.run = self.t.start_span(
            f"invoke_agent {info.agent_name}",
            kind=SpanKind.INTERNAL,
            attributes={
                sc.GEN_AI_OPERATION_NAME: "invoke_agent",
                sc.GEN_AI_PROVIDER_NAME: "unknown",
                sc.GEN_AI_AGENT_NAME: info.agent_name,
                sc.OI_SPAN_KIND: sc.OI_AGENT,
                sc.LIMITS_VERSION: info.limits_version,
                **self.common,
            },
        )
        self._enter(self.run)

    def step_started(self, step: int, budget: BudgetSnapshot) -> None:
        self.step_n = step
        self.step = self.t.start_span(
            f"step {step}",
            attributes={sc.STEP_INDEX: step, sc.OI_SPAN_KIND: sc.OI_CHAIN, **self.common},
        )
        self._enter(self.step)

    def model_call_started(self, step: int, model: str | None, budget: BudgetSnapshot) -> None:
        self.model = self.t.start_span(
            f"chat {model}",
            kind=SpanKind.CLIENT,
            attributes={
                sc.GEN_AI_OPERATION_NAME: "chat",
                sc.GEN_AI_PROVIDER_NAME: "unknown",
                sc.OI_SPAN_KIND: sc.OI_LLM,
                sc.GEN_AI_REQUEST_MODEL: model or "",
                sc.STEP_INDEX: step,
                **self.common,
            },
        )
        self._enter(self.model)

    def model_call_ended(
        self, response: ModelResponse | None, error: BaseException | None, budget: BudgetSnapshot
    ) -> None:
        a = _budget(budget)
        if response is not None:
            a[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [response.stop_reason or ""]
            a[sc.GEN_AI_USAGE_INPUT_TOKENS] = response.usage.input_tokens
            a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = response.usage.output_tokens
            a[sc.COST_USD] = response.usage.cost_usd
            a[sc.GEN_AI_USAGE_COST] = response.usage.cost_usd
            a[sc.OI_COST_TOTAL] = response.usage.cost_usd
            a[sc.OI_TOKEN_COUNT_PROMPT] = response.usage.input_tokens
            a[sc.OI_TOKEN_COUNT_COMPLETION] = response.usage.output_tokens
            a[sc.OI_LLM_PROVIDER] = "unknown"
            if response.model:
                a[sc.GEN_AI_RESPONSE_MODEL] = response.model
                a[sc.OI_LLM_MODEL_NAME] = response.model
        self.model.set_attributes(a)
        self.model.end()
        self._exit()

    def tool_call_started(self, call: ToolCall, fingerprint: str, budget: BudgetSnapshot) -> None:
        self.tool = self.t.start_span(
            f"execute_tool {call.name}",
            attributes={
                sc.GEN_AI_OPERATION_NAME: "execute_tool",
                sc.GEN_AI_TOOL_NAME: call.name,
                sc.GEN_AI_TOOL_CALL_ID: call.id,
                sc.GEN_AI_TOOL_TYPE: "function",
                sc.GEN_AI_TOOL_DESCRIPTION: "Look a page up.",
                sc.OI_SPAN_KIND: sc.OI_TOOL,
                sc.TOOL_FINGERPRINT: fingerprint,
                sc.STEP_INDEX: self.step_n,
                **self.common,
            },
        )
        self._enter(self.tool)

    def tool_call_ended(self, record: ToolRecord, budget: BudgetSnapshot) -> None:
        a = _budget(budget)
        a[sc.TOOL_STATUS] = record.status
        a[sc.TOOL_RETRIES] = record.retries
        a[sc.RESULT_FINGERPRINT] = record.result_fingerprint
        if record.status != "ok":
            a[sc.ERROR_CODE] = record.error_code or "error"
            self.tool.set_status(Status(StatusCode.ERROR))
        self.tool.set_attributes(a)
        self.tool.end()
        self._exit()

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        trace.get_current_span().add_event(name, dict(attributes))

    def step_ended(self, step: int, decision: str, budget: BudgetSnapshot) -> None:
        a = _budget(budget)
        a[sc.GUARD_DECISION] = decision
        self.step.set_attributes(a)
        self.step.end()
        self._exit()

    def run_ended(self, result: RunResult, budget: BudgetSnapshot) -> None:
        a = _budget(budget)
        a[sc.GEN_AI_USAGE_INPUT_TOKENS] = result.usage.input_tokens
        a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = result.usage.output_tokens
        a[sc.COST_USD] = result.usage.cost_usd
        a[sc.STOP_REASON] = str(result.stop_reason)
        a[sc.OUTCOME] = str(result.outcome)
        a[sc.STOP_EXPLANATION] = result.explanation
        a[sc.GEN_AI_PROVIDER_NAME] = "unknown"
        a[sc.GEN_AI_RESPONSE_FINISH_REASONS] = ["end_turn"]
        for k, v in result.progress.items():
            a[f"loopwatch.progress.{k}"] = v
        self.run.set_attributes(a)
        self.run.end()
        self._exit()


# --- measurement -------------------------------------------------------------------------------


def _one(
    steps: int, registry: ToolRegistry, factory: Callable[[RunInfo], RunObserver] | None
) -> float:
    model = StepModel(steps)
    limits = LoopLimits(max_steps=steps + 1, soft_threshold=None)
    t0 = time.perf_counter()
    result = run(model, registry, "go", limits=limits, observer_factory=factory, task_type="bench")
    elapsed = time.perf_counter() - t0
    if not result.ok or len(result.steps) == 0:
        raise SystemExit(
            f"benchmark run did not complete: {result.stop_reason} {result.explanation}"
        )
    return elapsed / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (fewer rounds)")
    parser.add_argument("--steps", type=int, default=50, help="steps per run (default 50)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per variant")
    args = parser.parse_args(argv)
    rounds = args.rounds or (15 if args.quick else 101)
    runs_per_round = 3 if args.quick else 10

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(NullExporter()))
    tracer = provider.get_tracer("bench")
    ours = OTelObserverFactory(provider, capture_content=False)

    def bare(info: RunInfo) -> RunObserver:
        return BareObserver(tracer)  # type: ignore[return-value]

    registry = ToolRegistry()
    registry.register(lookup)
    variants: dict[str, Callable[[RunInfo], RunObserver] | None] = {
        "plain": None,
        "bare": bare,
        "loopwatch": ours,
    }
    for factory in variants.values():  # warm up
        for _ in range(3):
            _one(args.steps, registry, factory)
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, factory in variants.items():
            per_step = min(_one(args.steps, registry, factory) for _ in range(runs_per_round))
            samples[name].append(per_step)

    med = {k: statistics.median(v) for k, v in samples.items()}
    print(
        f"steps per run: {args.steps}, rounds: {rounds} x {runs_per_round} runs, median of rounds"
    )
    print(f"{'variant':<12}{'us/step':>10}")
    for name in variants:
        print(f"{name:<12}{med[name] * 1e6:>10.1f}")
    ratio = med["loopwatch"] / med["bare"]
    span_ours = med["loopwatch"] - med["plain"]
    span_bare = med["bare"] - med["plain"]
    print(f"loopwatch / bare per step:           {ratio:.3f}  (target <= {TARGET})")
    print(
        f"span cost only, loopwatch / bare:    {span_ours / span_bare:.3f}"
        f"  ({span_ours * 1e6:.1f} vs {span_bare * 1e6:.1f} us/step over the plain loop)"
    )
    print("PASS" if ratio <= TARGET else "FAIL")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
