"""Retry policy, error classification and the circuit breaker, with a fake clock and rng."""

from __future__ import annotations

import errno
import math
import socket
import urllib.error
from email.message import Message as EmailMessage
from email.utils import formatdate
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopwatch.instrumentation.runtime.retry import (
    BREAKER_ENV,
    RETRY_ENV,
    BreakerState,
    CircuitBreaker,
    ErrorInfo,
    RetryPolicy,
    ToolError,
    classify,
    is_transient_status,
)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- RetryPolicy -------------------------------------------------------------------------------


def test_defaults_follow_the_seed() -> None:
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.base_delay_s, policy.max_delay_s) == (3, 0.1, 3.0)
    assert policy.max_retry_after_s == 30.0
    assert policy.jitter == "full"


def test_full_jitter_scales_the_doubling_backoff_by_rng() -> None:
    policy = RetryPolicy()
    half = lambda: 0.5  # noqa: E731
    assert [policy.delay(a, rng=half) for a in (1, 2, 3, 4, 5, 6, 7)] == [
        0.05,
        0.1,
        0.2,
        0.4,
        0.8,
        1.5,  # capped at 3.0 before jitter
        1.5,
    ]
    assert policy.delay(3, rng=lambda: 0.0) == 0.0


def test_no_jitter_waits_the_backoff_itself() -> None:
    policy = RetryPolicy(jitter="none", base_delay_s=1.0, max_delay_s=5.0)
    assert [policy.delay(a) for a in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]


def test_retry_after_is_honoured_and_capped() -> None:
    policy = RetryPolicy(max_retry_after_s=30.0)
    assert policy.delay(1, retry_after=2.5) == 2.5
    assert policy.delay(1, retry_after=120.0) == 30.0
    assert policy.delay(1, retry_after=math.inf) == 30.0
    assert policy.delay(1, retry_after=-4.0) == 0.0
    # NaN is no hint at all: the jittered backoff applies.
    assert policy.delay(1, retry_after=math.nan, rng=lambda: 1.0) == 0.1


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert RetryPolicy().delay(10_000, rng=lambda: 1.0) == 3.0


def test_a_broken_rng_cannot_push_the_delay_out_of_bounds() -> None:
    policy = RetryPolicy()
    assert policy.delay(1, rng=lambda: 7.0) == 0.1
    assert policy.delay(1, rng=lambda: -1.0) == 0.0
    assert policy.delay(1, rng=lambda: math.nan) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be a positive integer, got 0"),
        ({"max_attempts": 2.5}, "max_attempts must be a positive integer, got 2.5"),
        ({"max_attempts": True}, "max_attempts must be a positive integer, got True"),
        ({"base_delay_s": -0.1}, "base_delay_s must be a finite number >= 0, got -0.1"),
        ({"max_delay_s": math.inf}, "max_delay_s must be a finite number >= 0, got inf"),
        ({"max_retry_after_s": "5"}, "max_retry_after_s must be a finite number >= 0, got '5'"),
        ({"jitter": "equal"}, "jitter must be one of 'full', 'none', got 'equal'"),
    ],
)
def test_invalid_policy_raises_naming_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        RetryPolicy(**kwargs)
    assert str(err.value) == message


def test_policy_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        RetryPolicy(5)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        RetryPolicy().max_attempts = 9  # type: ignore[misc]


def test_policy_from_env_reads_overrides_and_rejects_garbage() -> None:
    env = {RETRY_ENV["max_attempts"]: "5", RETRY_ENV["max_delay_s"]: "10"}
    policy = RetryPolicy.from_env(env, base_delay_s=0.2)
    assert (policy.max_attempts, policy.base_delay_s, policy.max_delay_s) == (5, 0.2, 10.0)
    assert RetryPolicy.from_env({}) == RetryPolicy()
    with pytest.raises(ValueError) as err:
        RetryPolicy.from_env({"LOOPWATCH_RETRY_MAX_ATTEMPTS": "three"})
    assert str(err.value) == "LOOPWATCH_RETRY_MAX_ATTEMPTS must be an integer, got 'three'"


@settings(deadline=None)  # a shared, noisy machine: no per-example timing
@given(
    attempt=st.integers(min_value=1, max_value=100_000),
    draw=st.floats(min_value=0.0, max_value=1.0),
    base=st.floats(min_value=0.0, max_value=60.0),
    cap=st.floats(min_value=0.0, max_value=600.0),
)
def test_delay_is_always_within_zero_and_the_cap(
    attempt: int, draw: float, base: float, cap: float
) -> None:
    policy = RetryPolicy(base_delay_s=base, max_delay_s=cap)
    delay = policy.delay(attempt, rng=lambda: draw)
    assert 0.0 <= delay <= cap
    assert delay <= policy.backoff(attempt)


@settings(deadline=None)
@given(
    retry_after=st.floats(allow_nan=False),
    cap=st.floats(min_value=0.0, max_value=3600.0),
)
def test_retry_after_delay_is_always_within_zero_and_its_cap(
    retry_after: float, cap: float
) -> None:
    delay = RetryPolicy(max_retry_after_s=cap).delay(1, retry_after=retry_after)
    assert 0.0 <= delay <= cap
    if 0.0 <= retry_after <= cap:
        assert delay == retry_after


# -- classify ----------------------------------------------------------------------------------


class StatusError(Exception):
    """An SDK-style error carrying an HTTP status the way many clients do."""

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        for key, value in attrs.items():
            setattr(self, key, value)


class Response:
    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


@pytest.mark.parametrize(
    ("exc", "code", "transient"),
    [
        (StatusError("slow down", status_code=429), "HTTP_429", True),
        (StatusError("timeout", status=408), "HTTP_408", True),
        (StatusError("boom", response=Response(503)), "HTTP_503", True),
        (StatusError("bad gateway", status_code=502), "HTTP_502", True),
        (StatusError("not implemented", status_code=501), "HTTP_501", False),
        (StatusError("bad request", status_code=400), "HTTP_400", False),
        (StatusError("forbidden", status_code=403), "HTTP_403", False),
        (StatusError("missing", response=Response(404)), "HTTP_404", False),
        (TimeoutError("read timed out"), "TIMEOUT", True),
        (TimeoutError("timed out"), "TIMEOUT", True),
        (OSError(errno.ETIMEDOUT, "timed out"), "TIMEOUT", True),
        (ConnectionRefusedError("refused"), "CONNECTION", True),
        (ConnectionResetError("reset"), "CONNECTION", True),
        (OSError(errno.ENETUNREACH, "network unreachable"), "CONNECTION", True),
        (socket.gaierror(socket.EAI_AGAIN, "temporary failure"), "CONNECTION", True),
        (socket.gaierror(socket.EAI_NONAME, "no such host"), "TOOL_EXCEPTION", False),
        (urllib.error.URLError(ConnectionRefusedError("refused")), "CONNECTION", True),
        (PermissionError("denied"), "PERMISSION", False),
        (FileNotFoundError("no such file"), "NOT_FOUND", False),
        (ValueError("date must be YYYY-MM-DD"), "TOOL_EXCEPTION", False),
        (KeyError("x"), "TOOL_EXCEPTION", False),
    ],
)
def test_classify_decides_from_the_errors_meaning(
    exc: BaseException, code: str, transient: bool
) -> None:
    info = classify(exc)
    assert (info.code, info.transient) == (code, transient)


def test_third_party_timeouts_and_connection_errors_are_recognized_by_class_name() -> None:
    class ReadTimeout(Exception):  # like httpx.ReadTimeout, which is no TimeoutError
        pass

    class APIConnectionError(Exception):  # like openai.APIConnectionError
        pass

    assert classify(ReadTimeout()).code == "TIMEOUT"
    assert classify(APIConnectionError()).code == "CONNECTION"


def test_messages_are_for_the_model() -> None:
    assert classify(ValueError("date must be YYYY-MM-DD")).message == (
        "ValueError: date must be YYYY-MM-DD"
    )
    assert classify(RuntimeError()).message == "RuntimeError"
    long = classify(RuntimeError("x" * 10_000)).message
    assert len(long) == 2000 and long.endswith("…")


def test_tool_error_keeps_its_code_and_decides_transience() -> None:
    assert classify(ToolError("NOT_FOUND", "no such file: a.txt")) == ErrorInfo(
        "NOT_FOUND", "no such file: a.txt", False
    )
    assert classify(ToolError("UPSTREAM", status=503)) == ErrorInfo(
        "UPSTREAM", "UPSTREAM", True, None, 503
    )
    assert classify(ToolError("UPSTREAM", status=404)).transient is False
    assert classify(ToolError("RATE_LIMITED")).transient is True
    assert classify(ToolError("TIMEOUT")).transient is True
    assert classify(ToolError("HTTP_503")).transient is True
    # An explicit decision wins over the status.
    assert classify(ToolError("FLAKY", status=400, transient=True)).transient is True
    assert classify(ToolError("QUOTA", status=429, transient=False)).transient is False
    info = classify(ToolError("RATE_LIMITED", "slow down", status=429, retry_after=7))
    assert (info.retry_after, info.status) == (7.0, 429)


def test_tool_error_rejects_an_empty_code() -> None:
    with pytest.raises(ValueError) as err:
        ToolError("")
    assert str(err.value) == "code must be a non-empty string, got ''"


def test_retry_after_is_read_from_response_headers_in_both_forms() -> None:
    seconds = StatusError("slow", response=Response(429, {"Retry-After": "12"}))
    assert classify(seconds).retry_after == 12.0
    now = 1_800_000_000.0
    date = StatusError("slow", response=Response(503, {"Retry-After": formatdate(now + 40)}))
    assert classify(date, now=lambda: now).retry_after == 40.0
    past = StatusError("slow", response=Response(503, {"Retry-After": formatdate(now - 40)}))
    assert classify(past, now=lambda: now).retry_after == 0.0
    junk = StatusError("slow", response=Response(503, {"Retry-After": "soon"}))
    assert classify(junk).retry_after is None


def test_urllib_http_error_gives_status_and_retry_after() -> None:
    headers = EmailMessage()
    headers["Retry-After"] = "3"
    exc = urllib.error.HTTPError("http://127.0.0.1/x", 503, "Service Unavailable", headers, None)
    info = classify(exc)
    assert (info.code, info.transient, info.retry_after, info.status) == (
        "HTTP_503",
        True,
        3.0,
        503,
    )


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
def test_transient_statuses(status: int) -> None:
    assert is_transient_status(status)


@pytest.mark.parametrize("status", [200, 400, 401, 403, 404, 409, 422, 501, 505])
def test_permanent_statuses(status: int) -> None:
    assert not is_transient_status(status)


# -- CircuitBreaker ----------------------------------------------------------------------------


def test_breaker_opens_after_threshold_then_half_opens_one_probe_and_closes() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=30.0, clock=clock)
    for _ in range(2):
        assert breaker.allow("search")
        breaker.record_failure("search")
    assert breaker.state("search") is BreakerState.CLOSED
    breaker.record_failure("search")
    assert breaker.state("search") is BreakerState.OPEN
    assert not breaker.allow("search")
    assert breaker.retry_in("search") == 30.0

    clock.advance(29.9)
    assert not breaker.allow("search")
    assert breaker.state("search") is BreakerState.OPEN

    clock.advance(0.1)
    assert breaker.state("search") is BreakerState.HALF_OPEN
    assert breaker.allow("search")  # the one probe
    assert not breaker.allow("search")  # nobody else while it is out
    assert breaker.state("search") is BreakerState.HALF_OPEN

    breaker.record_success("search")
    assert breaker.state("search") is BreakerState.CLOSED
    assert breaker.failures("search") == 0
    assert breaker.allow("search")


def test_failed_probe_reopens_for_a_full_cooldown() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=10.0, clock=clock)
    breaker.record_failure("pay")
    clock.advance(10.0)
    assert breaker.allow("pay")
    clock.advance(2.0)
    breaker.record_failure("pay")
    assert breaker.state("pay") is BreakerState.OPEN
    assert breaker.retry_in("pay") == 10.0
    clock.advance(9.0)
    assert not breaker.allow("pay")
    clock.advance(1.0)
    assert breaker.allow("pay")


def test_a_probe_that_never_reports_does_not_block_the_tool_forever() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5.0, clock=clock)
    breaker.record_failure("t")
    clock.advance(5.0)
    assert breaker.allow("t")  # its caller dies and never records anything
    clock.advance(4.0)
    assert not breaker.allow("t")
    clock.advance(1.0)
    assert breaker.allow("t")


def test_failures_must_be_consecutive_and_tools_are_independent() -> None:
    breaker = CircuitBreaker(failure_threshold=3, clock=FakeClock())
    breaker.record_failure("a")
    breaker.record_failure("a")
    breaker.record_success("a")
    breaker.record_failure("a")
    breaker.record_failure("a")
    assert breaker.state("a") is BreakerState.CLOSED
    for _ in range(3):
        breaker.record_failure("b")
    assert breaker.state("b") is BreakerState.OPEN
    assert breaker.state("a") is BreakerState.CLOSED
    assert breaker.state("never-seen") is BreakerState.CLOSED
    breaker.reset("b")
    assert breaker.state("b") is BreakerState.CLOSED


def test_breaker_state_values_are_the_documented_strings() -> None:
    assert [s.value for s in BreakerState] == ["closed", "open", "half_open"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"failure_threshold": 0}, "failure_threshold must be a positive integer, got 0"),
        ({"cooldown_s": -1}, "cooldown_s must be a finite number >= 0, got -1"),
        ({"cooldown_s": math.nan}, "cooldown_s must be a finite number >= 0, got nan"),
    ],
)
def test_invalid_breaker_raises_naming_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        CircuitBreaker(**kwargs)
    assert str(err.value) == message


def test_breaker_from_env() -> None:
    env = {BREAKER_ENV["failure_threshold"]: "2", BREAKER_ENV["cooldown_s"]: "1.5"}
    breaker = CircuitBreaker.from_env(env)
    assert (breaker.failure_threshold, breaker.cooldown_s) == (2, 1.5)
    with pytest.raises(ValueError) as err:
        CircuitBreaker.from_env({"LOOPWATCH_BREAKER_COOLDOWN_S": "1m"})
    assert str(err.value) == "LOOPWATCH_BREAKER_COOLDOWN_S must be a number, got '1m'"
