"""arun: the same decisions as run, plus interrupting hung model and tool calls at the deadline.

Real time is used only for the short deadlines (≤ 0.05 s) that must cut off a call in flight;
nothing asserts on elapsed wall time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from loopwatch.instrumentation.runtime.errors import LimitReached, RunFailed
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import arun
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.retry import ToolError
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, RunResult
from loopwatch.instrumentation.testing import (
    CounterModel,
    FakeClock,
    FakeModel,
    HangingModel,
    flaky_tool,
    tool_call,
    tool_response,
)


class Recorder:
    """Writes down every observer call (any RunObserver method)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.calls if n == name]

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.calls.append((name, args))

        return record


def echo(text: str) -> str:
    """Repeat the text."""
    return text


def registry() -> ToolRegistry:
    reg = ToolRegistry(breaker=None)
    reg.register(echo)
    return reg


def test_max_steps_async() -> None:
    with pytest.raises(LimitReached) as info:
        asyncio.run(arun(CounterModel(), registry(), "go", limits=LoopLimits(max_steps=3)))
    assert info.value.result.counters["steps"] == 3


def test_done_tool_and_verify_async() -> None:
    reg = registry()
    reg.register_done()
    model = FakeModel([tool_call("done", answer="x"), tool_call("done", answer="x, cited")])

    def verify(result: RunResult) -> list[str]:
        return [] if "cited" in (result.final or "") else ["cite it"]

    result = asyncio.run(arun(model, reg, "go", verify=verify))
    assert result.ok and result.final == "x, cited" and result.counters["steps"] == 2
    # The rejected done call was answered with the unmet criteria.
    rejected = [m for m in model.calls[1] if m.role == "tool"]
    assert len(rejected) == 1 and "cite it" in (rejected[0].content or "")


def test_hung_model_is_interrupted_at_the_deadline() -> None:
    model = HangingModel()
    rec = Recorder()
    result = asyncio.run(
        arun(
            model,
            registry(),
            "go",
            limits=LoopLimits(max_wall_s=0.05),
            observer=rec,
            raise_on_stop=False,
        )
    )
    assert result.stop_reason is StopReason.TIMEOUT and result.limit == "wall_s"
    assert model.started == 1 and model.cancelled == 1
    assert result.counters["steps"] == 1 and result.counters["model_calls"] == 1
    assert result.explanation.startswith(
        "Stopped at step 1: the model call was interrupted at the deadline (max_wall_s=0.05)."
    )
    ((response, error, _),) = rec.of("model_call_ended")
    assert response is None and isinstance(error, TimeoutError)


def test_hung_async_tool_is_interrupted_at_the_deadline() -> None:
    reg = registry()
    started = []

    async def wait_forever(job: str) -> str:
        """Wait for a job that never ends."""
        started.append(job)
        await asyncio.Event().wait()
        return "unreachable"

    reg.register(wait_forever)
    rec = Recorder()
    model = FakeModel([tool_call("wait_forever", job="j1")])
    result = asyncio.run(
        arun(
            model, reg, "go", limits=LoopLimits(max_wall_s=0.05), observer=rec, raise_on_stop=False
        )
    )
    assert result.stop_reason is StopReason.TIMEOUT
    assert started == ["j1"]
    assert "wait_forever(job='j1') was interrupted at the deadline" in result.explanation
    tool_steps = [s.detail for s in result.steps if s.kind == "tool"]
    assert tool_steps[0]["error_code"] == "TIMEOUT"
    ((record, _),) = rec.of("tool_call_ended")
    assert record.status == "error" and record.error_code == "TIMEOUT"


def test_hung_sync_model_runs_in_a_thread_and_is_cut_off() -> None:
    release = threading.Event()

    class SlowSync:
        def complete(
            self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
        ) -> ModelResponse:
            release.wait(0.2)
            return tool_response(tool_call("echo", text="late"))

    try:
        result = asyncio.run(
            arun(
                SlowSync(),
                registry(),
                "go",
                limits=LoopLimits(max_wall_s=0.05),
                raise_on_stop=False,
            )
        )
    finally:
        release.set()
    assert result.stop_reason is StopReason.TIMEOUT
    assert [m.role for m in result.messages] == ["user"]


def test_a_timeout_raised_by_the_model_itself_is_an_error() -> None:
    class Raises:
        async def acomplete(self, messages: Any, tools: Any) -> ModelResponse:
            raise TimeoutError("provider read timeout")

    with pytest.raises(RunFailed) as info:
        asyncio.run(arun(Raises(), registry(), "go", limits=LoopLimits(max_wall_s=60)))
    assert info.value.reason is StopReason.ERROR
    assert isinstance(info.value.__cause__, TimeoutError)
    assert "TimeoutError: provider read timeout" in info.value.result.explanation


def test_cancelling_the_task_records_cancelled_and_reraises() -> None:
    rec = Recorder()

    async def main() -> None:
        task = asyncio.create_task(arun(HangingModel(), registry(), "go", observer=rec))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    ((result, _),) = rec.of("run_ended")
    assert result.stop_reason is StopReason.CANCELLED


def test_asyncio_event_cancels_before_the_next_tool() -> None:
    async def main() -> RunResult:
        cancel = asyncio.Event()
        reg = registry()

        async def stop_now(text: str) -> str:
            """Ask the run to stop."""
            cancel.set()
            return "stopping"

        reg.register(stop_now)
        model = FakeModel(
            [tool_response(tool_call("stop_now", text="x"), tool_call("echo", text="y"))]
        )
        return await arun(model, reg, "go", cancel=cancel, raise_on_stop=False)

    result = asyncio.run(main())
    assert result.stop_reason is StopReason.CANCELLED
    assert [s.detail["tool"] for s in result.steps if s.kind == "tool"] == ["stop_now"]


def test_async_retry_uses_the_injected_sleep() -> None:
    clock = FakeClock()
    reg = ToolRegistry(breaker=None, asleep=clock.asleep, rng=lambda: 1.0)
    fetch = flaky_tool(1, ToolError("HTTP_429", "slow down", status=429), "data", params=("url",))
    reg.register(fetch, name="fetch")
    model = FakeModel([tool_call("fetch", url="u"), "got it"])
    result = asyncio.run(arun(model, reg, "go", clock=clock))
    assert result.ok and len(fetch.calls) == 2
    assert clock.sleeps == [0.1]
