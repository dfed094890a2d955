"""`with guard:` ends a hand-written loop's run when the loop's own code raises (real OTel SDK).

Without it the run span the observer made current would stay current in the thread, and every
later span there (the next run's included) would be parented to a run that never ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from loopwatch.instrumentation import LoopGuard, LoopLimits, OTelObserverFactory
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.types import Message
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    token = context_api.attach(Context())
    try:
        yield tp, exporter
    finally:
        context_api.detach(token)
        tp.shutdown()


def _guard(tp: TracerProvider) -> LoopGuard:
    return LoopGuard(LoopLimits(max_steps=5), observer_factory=OTelObserverFactory(tp))


class ClientDown(RuntimeError):
    pass


def _loop_that_raises(guard: LoopGuard, error: BaseException) -> None:
    guard.start([Message("user", "hi")])
    guard.before_step()
    assert trace.get_current_span() is not trace.INVALID_SPAN  # the step span is current
    raise error


def test_an_exception_in_the_loop_ends_the_run_with_error_and_leaves_nothing_current(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, exporter = spans
    with pytest.raises(ClientDown), _guard(tp) as guard:
        _loop_that_raises(guard, ClientDown("connection reset"))
    assert trace.get_current_span() is trace.INVALID_SPAN
    result = guard.finish()
    assert result.stop_reason is StopReason.ERROR
    assert "ClientDown" in result.explanation and "connection reset" in result.explanation
    run_span = next(s for s in exporter.get_finished_spans() if s.parent is None)
    assert run_span.status.status_code is StatusCode.ERROR
    assert all(s.end_time is not None for s in exporter.get_finished_spans())


def test_the_next_run_in_the_thread_is_a_root_not_a_child_of_the_failed_one(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, exporter = spans
    with pytest.raises(ClientDown), _guard(tp) as first:
        _loop_that_raises(first, ClientDown("boom"))
    with _guard(tp) as second:
        second.start([Message("user", "again")])
        second.before_step()
        second.stop(StopReason.CANCELLED, "enough")
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 2
    assert roots[0].context.trace_id != roots[1].context.trace_id
    assert second.finish().stop_reason is StopReason.CANCELLED


def test_keyboard_interrupt_ends_the_run_cancelled_and_propagates(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, _ = spans
    with pytest.raises(KeyboardInterrupt), _guard(tp) as guard:
        _loop_that_raises(guard, KeyboardInterrupt())
    result = guard.finish()
    assert result.stop_reason is StopReason.CANCELLED
    assert result.explanation == "Stopped at step 1: the run was interrupted."
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_a_finished_run_is_left_as_it_was(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, exporter = spans
    with pytest.raises(ClientDown), _guard(tp) as guard:
        guard.start([Message("user", "hi")])
        guard.before_step()
        guard.complete("done")
        finished = guard.finish()
        raise ClientDown("after the result")
    assert guard.finish() is finished
    assert finished.stop_reason is StopReason.COMPLETED
    assert len([s for s in exporter.get_finished_spans() if s.parent is None]) == 1


def test_async_with_ends_a_cancelled_task_as_cancelled(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, _ = spans
    seen: list[LoopGuard] = []

    async def loop() -> None:
        async with _guard(tp) as guard:
            seen.append(guard)
            guard.start([Message("user", "hi")])
            guard.before_step()
            await asyncio.sleep(30)

    async def main() -> None:
        task = asyncio.create_task(loop())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen[0].finish().stop_reason is StopReason.CANCELLED
    assert trace.get_current_span() is trace.INVALID_SPAN
