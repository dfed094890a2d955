"""The tool layer: register plain functions, describe them to the model, run the calls it asks for.

A failing, unknown or wrongly-called tool never raises into the loop: the model gets
``{"error": ..., "code": ...}`` back and can fix its arguments or pick another tool.
Transient failures are retried here, in this one layer, with backoff and full jitter
(:class:`~loopwatch.instrumentation.retry.RetryPolicy`); a tool whose calls keep failing is
cut off by a per-tool :class:`~loopwatch.instrumentation.retry.CircuitBreaker`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import json
import pathlib
import random
import re
import time
import types
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from .drops import record_drop
from .outcomes import ErrorResult, tool_error
from .retry import BreakerState, CircuitBreaker, ErrorInfo, RetryPolicy, classify
from .types import ToolCall

__all__ = [
    "CIRCUIT_OPEN",
    "IDEMPOTENCY_KEY",
    "INVALID_ARGUMENTS",
    "INVALID_RESULT",
    "TOOL_CALL_ID",
    "TOOL_NAME_PATTERN",
    "UNKNOWN_TOOL",
    "ErrorResult",
    "RetryEvent",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "parse_arguments",
    "result_text",
    "schema_from_function",
    "validate_arguments",
]

UNKNOWN_TOOL: typing.Final = "UNKNOWN_TOOL"
"""Error code: the model called a tool that is not registered."""
INVALID_ARGUMENTS: typing.Final = "INVALID_ARGUMENTS"
"""Error code: the arguments were not JSON, not an object, or did not fit the tool's schema."""
CIRCUIT_OPEN: typing.Final = "CIRCUIT_OPEN"
"""Error code: the tool's circuit breaker is open, so the tool was not called."""
IDEMPOTENCY_KEY: typing.Final = "idempotency_key"
"""The keyword a tool accepts to receive the idempotency key of the logical call."""
TOOL_CALL_ID: typing.Final = "tool_call_id"
"""The keyword a tool accepts to receive the model's id of the call it is running."""
INVALID_RESULT: typing.Final = "INVALID_RESULT"
"""Error code: the tool returned a value that could not be turned into text."""
TOOL_NAME_PATTERN: typing.Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What providers accept as a function name."""

ToolFn = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One registered tool: the function and what the model and the guard need to know about it."""

    name: str
    """The name the model calls it by."""
    fn: ToolFn
    """The function run for a call (sync or async); it receives the arguments as keywords."""
    description: str
    """What the tool does, for the model."""
    parameters: dict[str, Any]
    """JSON schema of the arguments (an object schema)."""
    side_effects: bool = False
    """The tool changes something (sends, writes, buys): retried only with an idempotency key."""
    done: bool = False
    """The done tool: calling it ends the run, its arguments are the final answer."""
    requires_approval: bool = False
    """Each call needs the approver's yes before it runs."""
    repeat_exempt: bool = False
    """A polling tool that legitimately repeats: the guard's repeat detectors skip it."""
    retry: RetryPolicy | None = None
    """This tool's own retry policy; ``None`` = the registry's."""
    is_async: bool = False
    """``fn`` is a coroutine function (awaited by ``aexecute``)."""
    accepts_idempotency_key: bool = False
    """``fn`` takes an ``idempotency_key`` keyword; the registry fills it in."""
    error_prefix: str | tuple[str, ...] | None = None
    """The tool's own error rule: a result text starting with this (e.g. ``"Error:"``) is a
    failed call, its text handed to the model as it is."""
    accepts_call_id: bool = False
    """``fn`` takes a ``tool_call_id`` keyword; the registry passes the model's call id."""

    @property
    def retryable(self) -> bool:
        """Transient failures may be retried: no side effects, or a key to dedupe them."""
        return not self.side_effects or self.accepts_idempotency_key

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI Chat Completions function-tool dict."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def to_anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages tool dict."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """How one logical tool call ended, retries included. Never an exception."""

    call: ToolCall
    """The call the model made."""
    ok: bool
    """The tool returned a result."""
    content: str
    """What goes back to the model: the result as text/JSON, or ``{"error": ..., "code": ...}``."""
    value: Any = None
    """The tool's return value (``None`` on error)."""
    error_code: str | None = None
    """``UNKNOWN_TOOL``, ``INVALID_ARGUMENTS``, ``CIRCUIT_OPEN`` or :func:`classify`'s code."""
    error_message: str | None = None
    """The error as told to the model."""
    transient: bool = False
    """The error was transient (retries, if any, did not help)."""
    attempts: int = 0
    """Times the function was called (0 if never: unknown tool, bad arguments, open circuit)."""
    idempotency_key: str | None = None
    """The key passed on every attempt, when the tool takes one."""
    arguments: dict[str, Any] | None = None
    """The parsed arguments; ``None`` when they could not be parsed."""

    @property
    def retries(self) -> int:
        """Attempts after the first."""
        return max(self.attempts - 1, 0)

    @property
    def status(self) -> Literal["ok", "error"]:
        """``ok`` or ``error``, as span attributes and metric labels spell it."""
        return "ok" if self.ok else "error"


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """A failed attempt about to be retried (reported before the backoff sleep)."""

    tool: str
    """The tool's name."""
    attempt: int
    """The attempt that failed, 1-based."""
    delay_s: float
    """The backoff about to be slept."""
    error_code: str
    """The failed attempt's error code."""
    idempotency_key: str | None
    """The key of the logical call (the same on every attempt)."""
    call_id: str = ""
    """The model's tool-call id."""
    error_message: str = ""
    """The failed attempt's error message."""


class _Default(enum.Enum):
    TOKEN = 0


_NEW_BREAKER: typing.Final = _Default.TOKEN


class ToolRegistry:
    """The tools a model may call, and the one place their calls are run, retried and cut off.

    ``retry`` / ``breaker`` default to ``RetryPolicy.from_env()`` / ``CircuitBreaker.from_env()``
    (defaults unless ``LOOPWATCH_RETRY_*`` / ``LOOPWATCH_BREAKER_*`` are set); ``breaker=None``
    switches the breaker off. ``sleep``, ``asleep``, ``rng`` and ``key_factory`` are injectable
    for tests. ``trip_on_permanent=True`` makes permanent errors count as breaker failures too
    (by default only transient ones do: a 404 shows the tool is up).
    """

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | Literal[_Default.TOKEN] | None = _NEW_BREAKER,
        sleep: Callable[[float], object] = time.sleep,
        asleep: Callable[[float], Awaitable[object]] | None = None,
        rng: Callable[[], float] = random.random,
        key_factory: Callable[[], str] = lambda: uuid.uuid4().hex,
        trip_on_permanent: bool = False,
        error_prefix: str | Sequence[str] | None = None,
    ) -> None:
        self.retry: RetryPolicy = RetryPolicy.from_env() if retry is None else retry
        """The retry policy of tools registered without their own."""
        self.breaker: CircuitBreaker | None = (
            CircuitBreaker.from_env() if breaker is _NEW_BREAKER else breaker
        )
        """The per-tool circuit breaker, or ``None`` when switched off."""
        self.trip_on_permanent = trip_on_permanent
        """Permanent errors count as breaker failures too."""
        self.error_prefix = _prefixes(error_prefix)
        """The error rule of tools registered without their own ``error_prefix``."""
        self._sleep = sleep
        self._asleep = asleep if asleep is not None else _asyncio_sleep
        self._rng = rng
        self._key_factory = key_factory
        self._specs: dict[str, ToolSpec] = {}
        self._signatures: dict[str, inspect.Signature | None] = {}

    # -- registration -------------------------------------------------------------------------

    def register(
        self,
        fn: ToolFn,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
        side_effects: bool = False,
        done: bool = False,
        requires_approval: bool = False,
        repeat_exempt: bool = False,
        retry: RetryPolicy | None = None,
        error_prefix: str | Sequence[str] | None = None,
    ) -> ToolSpec:
        """Register ``fn`` as a tool and return its spec.

        The JSON schema is derived from ``fn``'s signature (type hints, defaults, docstring
        ``Args:``) unless ``parameters`` is given. ``error_prefix``: the tool's own error rule
        (result text starting with it is a failed call; default: the registry's). A ``fn`` taking
        ``tool_call_id`` receives the call's id. Raises ``ValueError`` for a bad or taken name,
        an empty ``error_prefix``, or a signature the model could not call.
        """
        if not callable(fn):
            raise ValueError(f"fn must be callable, got {fn!r}")
        tool_name = name if name is not None else getattr(fn, "__name__", None)
        if not isinstance(tool_name, str) or not TOOL_NAME_PATTERN.match(tool_name):
            raise ValueError(
                f"name must match {TOOL_NAME_PATTERN.pattern} (letters, digits, _ and -), "
                f"got {tool_name!r}"
            )
        if tool_name in self._specs:
            raise ValueError(f"name {tool_name!r} is already registered")
        if parameters is None:
            schema = schema_from_function(fn)
        else:
            if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
                raise ValueError(f"parameters must be a JSON object schema, got {parameters!r}")
            schema = parameters
        signature = _signature(fn)
        accepts_key = signature is not None and _accepts_keyword(signature, IDEMPOTENCY_KEY)
        accepts_id = signature is not None and _accepts_keyword(signature, TOOL_CALL_ID)
        spec = ToolSpec(
            name=tool_name,
            fn=fn,
            description=description if description is not None else _summary(fn),
            parameters=schema,
            side_effects=side_effects,
            done=done,
            requires_approval=requires_approval,
            repeat_exempt=repeat_exempt,
            retry=retry,
            is_async=_is_async(fn),
            accepts_idempotency_key=accepts_key,
            error_prefix=_prefixes(error_prefix) if error_prefix is not None else self.error_prefix,
            accepts_call_id=accepts_id,
        )
        self._specs[tool_name] = spec
        self._signatures[tool_name] = signature
        return spec

    @overload
    def tool(self, fn: ToolFn, /) -> ToolFn: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
        side_effects: bool = False,
        done: bool = False,
        requires_approval: bool = False,
        repeat_exempt: bool = False,
        retry: RetryPolicy | None = None,
        error_prefix: str | Sequence[str] | None = None,
    ) -> Callable[[ToolFn], ToolFn]: ...

    def tool(
        self,
        fn: ToolFn | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
        side_effects: bool = False,
        done: bool = False,
        requires_approval: bool = False,
        repeat_exempt: bool = False,
        retry: RetryPolicy | None = None,
        error_prefix: str | Sequence[str] | None = None,
    ) -> ToolFn | Callable[[ToolFn], ToolFn]:
        """Decorator form of :meth:`register`: ``@registry.tool`` or ``@registry.tool(...)``.

        Returns the function unchanged, so it stays callable from plain code.
        """

        def decorate(f: ToolFn) -> ToolFn:
            self.register(
                f,
                name=name,
                description=description,
                parameters=parameters,
                side_effects=side_effects,
                done=done,
                requires_approval=requires_approval,
                repeat_exempt=repeat_exempt,
                retry=retry,
                error_prefix=error_prefix,
            )
            return f

        return decorate if fn is None else decorate(fn)

    def register_done(
        self,
        name: str = "done",
        *,
        description: str = "Call this when the task is finished; `answer` is the final answer.",
        parameters: dict[str, Any] | None = None,
    ) -> ToolSpec:
        """Register a done tool with no real work behind it: calling it returns its arguments.

        The default schema takes one required string, ``answer``.
        """
        schema = parameters or {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer."}},
            "required": ["answer"],
            "additionalProperties": False,
        }

        def done_tool(**arguments: Any) -> dict[str, Any]:
            return arguments

        return self.register(
            done_tool, name=name, description=description, parameters=schema, done=True
        )

    # -- lookup -------------------------------------------------------------------------------

    def get(self, name: str) -> ToolSpec | None:
        """The spec registered under ``name``, or ``None``."""
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(list(self._specs.values()))

    @property
    def names(self) -> list[str]:
        """Registered tool names, in registration order."""
        return list(self._specs)

    def specs(self) -> list[dict[str, Any]]:
        """The tools as OpenAI-style function-tool dicts, to send to the model."""
        return [spec.to_openai() for spec in self._specs.values()]

    def anthropic_specs(self) -> list[dict[str, Any]]:
        """The tools as Anthropic Messages tool dicts."""
        return [spec.to_anthropic() for spec in self._specs.values()]

    # -- execution ----------------------------------------------------------------------------

    def execute(
        self, call: ToolCall, *, on_retry: Callable[[RetryEvent], None] | None = None
    ) -> ToolOutcome:
        """Run ``call`` with validation, retries and the breaker. Never raises for tool problems.

        An async tool is run to completion on a private event loop. ``on_retry`` hears of each
        retry before its backoff sleep; an exception from it is counted as dropped telemetry.
        """
        prepared = self._prepare(call)
        if isinstance(prepared, ToolOutcome):
            return prepared
        attempt = 0
        while True:
            attempt += 1
            try:
                value = prepared.spec.fn(**prepared.kwargs)
                if inspect.isawaitable(value):
                    value = _run_awaitable(value)
            except Exception as exc:
                info = classify(exc)
                delay = self._retry_delay(prepared, info, attempt)
                if delay is None:
                    return self._failed(prepared, info, attempt)
                self._notify(on_retry, prepared, info, attempt, delay)
                self._sleep(delay)
                continue
            return self._succeeded(prepared, value, attempt)

    async def aexecute(
        self, call: ToolCall, *, on_retry: Callable[[RetryEvent], None] | None = None
    ) -> ToolOutcome:
        """Async :meth:`execute`: awaits async tools, runs sync ones in a worker thread.

        Cancellation (a run's deadline) propagates: it is not a tool failure.
        """
        import asyncio  # only async callers pay for it

        prepared = self._prepare(call)
        if isinstance(prepared, ToolOutcome):
            return prepared
        attempt = 0
        while True:
            attempt += 1
            try:
                if prepared.spec.is_async:
                    value = await prepared.spec.fn(**prepared.kwargs)
                else:
                    value = await asyncio.to_thread(prepared.spec.fn, **prepared.kwargs)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                info = classify(exc)
                delay = self._retry_delay(prepared, info, attempt)
                if delay is None:
                    return self._failed(prepared, info, attempt)
                self._notify(on_retry, prepared, info, attempt, delay)
                await self._asleep(delay)
                continue
            return self._succeeded(prepared, value, attempt)

    # -- internals ----------------------------------------------------------------------------

    def _prepare(self, call: ToolCall) -> _Prepared | ToolOutcome:
        spec = self._specs.get(call.name)
        if spec is None:
            known = ", ".join(self._specs) or "none"
            return _error(
                call, UNKNOWN_TOOL, f"unknown tool {call.name!r}; available tools: {known}"
            )
        try:
            arguments = parse_arguments(call.arguments)
        except ValueError as exc:
            return _error(call, INVALID_ARGUMENTS, f"invalid arguments for {spec.name}: {exc}")
        arguments = _without_key(arguments, spec)
        problems = validate_arguments(spec.parameters, arguments)
        signature = self._signatures.get(spec.name)
        if not problems and signature is not None:
            try:
                signature.bind(**arguments, **_filled_in(spec, "", ""))
            except TypeError as exc:
                problems = [str(exc)]
        if problems:
            return _error(
                call,
                INVALID_ARGUMENTS,
                f"invalid arguments for {spec.name}: {'; '.join(problems)}."
                f"{_expected(spec.parameters)}",
            )
        retryable = spec.retryable
        if self.breaker is not None:
            probing = self.breaker.state(spec.name) is not BreakerState.CLOSED
            if not self.breaker.allow(spec.name):
                return _error(
                    call,
                    CIRCUIT_OPEN,
                    f"circuit open for tool {spec.name!r} after "
                    f"{self.breaker.failures(spec.name)} consecutive failures; next probe in "
                    f"{self.breaker.retry_in(spec.name):.1f} s",
                    transient=True,
                    arguments=arguments,
                )
            # A probe tests the tool once; retrying it would hammer a tool known to be failing.
            retryable = retryable and not probing
        key = self._key_factory() if spec.accepts_idempotency_key else None
        kwargs = dict(arguments)
        if key is not None:
            kwargs[IDEMPOTENCY_KEY] = key
        if spec.accepts_call_id:
            kwargs[TOOL_CALL_ID] = call.id
        return _Prepared(spec, call, arguments, kwargs, key, spec.retry or self.retry, retryable)

    def _retry_delay(self, prepared: _Prepared, info: ErrorInfo, attempt: int) -> float | None:
        if not info.transient or not prepared.retryable:
            return None
        if attempt >= prepared.policy.max_attempts:
            return None
        return prepared.policy.delay(attempt, info.retry_after, self._rng)

    def _notify(
        self,
        on_retry: Callable[[RetryEvent], None] | None,
        prepared: _Prepared,
        info: ErrorInfo,
        attempt: int,
        delay: float,
    ) -> None:
        if on_retry is None:
            return
        event = RetryEvent(
            tool=prepared.spec.name,
            attempt=attempt,
            delay_s=delay,
            error_code=info.code,
            idempotency_key=prepared.key,
            call_id=prepared.call.id,
            error_message=info.message,
        )
        try:
            on_retry(event)
        except Exception:  # a telemetry hook must not change the tool call's outcome
            record_drop("retry_callback")

    def _failed(self, prepared: _Prepared, info: ErrorInfo, attempts: int) -> ToolOutcome:
        if self.breaker is not None:
            if info.transient or self.trip_on_permanent:
                self.breaker.record_failure(prepared.spec.name)
            else:
                self.breaker.record_success(prepared.spec.name)
        message = info.message if attempts == 1 else f"{info.message} (after {attempts} attempts)"
        return _error(
            prepared.call,
            info.code,
            message,
            transient=info.transient,
            attempts=attempts,
            key=prepared.key,
            arguments=prepared.arguments,
        )

    def _succeeded(self, prepared: _Prepared, value: Any, attempts: int) -> ToolOutcome:
        # The tool answered (even with an error it returned): its service is up.
        if self.breaker is not None:
            self.breaker.record_success(prepared.spec.name)
        try:
            content = value.content if isinstance(value, ErrorResult) else result_text(value)
            err = tool_error(value, error_prefix=prepared.spec.error_prefix)
        except Exception as exc:  # e.g. a __str__/__repr__ that raises
            return _error(
                prepared.call,
                INVALID_RESULT,
                f"{prepared.spec.name} returned a {type(value).__name__} that could not be "
                f"turned into text ({type(exc).__name__}: {exc})",
                attempts=attempts,
                key=prepared.key,
                arguments=prepared.arguments,
            )
        if err is not None:
            return ToolOutcome(
                call=prepared.call,
                ok=False,
                content=content,
                value=value,
                error_code=err.code,
                error_message=err.message,
                attempts=attempts,
                idempotency_key=prepared.key,
                arguments=prepared.arguments,
            )
        return ToolOutcome(
            call=prepared.call,
            ok=True,
            content=content,
            value=value,
            attempts=attempts,
            idempotency_key=prepared.key,
            arguments=prepared.arguments,
        )


@dataclass(slots=True)
class _Prepared:
    spec: ToolSpec
    call: ToolCall
    arguments: dict[str, Any]
    kwargs: dict[str, Any]
    key: str | None
    policy: RetryPolicy
    retryable: bool


def _error(
    call: ToolCall,
    code: str,
    message: str,
    *,
    transient: bool = False,
    attempts: int = 0,
    key: str | None = None,
    arguments: dict[str, Any] | None = None,
) -> ToolOutcome:
    return ToolOutcome(
        call=call,
        ok=False,
        content=json.dumps({"error": message, "code": code}, ensure_ascii=False),
        error_code=code,
        error_message=message,
        transient=transient,
        attempts=attempts,
        idempotency_key=key,
        arguments=arguments,
    )


def _without_key(arguments: dict[str, Any], spec: ToolSpec) -> dict[str, Any]:
    # The registry owns the key and the call id: values the model made up must not replace them.
    if (spec.accepts_idempotency_key and IDEMPOTENCY_KEY in arguments) or (
        spec.accepts_call_id and TOOL_CALL_ID in arguments
    ):
        return {
            k: v
            for k, v in arguments.items()
            if not (
                (k == IDEMPOTENCY_KEY and spec.accepts_idempotency_key)
                or (k == TOOL_CALL_ID and spec.accepts_call_id)
            )
        }
    return dict(arguments)


def _filled_in(spec: ToolSpec, key: str, call_id: str) -> dict[str, str]:
    filled: dict[str, str] = {}
    if spec.accepts_idempotency_key:
        filled[IDEMPOTENCY_KEY] = key
    if spec.accepts_call_id:
        filled[TOOL_CALL_ID] = call_id
    return filled


def _prefixes(prefix: str | Sequence[str] | None) -> str | tuple[str, ...] | None:
    if prefix is None or isinstance(prefix, str):
        if prefix == "":
            raise ValueError("error_prefix must not be empty (it would match every result)")
        return prefix
    prefixes = tuple(prefix)
    if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
        raise ValueError(f"error_prefix must be a non-empty string or strings, got {prefix!r}")
    return prefixes


async def _asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def _run_awaitable(awaitable: Awaitable[Any]) -> Any:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    # Called from inside a running loop: that loop is busy running us, so use another thread's.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def _is_async(fn: ToolFn) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _signature(fn: ToolFn) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: skip the bind check
        return None


def _accepts_keyword(signature: inspect.Signature, keyword: str) -> bool:
    param = signature.parameters.get(keyword)
    return param is not None and param.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


# -- arguments ---------------------------------------------------------------------------------


def parse_arguments(raw: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """The call's arguments as a dict. Raises ``ValueError`` saying what is wrong with them.

    Accepts a mapping or a JSON string; an empty string is no arguments.
    """
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str):
        raise ValueError(f"arguments must be a JSON object, got {type(raw).__name__}")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {_json_type(value)}")
    return value


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> list[str]:
    """Problems with ``arguments`` against a JSON schema; empty when they fit.

    A small subset, enough to catch what models get wrong: ``type`` (one or a list),
    ``required``, ``properties``, ``additionalProperties: false``, ``items``, ``enum``,
    ``anyOf``/``oneOf``. Other keywords are not checked.
    """
    problems: list[str] = []
    _check(schema, arguments, "", problems)
    return problems


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
}


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__


def _label(path: str) -> str:
    return "arguments" if not path else f"{path!r}"


def _check(schema: Any, value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(schema, Mapping):
        return
    for combinator in ("anyOf", "oneOf"):
        branches = schema.get(combinator)
        if isinstance(branches, list) and branches:
            results = [_problems_at(b, value, path) for b in branches]
            if any(not r for r in results):
                continue
            # Report the branch meant for this kind of value, if just one is; else the kinds.
            fitting = [r for b, r in zip(branches, results, strict=True) if _type_fits(b, value)]
            if len(fitting) == 1:
                problems.extend(fitting[0])
            else:
                kinds = " or ".join(_kind(b) for b in branches)
                problems.append(f"{_label(path)} must be {kinds}, got {_json_type(value)}")
            return
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        known = [n for n in names if n in _JSON_TYPES]
        if known and not any(_JSON_TYPES[n](value) for n in known):
            problems.append(f"{_label(path)} must be {' or '.join(known)}, got {_json_type(value)}")
            return
    enum_values = schema.get("enum")
    if isinstance(enum_values, list) and not any(_same_json(value, e) for e in enum_values):
        allowed = ", ".join(json.dumps(e) for e in enum_values)
        problems.append(
            f"{_label(path)} must be one of {allowed}, got {json.dumps(value, default=str)}"
        )
        return
    if isinstance(value, dict):
        _check_object(schema, value, path, problems)
    elif isinstance(value, list | tuple):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _check(items, item, f"{path}[{i}]", problems)


def _problems_at(schema: Any, value: Any, path: str) -> list[str]:
    problems: list[str] = []
    _check(schema, value, path, problems)
    return problems


def _type_fits(schema: Any, value: Any) -> bool:
    expected = schema.get("type") if isinstance(schema, Mapping) else None
    if expected is None:
        return False
    names = [expected] if isinstance(expected, str) else list(expected)
    return any(_JSON_TYPES[n](value) for n in names if n in _JSON_TYPES)


def _kind(schema: Any) -> str:
    """A schema's JSON type(s) for messages: ``string``, ``integer/null``, ``any``."""
    if not isinstance(schema, Mapping):
        return "any"
    expected = schema.get("type")
    if isinstance(expected, str):
        return expected
    if isinstance(expected, list):
        return "/".join(str(e) for e in expected)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        return "/".join(_kind(b) for b in branches)
    return "any"


def _same_json(a: Any, b: Any) -> bool:
    # Python says True == 1; JSON does not. 1 and 1.0 are the same JSON number.
    if _JSON_TYPES["number"](a) and _JSON_TYPES["number"](b):
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], path: str, problems: list[str]
) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    for key in schema.get("required") or ():
        if key not in value:
            if path:
                problems.append(f"{_label(path)} is missing required key {key!r}")
            else:
                problems.append(f"missing required argument {key!r}")
    for key, item in value.items():
        child = f"{path}.{key}" if path else str(key)
        if key in properties:
            _check(properties[key], item, child, problems)
            continue
        extra = schema.get("additionalProperties", True)
        if extra is False:
            if path:
                problems.append(f"{_label(path)} has unexpected key {key!r}")
            else:
                problems.append(f"unexpected argument {key!r}")
        elif isinstance(extra, Mapping):
            _check(extra, item, child, problems)


def _expected(schema: Mapping[str, Any]) -> str:
    """`` Expected: path (string, required), limit (integer).`` for the model's next try."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return ""
    required = set(schema.get("required") or ())
    parts = []
    for key, prop in properties.items():
        parts.append(f"{key} ({_kind(prop)}{', required' if key in required else ''})")
    return " Expected: " + ", ".join(parts) + "."


# -- results -----------------------------------------------------------------------------------


def result_text(value: Any) -> str:
    """A tool's return value as the text the model reads: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(dump) and not isinstance(value, type):
        try:
            value = dump(mode="json")
        except Exception:
            value = str(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular structures and the like
        return str(value)


# -- schema derivation -------------------------------------------------------------------------

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Notes?)\s*:\s*$"
)
_GOOGLE_PARAM = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^\s*:param\s+(?:[\w\[\], |]+\s+)?(\w+)\s*:\s*(.*)$")


def _summary(fn: ToolFn) -> str:
    """The docstring up to its first section (``Args:``, ``:param``...), on one line."""
    doc = inspect.getdoc(fn) or ""
    lines: list[str] = []
    for line in doc.splitlines():
        if _SECTION.match(line) or line.lstrip().startswith(":"):
            break
        lines.append(line.strip())
    return " ".join(" ".join(lines).split())


def _param_docs(fn: ToolFn) -> dict[str, str]:
    doc = inspect.getdoc(fn) or ""
    docs: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in doc.splitlines():
        rest = _REST_PARAM.match(line)
        if rest:
            current = rest.group(1)
            docs[current] = rest.group(2).strip()
            continue
        section = _SECTION.match(line)
        if section:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters", "Params")
            current = None
            continue
        if not in_args:
            continue
        match = _GOOGLE_PARAM.match(line)
        if match:
            current = match.group(1).lstrip("*")
            docs[current] = match.group(2).strip()
        elif current is not None and line.strip():
            docs[current] = f"{docs[current]} {line.strip()}".strip()
        elif not line.strip():
            current = None
    return docs


def schema_from_function(fn: ToolFn) -> dict[str, Any]:
    """A JSON object schema of ``fn``'s parameters, for the model.

    Types come from the hints (``str``, ``int``, ``float``, ``bool``, ``None``, ``list[T]``,
    ``dict[str, T]``, ``Literal``, ``Enum``, unions, ``Annotated[T, "description"]``,
    ``TypedDict``); a parameter without a default is required; descriptions come from the
    docstring's ``Args:`` section or ``:param x:`` lines. ``idempotency_key``, ``tool_call_id``
    and ``*args`` are left out; ``**kwargs`` allows extra keys. A positional-only parameter
    without a default raises ``ValueError``: the model passes arguments by name.
    """
    signature = _signature(fn)
    if signature is None:
        return {"type": "object", "properties": {}, "additionalProperties": True}
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        hints = {}
    docs = _param_docs(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    additional = False
    for param in signature.parameters.values():
        if (
            param.name in (IDEMPOTENCY_KEY, TOOL_CALL_ID)
            or param.kind is inspect.Parameter.VAR_POSITIONAL
        ):
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            additional = True
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            if param.default is inspect.Parameter.empty:
                raise ValueError(
                    f"parameter {param.name!r} of {getattr(fn, '__name__', fn)!r} is "
                    "positional-only; the model passes arguments by name"
                )
            continue
        annotation = hints.get(param.name, param.annotation)
        prop = _type_schema(annotation)
        if param.name in docs and "description" not in prop:
            prop["description"] = docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        else:
            default = param.default.value if isinstance(param.default, enum.Enum) else param.default
            if _is_json_value(default):
                prop["default"] = default
        properties[param.name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": additional,
    }


def _is_json_value(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


_SIMPLE: dict[Any, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
    None: "null",
    pathlib.Path: "string",
    pathlib.PurePath: "string",
}

_ARRAY_ORIGINS: tuple[Any, ...] = (
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.Set,
    collections.abc.Iterable,
    collections.abc.Collection,
)
_OBJECT_ORIGINS: tuple[Any, ...] = (dict, collections.abc.Mapping)


def _type_schema(tp: Any) -> dict[str, Any]:
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema = _type_schema(args[0])
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = notes[0]
        return schema
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if origin is Literal:
        return _enum_schema(list(args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([member.value for member in tp])
    if origin is typing.Union or origin is types.UnionType:
        branches = [_type_schema(a) for a in args]
        if any(b == {} for b in branches):
            return {}
        if all(set(b) == {"type"} and isinstance(b["type"], str) for b in branches):
            return {"type": list(dict.fromkeys(b["type"] for b in branches))}
        return {"anyOf": branches}
    if tp in _ARRAY_ORIGINS or origin in _ARRAY_ORIGINS:
        schema = {"type": "array"}
        if args and (origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)):
            items = _type_schema(args[0])
            if items:
                schema["items"] = items
        return schema
    if tp in _OBJECT_ORIGINS or origin in _OBJECT_ORIGINS:
        schema = {"type": "object"}
        if len(args) == 2:
            values = _type_schema(args[1])
            if values:
                schema["additionalProperties"] = values
        return schema
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        return {
            "type": "object",
            "properties": {k: _type_schema(v) for k, v in hints.items()},
            "required": sorted(getattr(tp, "__required_keys__", ())),
        }
    if isinstance(tp, type) and issubclass(tp, str):
        return {"type": "string"}
    return {}


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": values}
    kinds = {_json_type(v) for v in values}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema
