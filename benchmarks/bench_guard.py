"""What the LoopGuard's decisions cost per step, against the same loop without a guard.

Both loops run the same scripted model (a new tool call every step, so only max_steps stops it)
and the same trivial tool, side by side in one process, interleaved, best of several repeats.
Target: the guard adds at most 5 µs per step at 50 steps (no-op observer).

    python benchmarks/bench_guard.py [--quick] [--steps 50]

Counted in machine instructions (load-independent; docs/runtime.md, "Counted, not timed"):
run one loop alone under callgrind, with the guard and without, and divide the difference by
the steps (60 runs x 50 steps = 3,000)::

    valgrind --tool=callgrind python benchmarks/bench_guard.py --only guarded --runs 60
    valgrind --tool=callgrind python benchmarks/bench_guard.py --only bare --runs 60
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from loopwatch.instrumentation.runtime.guard import Action, LoopGuard
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.tools import ToolOutcome
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, ToolCall, Usage

TARGET_US = 5.0


class ScriptModel:
    """Returns pre-built responses: the model costs nothing measurable on either side."""

    def __init__(self, responses: Sequence[ModelResponse]) -> None:
        self.responses = responses
        self.i = 0

    def complete(self, messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        r = self.responses[self.i]
        self.i += 1
        return r


class EchoTools:
    """A registry stand-in whose execute is a dict lookup (the same on both sides)."""

    def __init__(self, outcomes: dict[str, ToolOutcome]) -> None:
        self.outcomes = outcomes

    def get(self, name: str) -> None:
        return None

    def specs(self) -> list[dict[str, Any]]:
        return []

    def execute(
        self, call: ToolCall, *, on_retry: Callable[[Any], None] | None = None
    ) -> ToolOutcome:
        return self.outcomes[call.id]


def _script(steps: int) -> tuple[list[ModelResponse], dict[str, ToolOutcome]]:
    responses, outcomes = [], {}
    for n in range(1, steps + 1):
        call = ToolCall(f"c{n}", "read_file", {"path": f"src/file_{n}.py", "lines": [1, 40]})
        responses.append(
            ModelResponse(Message("assistant", None, (call,)), "tool_use", Usage(120, 30, 0.0004))
        )
        outcomes[call.id] = ToolOutcome(call, True, f"contents of file {n}", attempts=1)
    return responses, outcomes


def bare_loop(
    model: ScriptModel, tools: EchoTools, steps: int, limits: LoopLimits
) -> list[Message]:
    messages: list[Message] = [Message("user", "go")]
    specs = tools.specs()
    for _ in range(steps):
        response = model.complete(messages, specs)
        messages.append(response.message)
        for call in response.message.tool_calls:
            outcome = tools.execute(call)
            messages.append(Message("tool", outcome.content, tool_call_id=call.id))
    return messages


class CountingObserver:
    """The cheapest real observer: it hears every call (so the guard builds snapshots)."""

    def __init__(self) -> None:
        self.n = 0

    def hear(self, *args: Any) -> None:
        self.n += 1

    run_started = step_started = model_call_started = model_call_ended = hear
    tool_call_started = tool_call_ended = event = step_ended = run_ended = hear


def guarded_loop(
    model: ScriptModel,
    tools: EchoTools,
    steps: int,
    limits: LoopLimits,
    observer: Any = None,
) -> list[Message]:
    messages: list[Message] = [Message("user", "go")]
    specs = tools.specs()
    guard = LoopGuard(limits, registry=tools, observer=observer)
    guard.start(messages)
    while True:
        d = guard.before_step()
        if d.done:
            break
        response = model.complete(messages, specs)
        messages.append(response.message)
        d = guard.after_model(response)
        if d.action is Action.RUN_TOOLS:
            for call in response.message.tool_calls:
                if guard.before_tool(call).done:
                    break
                outcome = tools.execute(call, on_retry=guard.record_retry)
                messages.append(Message("tool", outcome.content, tool_call_id=call.id))
                if guard.after_tool(call, outcome).done:
                    break
        if guard.end_step().done:
            break
    result = guard.finish()
    assert result.stop_reason == "max_steps" and result.counters["steps"] == steps, result
    return messages


def measure(steps: int, runs: int, repeats: int) -> tuple[float, float, float]:
    responses, outcomes = _script(steps)
    tools = EchoTools(outcomes)
    # One LoopLimits for all runs, as a service holds its limits (or a LimitPolicy's) in memory.
    limits = LoopLimits(max_steps=steps)
    bare: list[float] = []
    guarded: list[float] = []
    observed: list[float] = []

    def observed_loop(m: ScriptModel, t: EchoTools, n: int, lim: LoopLimits) -> list[Message]:
        return guarded_loop(m, t, n, lim, CountingObserver())

    for _ in range(repeats):
        for loop, sink in ((bare_loop, bare), (guarded_loop, guarded), (observed_loop, observed)):
            t0 = time.perf_counter()
            for _ in range(runs):
                loop(ScriptModel(responses), tools, steps, limits)
            sink.append((time.perf_counter() - t0) / (runs * steps) * 1e6)
    return min(bare), min(guarded), min(observed)


def run_only(loop_name: str, steps: int, runs: int) -> None:
    """Both loops three times (warm-up, the same on both sides), then ``runs`` of one loop:
    what a callgrind count of one side runs."""
    responses, outcomes = _script(steps)
    tools = EchoTools(outcomes)
    limits = LoopLimits(max_steps=steps)
    for _ in range(3):
        bare_loop(ScriptModel(responses), tools, steps, limits)
        guarded_loop(ScriptModel(responses), tools, steps, limits)
    loop = guarded_loop if loop_name == "guarded" else bare_loop
    for _ in range(runs):
        loop(ScriptModel(responses), tools, steps, limits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (noisier)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument(
        "--only", choices=("guarded", "bare"), help="run one loop alone, print nothing"
    )
    parser.add_argument("--runs", type=int, default=60, help="runs of --only's loop")
    args = parser.parse_args()
    if args.only:
        run_only(args.only, args.steps, args.runs)
        return
    runs, repeats = (20, 5) if args.quick else (200, 9)
    bare, guarded, observed = measure(args.steps, runs, repeats)
    added = guarded - bare
    print(f"steps per run            {args.steps}")
    print(f"loop without guard       {bare:8.2f} µs/step")
    print(f"loop with LoopGuard      {guarded:8.2f} µs/step")
    print(f"guard cost               {added:8.2f} µs/step  (target ≤ {TARGET_US:.1f})")
    print(f"ratio guarded / bare     {guarded / bare:8.2f}x")
    print("verdict                  " + ("OK" if added <= TARGET_US else "OVER TARGET"))
    print(
        f"with a counting observer  {observed:8.2f} µs/step  (notified of every call, reads no "
        f"snapshot; "
        f"+{observed - guarded:.2f} µs over no observer)"
    )


if __name__ == "__main__":
    main()
