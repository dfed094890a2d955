"""The tool registry: register plain functions, describe them to the model, run their calls.

A failing, unknown or wrongly-called tool never raises into the loop: the model gets
``{"error": ..., "code": ...}`` back and can fix its arguments or pick another tool.
Transient failures are retried here, in this one layer, with backoff and full jitter
(:class:`~loopwatch.instrumentation.runtime.retry.RetryPolicy`); a tool whose calls keep
failing is cut off by a per-tool
:class:`~loopwatch.instrumentation.runtime.retry.CircuitBreaker`. The decisions are the retry
machine's (:class:`~loopwatch.instrumentation.runtime.retry.RetryState`): ``execute`` and
``aexecute`` only make the calls and the sleeps (docs/tools.md).
"""

from __future__ import annotations

import enum
import inspect
import random
import time
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Literal, overload

from .execution import ToolCallHooks, prepare, run_awaitable
from .retry import (
    BreakerUse,
    CircuitBreaker,
    RetryPolicy,
    RetryState,
    acall_with_retries,
    call_with_retries,
)
from .toolschema import schema_from_function, signature_of, summary
from .toolspec import (
    IDEMPOTENCY_KEY,
    TOOL_CALL_ID,
    TOOL_NAME_PATTERN,
    RetryEvent,
    ToolFn,
    ToolOutcome,
    ToolSpec,
)
from .types import ToolCall

__all__ = ["ToolRegistry"]


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
        self._breaker_uses: dict[str, BreakerUse] = {}

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
        signature = signature_of(fn)
        accepts_key = signature is not None and _accepts_keyword(signature, IDEMPOTENCY_KEY)
        accepts_id = signature is not None and _accepts_keyword(signature, TOOL_CALL_ID)
        spec = ToolSpec(
            name=tool_name,
            fn=fn,
            description=description if description is not None else summary(fn),
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
        machine = self._machine(call, on_retry)
        if isinstance(machine, ToolOutcome):
            return machine
        hooks, state = machine
        fn = hooks.prepared.spec.fn

        def attempt() -> Any:
            value = fn(**hooks.kwargs())
            return run_awaitable(value) if inspect.isawaitable(value) else value

        return call_with_retries(state, attempt, self._sleep)

    async def aexecute(
        self, call: ToolCall, *, on_retry: Callable[[RetryEvent], None] | None = None
    ) -> ToolOutcome:
        """Async :meth:`execute`: awaits async tools, runs sync ones in a worker thread.

        Cancellation (a run's deadline) propagates: it is not a tool failure.
        """
        import asyncio  # only async callers pay for it

        machine = self._machine(call, on_retry)
        if isinstance(machine, ToolOutcome):
            return machine
        hooks, state = machine
        spec = hooks.prepared.spec

        async def attempt() -> Any:
            if spec.is_async:
                value = await spec.fn(**hooks.kwargs())
            else:
                value = await asyncio.to_thread(spec.fn, **hooks.kwargs())
            return await value if inspect.isawaitable(value) else value

        return await acall_with_retries(state, attempt, self._asleep)

    def _machine(
        self, call: ToolCall, on_retry: Callable[[RetryEvent], None] | None
    ) -> tuple[ToolCallHooks, RetryState[ToolOutcome]] | ToolOutcome:
        prepared = prepare(self._specs, self._signatures, call, self.retry)
        if isinstance(prepared, ToolOutcome):
            return prepared
        hooks = ToolCallHooks(prepared, self._key_factory, on_retry)
        state = RetryState(
            hooks,
            prepared.policy,
            breaker=self._breaker_use(prepared.spec.name),
            retryable=prepared.spec.retryable,
            rng=self._rng,
        )
        return hooks, state

    def _breaker_use(self, name: str) -> BreakerUse | None:
        # One per tool, made again only when the breaker or trip_on_permanent was changed.
        breaker = self.breaker
        if breaker is None:
            return None
        use = self._breaker_uses.get(name)
        if (
            use is None
            or use.breaker is not breaker
            or (use.trip_on_permanent is not self.trip_on_permanent)
        ):
            use = BreakerUse(breaker, name, trip_on_permanent=self.trip_on_permanent)
            self._breaker_uses[name] = use
        return use


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


def _is_async(fn: ToolFn) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _accepts_keyword(signature: inspect.Signature, keyword: str) -> bool:
    param = signature.parameters.get(keyword)
    return param is not None and param.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )
