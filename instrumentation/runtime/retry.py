"""What to do after a call fails: classify the error, back off and retry, or stop calling it.

The pieces, usable on their own; the tool registry and the model clients use them through
:class:`RetryState`:

- :func:`classify` answers "is this error transient?" from the error's meaning (HTTP status,
  timeout, connection failure), never by trying a few times to see.
- :class:`RetryPolicy` says how often and how long to wait: exponential backoff with full jitter,
  a cap on each wait, and ``Retry-After`` honoured up to its own cap.
- :class:`CircuitBreaker` fails fast on a tool whose calls keep failing, and lets one probe
  through after a cooldown.
- :class:`RetryState` is the one state machine of a logical call: before each attempt, after an
  error, after a value, it decides: attempt, sleep, give up, or refuse (the breaker). Two thin
  drivers, :func:`call_with_retries` and :func:`acall_with_retries`, only make the calls and
  the sleeps, so sync and async callers share every decision (tenacity's pattern; see
  docs/tools.md, *One state machine, two drivers*).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .backoff import RETRY_ENV, RetryPolicy
from .breaker import BREAKER_ENV, BreakerState, CircuitBreaker
from .classification import TRANSIENT_STATUSES, ErrorInfo, ToolError, classify, is_transient_status

__all__ = [
    "BREAKER_ENV",
    "RETRY_ENV",
    "TRANSIENT_STATUSES",
    "BreakerState",
    "BreakerUse",
    "CircuitBreaker",
    "Done",
    "ErrorInfo",
    "RetryHooks",
    "RetryPolicy",
    "RetryState",
    "Sleep",
    "ToolError",
    "acall_with_retries",
    "call_with_retries",
    "classify",
    "is_transient_status",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Sleep:
    """The machine's answer after a failed attempt: wait this long, then attempt again."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Done(Generic[R]):
    """The machine's answer when the call is over: its result (an outcome, or a value)."""

    result: R


@dataclass(frozen=True, slots=True)
class BreakerUse:
    """How a logical call uses a circuit breaker.

    ``per_attempt=False`` (tools): the breaker is asked once, before the first attempt; a probe
    through a half-open circuit is never retried; the call's final outcome is recorded once
    (a permanent error counts as a failure only with ``trip_on_permanent``).
    ``per_attempt=True`` (model clients): the breaker is asked before every attempt and every
    transient failure is recorded at once, so retries stop as soon as the circuit opens.
    """

    breaker: CircuitBreaker
    name: str
    """The circuit's key: the tool's name, or the model's."""
    per_attempt: bool = False
    trip_on_permanent: bool = False


class RetryHooks(Protocol[R]):
    """What one kind of call makes of the machine's decisions (its outcome type is ``R``).

    A hook may raise to end the call with an exception (a model call that failed for good).
    """

    def classify(self, exc: Exception) -> ErrorInfo:
        """What the error means (raise to end the call with it at once)."""
        ...

    def refused(self, state: RetryState[R]) -> R:
        """The outcome of an attempt the breaker did not let through."""
        ...

    def retrying(self, state: RetryState[R], info: ErrorInfo, delay: float) -> None:
        """Report a retry before its sleep (events, callbacks)."""
        ...

    def gave_up(self, state: RetryState[R], info: ErrorInfo, exc: Exception) -> R:
        """The outcome of a call that failed for good."""
        ...

    def succeeded(self, state: RetryState[R], value: Any) -> R:
        """The outcome of a call whose last attempt returned ``value``."""
        ...


class RetryState(Generic[R]):
    """One logical call's retry decisions; the drivers perform the calls and the sleeps.

    ``retryable=False`` never retries (a tool with side effects and no idempotency key). ``rng``
    draws the jitter (injectable for tests).
    """

    __slots__ = ("_rng", "attempt", "breaker", "hooks", "policy", "retryable")

    def __init__(
        self,
        hooks: RetryHooks[R],
        policy: RetryPolicy,
        *,
        breaker: BreakerUse | None = None,
        retryable: bool = True,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.hooks = hooks
        self.policy = policy
        self.breaker = breaker
        self.retryable = retryable
        self.attempt = 0
        """Attempts made so far (the function was called this many times)."""
        self._rng = rng

    def before_attempt(self) -> Done[R] | None:
        """``None`` to make the next attempt; ``Done`` when the breaker refuses it."""
        use = self.breaker
        if use is not None and (use.per_attempt or self.attempt == 0):
            # Read before allow(): allow() turns an open circuit past its cooldown half-open.
            probing = use.breaker.state(use.name) is not BreakerState.CLOSED
            if not use.breaker.allow(use.name):
                return Done(self.hooks.refused(self))
            if probing and not use.per_attempt:
                self.retryable = False  # a probe tests the tool once: no hammering it
        self.attempt += 1
        return None

    def after_error(self, exc: Exception) -> Sleep | Done[R]:
        """After an attempt raised: sleep and retry, or the call's outcome."""
        info = self.hooks.classify(exc)
        retry = info.transient and self.retryable and self.attempt < self.policy.max_attempts
        use = self.breaker
        if use is not None and use.per_attempt:
            if info.transient:
                use.breaker.record_failure(use.name)
            if retry and not use.breaker.allow(use.name):
                return Done(self.hooks.refused(self))
        if not retry:
            if use is not None and not use.per_attempt:
                if info.transient or use.trip_on_permanent:
                    use.breaker.record_failure(use.name)
                else:
                    use.breaker.record_success(use.name)  # a 404 shows the service is up
            return Done(self.hooks.gave_up(self, info, exc))
        delay = self.policy.delay(self.attempt, info.retry_after, self._rng)
        self.hooks.retrying(self, info, delay)
        return Sleep(delay)

    def after_value(self, value: Any) -> R:
        """After an attempt returned: the call's outcome (its service answered, so it is up)."""
        if self.breaker is not None:
            self.breaker.breaker.record_success(self.breaker.name)
        return self.hooks.succeeded(self, value)


def call_with_retries(
    state: RetryState[R], fn: Callable[[], Any], sleep: Callable[[float], object]
) -> R:
    """Drive ``state`` with blocking calls of ``fn`` and ``sleep``."""
    while True:
        refused = state.before_attempt()
        if refused is not None:
            return refused.result
        try:
            value = fn()
        except Exception as exc:
            step = state.after_error(exc)
            if isinstance(step, Done):
                return step.result
            sleep(step.seconds)
            continue
        return state.after_value(value)


async def acall_with_retries(
    state: RetryState[R],
    fn: Callable[[], Awaitable[Any]],
    sleep: Callable[[float], Awaitable[object]],
) -> R:
    """Drive ``state`` with awaited calls of ``fn`` and ``sleep``; cancellation propagates."""
    while True:
        refused = state.before_attempt()
        if refused is not None:
            return refused.result
        try:
            value = await fn()
        except Exception as exc:
            step = state.after_error(exc)
            if isinstance(step, Done):
                return step.result
            await sleep(step.seconds)
            continue
        return state.after_value(value)
