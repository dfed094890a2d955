"""One retry state machine, two thin drivers: sync and async make the same decisions.

The machine decides (attempt, sleep, give up, refuse); the drivers only call and sleep. Every
script of failures below runs through both drivers, with both ways of using the breaker, and
the outcomes, sleeps, attempts and breaker states must be identical.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from loopwatch.instrumentation.runtime.retry import (
    BreakerState,
    BreakerUse,
    CircuitBreaker,
    ErrorInfo,
    RetryPolicy,
    RetryState,
    ToolError,
    acall_with_retries,
    call_with_retries,
    classify,
)


class Recorder:
    """Hooks that write down every decision they are told about."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []

    def classify(self, exc: Exception) -> ErrorInfo:
        return classify(exc)

    def refused(self, state: RetryState[Any]) -> Any:
        self.log.append(("refused", state.attempt))
        return "refused"

    def retrying(self, state: RetryState[Any], info: ErrorInfo, delay: float) -> None:
        self.log.append(("retry", state.attempt, info.code, delay))

    def gave_up(self, state: RetryState[Any], info: ErrorInfo, exc: Exception) -> Any:
        self.log.append(("gave_up", state.attempt, info.code))
        return f"failed:{info.code}"

    def succeeded(self, state: RetryState[Any], value: Any) -> Any:
        self.log.append(("ok", state.attempt))
        return value


STEPS = {
    "503": ToolError("HTTP_503", status=503),
    "429": ToolError("HTTP_429", status=429, retry_after=7.0),
    "404": ToolError("NOT_FOUND", status=404),
    "ok": "value",
}


def _run(script: list[str], *, per_attempt: bool, use_async: bool) -> tuple[Any, ...]:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=2, cooldown_s=10.0, clock=lambda: now[0])
    results, sleeps = [], []
    steps = iter(script * 3)
    policy = RetryPolicy(max_attempts=3, base_delay_s=1.0)
    for _ in range(4):  # four logical calls share the breaker
        hooks = Recorder()
        use = BreakerUse(breaker, "t", per_attempt=per_attempt)
        state: RetryState[Any] = RetryState(hooks, policy, breaker=use, rng=lambda: 0.5)

        def attempt() -> Any:
            step = STEPS[next(steps, "ok")]
            if isinstance(step, Exception):
                raise step
            return step

        async def aattempt() -> Any:
            return attempt()

        async def asleep(seconds: float) -> None:
            sleeps.append(seconds)

        if use_async:
            result = asyncio.run(acall_with_retries(state, aattempt, asleep))
        else:
            result = call_with_retries(state, attempt, sleeps.append)
        results.append((result, tuple(hooks.log), breaker.state("t")))
        now[0] += 4.0
    return tuple(results), tuple(sleeps)


SCRIPTS = [list(s) for s in itertools.product(["503", "429", "404", "ok"], repeat=3)]


@pytest.mark.parametrize("per_attempt", [False, True])
def test_sync_and_async_drivers_decide_alike(per_attempt: bool) -> None:
    for script in SCRIPTS:
        sync = _run(script, per_attempt=per_attempt, use_async=False)
        asynchronous = _run(script, per_attempt=per_attempt, use_async=True)
        assert sync == asynchronous, script


def test_the_machine_backs_off_honours_retry_after_and_gives_up() -> None:
    (first, *_), sleeps = _run(["503", "429", "503"], per_attempt=False, use_async=False)
    result, log, state = first
    assert result == "failed:HTTP_503"
    assert log == (
        ("retry", 1, "HTTP_503", 0.5),  # full jitter: 0.5 of the 1 s backoff
        ("retry", 2, "HTTP_429", 7.0),  # the server's Retry-After
        ("gave_up", 3, "HTTP_503"),
    )
    assert sleeps[:2] == (0.5, 7.0)
    assert state is BreakerState.CLOSED  # one failed logical call, threshold 2


def test_per_attempt_breaker_stops_retrying_once_it_opens() -> None:
    (first, *_), _ = _run(["503", "503", "503"], per_attempt=True, use_async=False)
    result, log, state = first
    # Threshold 2: the second failed attempt opens the circuit, so no third attempt is made.
    assert result == "refused" and log == (("retry", 1, "HTTP_503", 0.5), ("refused", 2))
    assert state is BreakerState.OPEN


def test_a_probe_through_a_half_open_circuit_is_not_retried() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5.0, clock=lambda: now[0])
    breaker.record_failure("t")
    now[0] = 5.0
    hooks = Recorder()
    state: RetryState[Any] = RetryState(hooks, RetryPolicy(), breaker=BreakerUse(breaker, "t"))

    def fail() -> Any:
        raise TimeoutError

    assert call_with_retries(state, fail, lambda s: None) == "failed:TIMEOUT"
    assert hooks.log == [("gave_up", 1, "TIMEOUT")] and breaker.state("t") is BreakerState.OPEN


def test_the_registry_and_the_model_caller_use_the_machine() -> None:
    """The duplicated loops are gone: both drive RetryState."""
    import inspect

    from loopwatch.instrumentation.clients.base import ModelCaller
    from loopwatch.instrumentation.runtime.tools import ToolRegistry

    for method in (
        ToolRegistry.execute,
        ToolRegistry.aexecute,
        ModelCaller.call,
        ModelCaller.acall,
    ):
        source = inspect.getsource(method)
        assert "call_with_retries" in source and "while True" not in source, method
