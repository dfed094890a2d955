"""The tool registry: schemas, argument checks, retries, idempotency keys and the breaker.

Sleeping, randomness, key generation and the breaker's clock are injected: nothing here
really sleeps. The scripted failing tools (``Script``) are plain enough to reuse in other tests.
"""

from __future__ import annotations

import asyncio
import enum
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any, Literal, TypedDict

import pytest
from loopwatch.instrumentation.runtime.drops import dropped
from loopwatch.instrumentation.runtime.retry import (
    BreakerState,
    CircuitBreaker,
    RetryPolicy,
    ToolError,
)
from loopwatch.instrumentation.runtime.tools import (
    CIRCUIT_OPEN,
    INVALID_ARGUMENTS,
    UNKNOWN_TOOL,
    RetryEvent,
    ToolOutcome,
    ToolRegistry,
    parse_arguments,
    result_text,
    schema_from_function,
    validate_arguments,
)
from loopwatch.instrumentation.runtime.types import ToolCall

# -- reusable scripted tools -------------------------------------------------------------------


class Script:
    """Plays back a tool's outcomes in order: an exception is raised, anything else returned.

    The last step repeats once the script runs out. ``calls`` holds the keyword arguments of
    every call, so a test can check what reached the tool (e.g. the idempotency key).
    """

    def __init__(self, *steps: Any) -> None:
        if not steps:
            raise ValueError("a script needs at least one step")
        self.steps = list(steps)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, BaseException):
            raise step
        return step


def http_error(status: int, retry_after: float | None = None) -> ToolError:
    return ToolError(
        f"HTTP_{status}", f"upstream answered {status}", status=status, retry_after=retry_after
    )


class Harness:
    """A registry whose sleep, rng, key factory and breaker clock are all fakes."""

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        draw: float = 0.5,
        trip_on_permanent: bool = False,
    ) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.keys_made: list[str] = []
        self.events: list[RetryEvent] = []
        self.breaker = breaker or CircuitBreaker(
            failure_threshold=3, cooldown_s=30.0, clock=lambda: self.now
        )
        self.registry = ToolRegistry(
            retry=retry or RetryPolicy(),
            breaker=self.breaker,
            sleep=self.sleeps.append,
            asleep=self._asleep,
            rng=lambda: draw,
            key_factory=self._key,
            trip_on_permanent=trip_on_permanent,
        )

    async def _asleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def _key(self) -> str:
        key = f"key-{len(self.keys_made) + 1}"
        self.keys_made.append(key)
        return key

    def run(self, name: str, arguments: dict[str, Any] | str | None = None) -> ToolOutcome:
        call = ToolCall("call_1", name, {} if arguments is None else arguments)
        return self.registry.execute(call, on_retry=self.events.append)

    def arun(self, name: str, arguments: dict[str, Any] | str | None = None) -> ToolOutcome:
        call = ToolCall("call_1", name, {} if arguments is None else arguments)
        return asyncio.run(self.registry.aexecute(call, on_retry=self.events.append))


# -- retries and idempotency -------------------------------------------------------------------


def test_transient_error_is_retried_with_full_jitter_and_one_idempotency_key() -> None:
    h = Harness(draw=0.5)
    script = Script(http_error(503), TimeoutError("read timed out"), {"ticket": 42})

    def create_ticket(title: str, idempotency_key: str) -> Any:
        return script(title=title, idempotency_key=idempotency_key)

    h.registry.register(create_ticket, side_effects=True)
    outcome = h.run("create_ticket", '{"title": "printer on fire"}')

    assert outcome.ok and outcome.value == {"ticket": 42}
    assert outcome.content == '{"ticket": 42}'
    assert outcome.attempts == 3 and outcome.retries == 2
    # full jitter with rng() = 0.5: 0.5 * 0.1 * 2**0, then 0.5 * 0.1 * 2**1
    assert h.sleeps == [0.05, 0.1]
    assert h.keys_made == ["key-1"]  # generated once per logical call ...
    assert [c["idempotency_key"] for c in script.calls] == ["key-1"] * 3  # ... reused on every try
    assert outcome.idempotency_key == "key-1"
    assert outcome.arguments == {"title": "printer on fire"}
    assert h.events == [
        RetryEvent(
            "create_ticket", 1, 0.05, "HTTP_503", "key-1", "call_1", "upstream answered 503"
        ),
        RetryEvent(
            "create_ticket", 2, 0.1, "TIMEOUT", "key-1", "call_1", "TimeoutError: read timed out"
        ),
    ]


def test_each_logical_call_gets_a_new_key() -> None:
    h = Harness()
    script = Script("sent")

    def send_email(to: str, *, idempotency_key: str | None = None) -> Any:
        return script(to=to, idempotency_key=idempotency_key)

    h.registry.register(send_email, side_effects=True)
    assert h.run("send_email", {"to": "a@example.com"}).idempotency_key == "key-1"
    assert h.run("send_email", {"to": "a@example.com"}).idempotency_key == "key-2"
    assert [c["idempotency_key"] for c in script.calls] == ["key-1", "key-2"]


def test_a_key_made_up_by_the_model_is_replaced_by_the_registrys() -> None:
    h = Harness()
    script = Script("ok")

    def charge(amount: int, idempotency_key: str) -> Any:
        return script(amount=amount, idempotency_key=idempotency_key)

    h.registry.register(charge, side_effects=True)
    outcome = h.run("charge", {"amount": 5, "idempotency_key": "model-invented"})
    assert outcome.ok
    assert script.calls == [{"amount": 5, "idempotency_key": "key-1"}]


def test_retry_after_is_honoured() -> None:
    h = Harness()
    h.registry.register(
        Script(http_error(429, retry_after=2.5), "ok"), name="search", parameters={"type": "object"}
    )
    outcome = h.run("search")
    assert outcome.ok and outcome.attempts == 2
    assert h.sleeps == [2.5]


def test_retry_after_is_capped() -> None:
    h = Harness(retry=RetryPolicy(max_retry_after_s=30.0))
    h.registry.register(
        Script(http_error(503, retry_after=600), "ok"), name="search", parameters={"type": "object"}
    )
    assert h.run("search").ok
    assert h.sleeps == [30.0]


def test_permanent_error_is_returned_at_once() -> None:
    h = Harness()
    script = Script(ToolError("NOT_FOUND", "no such file: src/foo.ts", status=404), "never")

    def read_file(path: str) -> Any:
        return script(path=path)

    h.registry.register(read_file)
    outcome = h.run("read_file", {"path": "src/foo.ts"})
    assert not outcome.ok
    assert outcome.attempts == 1 and len(script.calls) == 1
    assert h.sleeps == [] and h.events == []
    assert outcome.error_code == "NOT_FOUND" and outcome.transient is False
    assert json.loads(outcome.content) == {"error": "no such file: src/foo.ts", "code": "NOT_FOUND"}
    assert outcome.value is None and outcome.status == "error"


def test_an_unexpected_exception_is_permanent_and_never_raised() -> None:
    h = Harness()

    def parse_date(text: str) -> str:
        raise ValueError(f"date must be YYYY-MM-DD, got {text!r}")

    h.registry.register(parse_date)
    outcome = h.run("parse_date", {"text": "tomorrow"})
    assert (outcome.error_code, outcome.attempts) == ("TOOL_EXCEPTION", 1)
    assert outcome.error_message == "ValueError: date must be YYYY-MM-DD, got 'tomorrow'"


def test_side_effect_tool_without_idempotency_key_is_not_retried() -> None:
    h = Harness()
    script = Script(http_error(503), "sent")

    def send_email(to: str) -> Any:
        return script(to=to)

    spec = h.registry.register(send_email, side_effects=True)
    assert not spec.retryable and not spec.accepts_idempotency_key
    outcome = h.run("send_email", {"to": "a@example.com"})
    assert not outcome.ok
    assert outcome.attempts == 1 and len(script.calls) == 1
    assert outcome.transient is True and outcome.error_code == "HTTP_503"
    assert outcome.idempotency_key is None
    assert h.sleeps == []


def test_the_same_failure_on_a_read_only_tool_is_retried() -> None:
    h = Harness()
    script = Script(http_error(503), "found")

    def search(query: str) -> Any:
        return script(query=query)

    h.registry.register(search)
    outcome = h.run("search", {"query": "x"})
    assert outcome.ok and outcome.attempts == 2 and outcome.idempotency_key is None


def test_retries_exhausted_gives_an_error_outcome_with_max_attempts() -> None:
    h = Harness(retry=RetryPolicy(max_attempts=4))
    script = Script(http_error(503))

    def search(query: str) -> Any:
        return script(query=query)

    h.registry.register(search)
    outcome = h.run("search", {"query": "x"})
    assert not outcome.ok
    assert outcome.attempts == 4 and len(script.calls) == 4
    assert outcome.transient is True
    assert h.sleeps == [0.05, 0.1, 0.2]
    assert outcome.error_message == "upstream answered 503 (after 4 attempts)"
    assert json.loads(outcome.content)["code"] == "HTTP_503"
    # One logical call is one breaker record, not four.
    assert h.breaker.failures("search") == 1


def test_a_tools_own_policy_wins_over_the_registrys() -> None:
    h = Harness(retry=RetryPolicy(max_attempts=2))
    script = Script(TimeoutError())
    h.registry.register(
        script,
        name="poll",
        parameters={"type": "object"},
        retry=RetryPolicy(max_attempts=5, jitter="none"),
    )
    assert h.run("poll").attempts == 5
    assert h.sleeps == [0.1, 0.2, 0.4, 0.8]


def test_an_on_retry_hook_that_raises_is_counted_and_ignored() -> None:
    before = dropped().get("retry_callback", 0)
    h = Harness()
    h.registry.register(Script(TimeoutError(), "ok"), name="search", parameters={"type": "object"})

    def broken_hook(event: RetryEvent) -> None:
        raise RuntimeError("exporter down")

    outcome = h.registry.execute(ToolCall("c", "search", {}), on_retry=broken_hook)
    assert outcome.ok and outcome.attempts == 2
    assert dropped().get("retry_callback", 0) == before + 1


# -- bad calls ---------------------------------------------------------------------------------


def test_unknown_tool() -> None:
    h = Harness()
    h.registry.register(Script("x"), name="read_file", parameters={"type": "object"})
    outcome = h.run("raed_file", {"path": "a"})
    assert not outcome.ok
    assert outcome.error_code == UNKNOWN_TOOL and outcome.attempts == 0
    assert json.loads(outcome.content) == {
        "error": "unknown tool 'raed_file'; available tools: read_file",
        "code": "UNKNOWN_TOOL",
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            '{"path": "a.txt"',
            "arguments are not valid JSON (Expecting ',' delimiter: line 1 column 17 (char 16))",
        ),
        ("path=a.txt", "arguments are not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        ('["a.txt"]', "arguments must be a JSON object, got array"),
        ('"a.txt"', "arguments must be a JSON object, got string"),
    ],
)
def test_arguments_that_are_not_a_json_object_go_back_to_the_model(raw: str, message: str) -> None:
    h = Harness()
    script = Script("content")

    def read_file(path: str) -> Any:
        return script(path=path)

    h.registry.register(read_file)
    outcome = h.run("read_file", raw)  # must not raise
    assert outcome.error_code == INVALID_ARGUMENTS
    assert outcome.error_message == f"invalid arguments for read_file: {message}"
    assert outcome.arguments is None and outcome.attempts == 0
    assert script.calls == []


def test_empty_argument_string_means_no_arguments() -> None:
    h = Harness()
    h.registry.register(lambda: "pong", name="ping")
    assert h.run("ping", "").content == "pong"
    assert h.run("ping", "  ").ok


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "missing required argument 'path'"),
        ({"path": 3}, "'path' must be string, got integer"),
        ({"path": "a", "limit": "10"}, "'limit' must be integer, got string"),
        ({"path": "a", "limit": True}, "'limit' must be integer, got boolean"),
        ({"path": "a", "limit": 1.5}, "'limit' must be integer, got number"),
        (
            {"path": "a", "encoding": "latin9"},
            '\'encoding\' must be one of "utf-8", "ascii", got "latin9"',
        ),
        ({"path": "a", "verbose": True}, "unexpected argument 'verbose'"),
        ({"path": "a", "lines": [1, "2"]}, "'lines[1]' must be integer, got string"),
    ],
)
def test_arguments_failing_the_schema_go_back_to_the_model(
    arguments: dict[str, Any], problem: str
) -> None:
    h = Harness()
    script = Script("content")

    def read_file(
        path: str,
        limit: int = 100,
        encoding: Literal["utf-8", "ascii"] = "utf-8",
        lines: list[int] | None = None,
    ) -> Any:
        return script(path=path)

    h.registry.register(read_file)
    outcome = h.run("read_file", arguments)
    assert outcome.error_code == INVALID_ARGUMENTS
    assert outcome.error_message is not None
    assert outcome.error_message.startswith(f"invalid arguments for read_file: {problem}.")
    # The model is told what the tool takes, to get it right next time.
    assert "Expected: path (string, required), limit (integer)" in outcome.error_message
    assert outcome.arguments is None and outcome.attempts == 0
    assert script.calls == []


def test_a_user_schema_that_misses_a_parameter_is_caught_before_the_call() -> None:
    h = Harness()
    called: list[str] = []

    def move(src: str, dst: str) -> str:
        called.append(src)
        return "moved"

    h.registry.register(
        move, parameters={"type": "object", "properties": {"src": {"type": "string"}}}
    )
    outcome = h.run("move", {"src": "a"})
    assert outcome.error_code == INVALID_ARGUMENTS
    assert "missing a required argument: 'dst'" in (outcome.error_message or "")
    assert called == []


def test_bad_calls_do_not_touch_the_breaker() -> None:
    h = Harness(breaker=CircuitBreaker(failure_threshold=1, clock=lambda: 0.0))
    h.registry.register(
        lambda path: path, name="read_file", parameters={"type": "object", "required": ["path"]}
    )
    for _ in range(3):
        assert h.run("read_file", "{}").error_code == INVALID_ARGUMENTS
    assert h.breaker.state("read_file") is BreakerState.CLOSED


# -- circuit breaker ---------------------------------------------------------------------------


def test_breaker_opens_fails_fast_half_opens_and_closes() -> None:
    h = Harness(retry=RetryPolicy(max_attempts=2))
    script = Script(http_error(503))

    def search(query: str) -> Any:
        return script(query=query)

    h.registry.register(search)
    for _ in range(3):  # threshold 3: three failed logical calls (two attempts each)
        assert h.run("search", {"query": "q"}).error_code == "HTTP_503"
    assert len(script.calls) == 6
    assert h.breaker.state("search") is BreakerState.OPEN

    outcome = h.run("search", {"query": "q"})
    assert outcome.error_code == CIRCUIT_OPEN and outcome.attempts == 0
    assert len(script.calls) == 6  # fn no longer called
    assert outcome.error_message == (
        "circuit open for tool 'search' after 3 consecutive failures; next probe in 30.0 s"
    )

    h.now += 30.0  # cooldown over: one probe, and a probe is not retried
    assert h.breaker.state("search") is BreakerState.HALF_OPEN
    probe = h.run("search", {"query": "q"})
    assert probe.error_code == "HTTP_503" and probe.attempts == 1
    assert len(script.calls) == 7
    assert h.breaker.state("search") is BreakerState.OPEN  # failed probe: open again
    assert h.run("search", {"query": "q"}).error_code == CIRCUIT_OPEN

    h.now += 30.0
    script.steps = ["results"]
    assert h.run("search", {"query": "q"}).ok  # successful probe
    assert h.breaker.state("search") is BreakerState.CLOSED
    assert h.run("search", {"query": "q"}).ok


def test_permanent_errors_do_not_trip_the_breaker_unless_asked() -> None:
    for trip, expected in ((False, BreakerState.CLOSED), (True, BreakerState.OPEN)):
        h = Harness(trip_on_permanent=trip)
        h.registry.register(
            Script(ToolError("NOT_FOUND")), name="read_file", parameters={"type": "object"}
        )
        for _ in range(3):
            h.run("read_file")
        assert h.breaker.state("read_file") is expected


def test_breaker_can_be_switched_off() -> None:
    registry = ToolRegistry(breaker=None, sleep=lambda s: None, retry=RetryPolicy(max_attempts=1))
    registry.register(Script(TimeoutError()), name="search", parameters={"type": "object"})
    for _ in range(10):
        assert registry.execute(ToolCall("c", "search", {})).error_code == "TIMEOUT"


def test_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWATCH_RETRY_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("LOOPWATCH_BREAKER_FAILURE_THRESHOLD", "7")
    registry = ToolRegistry()
    assert registry.retry.max_attempts == 5
    assert registry.breaker is not None and registry.breaker.failure_threshold == 7
    monkeypatch.delenv("LOOPWATCH_RETRY_MAX_ATTEMPTS")
    monkeypatch.delenv("LOOPWATCH_BREAKER_FAILURE_THRESHOLD")
    assert ToolRegistry().retry == RetryPolicy()


# -- async -------------------------------------------------------------------------------------


def test_async_tool_via_aexecute_retries_with_async_sleep() -> None:
    h = Harness()
    script = Script(ConnectionResetError("reset by peer"), {"rows": 3})

    async def query(sql: str, idempotency_key: str) -> Any:
        await asyncio.sleep(0)
        return script(sql=sql, idempotency_key=idempotency_key)

    spec = h.registry.register(query, side_effects=True)
    assert spec.is_async
    outcome = h.arun("query", {"sql": "select 1"})
    assert outcome.ok and outcome.value == {"rows": 3} and outcome.attempts == 2
    assert h.sleeps == [0.05]
    assert [c["idempotency_key"] for c in script.calls] == ["key-1", "key-1"]
    assert h.events[0].error_code == "CONNECTION"


def test_sync_tool_via_aexecute_runs_in_a_worker_thread() -> None:
    h = Harness()
    threads: list[int] = []

    def lookup(key: str) -> str:
        threads.append(threading.get_ident())
        return key.upper()

    h.registry.register(lookup)
    outcome = h.arun("lookup", {"key": "abc"})
    assert outcome.ok and outcome.content == "ABC"
    assert threads and threads[0] != threading.get_ident()


def test_async_tool_via_sync_execute() -> None:
    h = Harness()

    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return f"<html>{url}</html>"

    h.registry.register(fetch)
    assert h.run("fetch", {"url": "u"}).content == "<html>u</html>"

    async def inside_a_loop() -> ToolOutcome:
        return h.registry.execute(ToolCall("c", "fetch", {"url": "v"}))

    assert asyncio.run(inside_a_loop()).content == "<html>v</html>"


def test_async_bad_calls_and_failures_mirror_sync() -> None:
    h = Harness()

    async def read_file(path: str) -> str:
        raise PermissionError(f"denied: {path}")

    h.registry.register(read_file)
    assert h.arun("nope").error_code == UNKNOWN_TOOL
    assert h.arun("read_file", "{oops").error_code == INVALID_ARGUMENTS
    outcome = h.arun("read_file", {"path": "/etc/shadow"})
    assert (outcome.error_code, outcome.attempts, outcome.transient) == ("PERMISSION", 1, False)


def test_cancellation_is_not_a_tool_failure() -> None:
    h = Harness()
    never = asyncio.Event

    async def hang() -> str:
        await never().wait()
        return "unreachable"

    h.registry.register(hang)

    async def main() -> None:
        task = asyncio.create_task(h.registry.aexecute(ToolCall("c", "hang", {})))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert h.breaker.failures("hang") == 0


# -- registration and specs --------------------------------------------------------------------


def test_flags_reach_the_spec_and_the_decorator_keeps_the_function() -> None:
    registry = ToolRegistry()

    @registry.tool(repeat_exempt=True)
    def job_status(job_id: str) -> str:
        """Poll a job's status."""
        return "running"

    @registry.tool(done=True)
    def final_answer(answer: str) -> str:
        """Give the final answer."""
        return answer

    @registry.tool
    def delete_file(path: str) -> None:
        """Delete a file."""

    registry.register(lambda: "ok", name="wire_money", requires_approval=True, side_effects=True)

    assert job_status("j") == "running"  # still a plain function
    assert registry.names == ["job_status", "final_answer", "delete_file", "wire_money"]
    assert "job_status" in registry and "missing" not in registry and len(registry) == 4
    status = registry.get("job_status")
    done = registry.get("final_answer")
    wire = registry.get("wire_money")
    assert status is not None and status.repeat_exempt and not status.done
    assert done is not None and done.done and not done.repeat_exempt
    assert wire is not None and wire.requires_approval and wire.side_effects
    assert registry.get("missing") is None


def test_register_done_returns_its_arguments() -> None:
    h = Harness()
    spec = h.registry.register_done()
    assert spec.done and spec.name == "done"
    outcome = h.run("done", {"answer": "42"})
    assert outcome.ok and outcome.value == {"answer": "42"}
    assert h.run("done", {}).error_code == INVALID_ARGUMENTS


def test_specs_are_openai_and_anthropic_tool_dicts() -> None:
    registry = ToolRegistry()

    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return "sunny"

    registry.register(get_weather)
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    assert registry.specs() == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": schema,
            },
        }
    ]
    assert registry.anthropic_specs() == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": schema,
        }
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"name": "read file"},
            "name must match ^[A-Za-z0-9_-]{1,64}$ (letters, digits, _ and -), got 'read file'",
        ),
        (
            {"name": "x" * 65},
            "name must match ^[A-Za-z0-9_-]{1,64}$ (letters, digits, _ and -), got '"
            + "x" * 65
            + "'",
        ),
        ({"name": "taken"}, "name 'taken' is already registered"),
        (
            {"parameters": {"type": "array"}},
            "parameters must be a JSON object schema, got {'type': 'array'}",
        ),
    ],
)
def test_bad_registrations_raise(kwargs: dict[str, Any], message: str) -> None:
    registry = ToolRegistry()
    registry.register(lambda: 1, name="taken")
    with pytest.raises(ValueError) as err:
        registry.register(lambda: 1, **{"name": "fresh", **kwargs})
    assert str(err.value) == message


# -- schema derivation -------------------------------------------------------------------------


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


class Address(TypedDict):
    street: str
    zip: int


def forecast(
    city: Annotated[str, "City name, e.g. 'Paris'"],
    days: int = 3,
    unit: Unit = Unit.CELSIUS,
    hourly: bool = False,
    ratio: float | None = None,
    tags: list[str] | None = None,
    extra: dict[str, int] | None = None,
    mode: Literal["fast", "exact"] = "fast",
    address: Address | None = None,
    *,
    idempotency_key: str | None = None,
) -> str:
    """Forecast the weather.

    Longer explanation that still belongs to the description.

    Args:
        city: Ignored: Annotated wins.
        days: How many days ahead,
            at most 10.
        unit: Temperature unit.
    """
    return ""


def test_schema_from_a_signature() -> None:
    schema = schema_from_function(forecast)
    assert schema["required"] == ["city"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert "idempotency_key" not in props
    assert props["city"] == {"type": "string", "description": "City name, e.g. 'Paris'"}
    assert props["days"] == {
        "type": "integer",
        "description": "How many days ahead, at most 10.",
        "default": 3,
    }
    assert props["unit"] == {
        "enum": ["c", "f"],
        "type": "string",
        "description": "Temperature unit.",
        "default": "c",
    }
    assert props["hourly"] == {"type": "boolean", "default": False}
    assert props["ratio"] == {"type": ["number", "null"], "default": None}
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "default": None,
    }
    assert props["extra"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    assert props["mode"] == {"enum": ["fast", "exact"], "type": "string", "default": "fast"}
    assert props["address"]["anyOf"][0] == {
        "type": "object",
        "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}},
        "required": ["street", "zip"],
    }
    registry = ToolRegistry()
    spec = registry.register(forecast)
    assert (
        spec.description
        == "Forecast the weather. Longer explanation that still belongs to the description."
    )
    assert spec.accepts_idempotency_key


def test_schema_edge_cases() -> None:
    def anything(x, *args, **kwargs):  # type: ignore[no-untyped-def]
        """:param x: Whatever you like."""

    assert schema_from_function(anything) == {
        "type": "object",
        "properties": {"x": {"description": "Whatever you like."}},
        "required": ["x"],
        "additionalProperties": True,
    }

    def positional(x: int, /) -> int:
        return x

    with pytest.raises(ValueError) as err:
        schema_from_function(positional)
    assert (
        str(err.value)
        == "parameter 'x' of 'positional' is positional-only; the model passes arguments by name"
    )


def test_validate_arguments_subset() -> None:
    schema = {
        "type": "object",
        "required": ["filter"],
        "properties": {
            "filter": {
                "type": "object",
                "required": ["field"],
                "properties": {"field": {"type": "string"}},
                "additionalProperties": False,
            },
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "x": {"type": "number"},
            "flag": {"enum": [1, 2]},
        },
    }
    assert validate_arguments(schema, {"filter": {"field": "a"}, "n": None, "x": 1}) == []
    assert validate_arguments(schema, {"filter": {"op": "eq"}, "n": "2", "flag": True}) == [
        "'filter' is missing required key 'field'",
        "'filter' has unexpected key 'op'",
        "'n' must be integer or null, got string",
        "'flag' must be one of 1, 2, got true",
    ]
    assert validate_arguments(schema, []) == ["arguments must be object, got array"]


def test_parse_arguments() -> None:
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments({"a": 1}) == {"a": 1}
    assert parse_arguments(None) == {}
    assert parse_arguments("") == {}
    with pytest.raises(ValueError) as err:
        parse_arguments("null")
    assert str(err.value) == "arguments must be a JSON object, got null"


@dataclass
class Point:
    x: int
    y: int


def test_result_text() -> None:
    assert result_text("plain") == "plain"
    assert result_text({"a": [1, "é"]}) == '{"a": [1, "é"]}'
    assert result_text(None) == "null"
    assert result_text(b"bytes \xff") == "bytes \ufffd"
    assert result_text(Point(1, 2)) == '{"x": 1, "y": 2}'
    loop: list[Any] = []
    loop.append(loop)
    assert result_text(loop) == "[[...]]"


# -- a real HTTP dependency --------------------------------------------------------------------


@pytest.fixture
def flaky_server() -> Iterator[tuple[str, list[str | None]]]:
    """127.0.0.1 server: 503 with Retry-After twice, then 201. Records each Idempotency-Key."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(self.headers.get("Idempotency-Key"))
            if len(seen) <= 2:
                self.send_response(503)
                self.send_header("Retry-After", "1")
                body = b"busy"
            else:
                self.send_response(201)
                body = b'{"id": "T-1"}'
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tickets", seen
    finally:
        server.shutdown()
        server.server_close()


def test_real_http_503_with_retry_after_then_success(
    flaky_server: tuple[str, list[str | None]],
) -> None:
    import urllib.request

    url, seen = flaky_server
    h = Harness()

    def create_ticket(title: str, idempotency_key: str) -> Any:
        request = urllib.request.Request(
            url,
            data=json.dumps({"title": title}).encode(),
            headers={"Idempotency-Key": idempotency_key, "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    h.registry.register(create_ticket, side_effects=True)
    outcome = h.run("create_ticket", {"title": "disk full"})
    assert outcome.ok and outcome.value == {"id": "T-1"} and outcome.attempts == 3
    assert h.sleeps == [1.0, 1.0]  # the server's Retry-After, not the jittered backoff
    assert seen == ["key-1", "key-1", "key-1"]
    assert [e.error_code for e in h.events] == ["HTTP_503", "HTTP_503"]
