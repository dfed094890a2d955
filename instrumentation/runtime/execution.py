"""Running one tool call: check it, then let the retry machine decide while a driver calls.

:func:`prepare` turns a model's call into what the function is called with (or into the error
the model gets back: unknown tool, invalid arguments); :class:`ToolCallHooks` turns the retry
machine's decisions (:class:`~loopwatch.instrumentation.runtime.retry.RetryState`) into a
:class:`~loopwatch.instrumentation.runtime.toolspec.ToolOutcome`. Nothing here raises for a tool's
problems: the model reads them (docs/tools.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .arguments import expected_arguments, parse_arguments, validate_arguments
from .drops import record_drop
from .outcomes import ErrorResult, tool_error
from .retry import ErrorInfo, RetryPolicy, RetryState, classify
from .toolspec import (
    CIRCUIT_OPEN,
    IDEMPOTENCY_KEY,
    INVALID_ARGUMENTS,
    INVALID_RESULT,
    TOOL_CALL_ID,
    UNKNOWN_TOOL,
    RetryEvent,
    ToolOutcome,
    ToolSpec,
)
from .types import ToolCall

__all__ = ["Prepared", "ToolCallHooks", "error_outcome", "prepare", "result_text", "run_awaitable"]


@dataclass(slots=True)
class Prepared:
    """A call that passed its checks: the spec, the parsed arguments and the retry policy."""

    spec: ToolSpec
    call: ToolCall
    arguments: dict[str, Any]
    policy: RetryPolicy
    key: str | None = None
    """The idempotency key, made at the first attempt (never for a call the breaker refused)."""


def prepare(
    specs: Mapping[str, ToolSpec],
    signatures: Mapping[str, inspect.Signature | None],
    call: ToolCall,
    default_policy: RetryPolicy,
) -> Prepared | ToolOutcome:
    """The call ready to run, or the error outcome the model gets back instead."""
    spec = specs.get(call.name)
    if spec is None:
        known = ", ".join(specs) or "none"
        message = f"unknown tool {call.name!r}; available tools: {known}"
        return error_outcome(call, UNKNOWN_TOOL, message)
    try:
        arguments = parse_arguments(call.arguments)
    except ValueError as exc:
        return error_outcome(call, INVALID_ARGUMENTS, f"invalid arguments for {spec.name}: {exc}")
    arguments = _without_key(arguments, spec)
    problems = validate_arguments(spec.parameters, arguments)
    signature = signatures.get(spec.name)
    if not problems and signature is not None:
        try:
            signature.bind(**arguments, **_filled_in(spec, "", ""))
        except TypeError as exc:
            problems = [str(exc)]
    if problems:
        return error_outcome(
            call,
            INVALID_ARGUMENTS,
            f"invalid arguments for {spec.name}: {'; '.join(problems)}."
            f"{expected_arguments(spec.parameters)}",
        )
    return Prepared(spec, call, arguments, spec.retry or default_policy)


class ToolCallHooks:
    """What a tool call makes of the retry machine's decisions: always a ``ToolOutcome``."""

    __slots__ = ("_key_factory", "_kwargs", "_on_retry", "prepared")

    def __init__(
        self,
        prepared: Prepared,
        key_factory: Callable[[], str],
        on_retry: Callable[[RetryEvent], None] | None,
    ) -> None:
        self.prepared = prepared
        self._key_factory = key_factory
        self._on_retry = on_retry
        self._kwargs: dict[str, Any] | None = None

    def kwargs(self) -> dict[str, Any]:
        """What the function is called with; the same key on every attempt."""
        if self._kwargs is None:
            p = self.prepared
            kwargs = dict(p.arguments)
            if p.spec.accepts_idempotency_key:
                p.key = self._key_factory()
                kwargs[IDEMPOTENCY_KEY] = p.key
            if p.spec.accepts_call_id:
                kwargs[TOOL_CALL_ID] = p.call.id
            self._kwargs = kwargs
        return self._kwargs

    def classify(self, exc: Exception) -> ErrorInfo:
        return classify(exc)

    def refused(self, state: RetryState[ToolOutcome]) -> ToolOutcome:
        use, p = state.breaker, self.prepared
        assert use is not None  # only a registry with a breaker refuses
        return error_outcome(
            p.call,
            CIRCUIT_OPEN,
            f"circuit open for tool {p.spec.name!r} after "
            f"{use.breaker.failures(use.name)} consecutive failures; next probe in "
            f"{use.breaker.retry_in(use.name):.1f} s",
            transient=True,
            arguments=p.arguments,
        )

    def retrying(self, state: RetryState[ToolOutcome], info: ErrorInfo, delay: float) -> None:
        if self._on_retry is None:
            return
        p = self.prepared
        event = RetryEvent(
            tool=p.spec.name,
            attempt=state.attempt,
            delay_s=delay,
            error_code=info.code,
            idempotency_key=p.key,
            call_id=p.call.id,
            error_message=info.message,
        )
        try:
            self._on_retry(event)
        except Exception:  # a telemetry hook must not change the tool call's outcome
            record_drop("retry_callback")

    def gave_up(
        self, state: RetryState[ToolOutcome], info: ErrorInfo, exc: Exception
    ) -> ToolOutcome:
        attempts, p = state.attempt, self.prepared
        message = info.message if attempts == 1 else f"{info.message} (after {attempts} attempts)"
        return error_outcome(
            p.call,
            info.code,
            message,
            transient=info.transient,
            attempts=attempts,
            key=p.key,
            arguments=p.arguments,
        )

    def succeeded(self, state: RetryState[ToolOutcome], value: Any) -> ToolOutcome:
        p, attempts = self.prepared, state.attempt
        try:
            content = value.content if isinstance(value, ErrorResult) else result_text(value)
            err = tool_error(value, error_prefix=p.spec.error_prefix)
        except Exception as exc:  # e.g. a __str__/__repr__ that raises
            return error_outcome(
                p.call,
                INVALID_RESULT,
                f"{p.spec.name} returned a {type(value).__name__} that could not be "
                f"turned into text ({type(exc).__name__}: {exc})",
                attempts=attempts,
                key=p.key,
                arguments=p.arguments,
            )
        return ToolOutcome(
            call=p.call,
            ok=err is None,
            content=content,
            value=value,
            error_code=None if err is None else err.code,
            error_message=None if err is None else err.message,
            attempts=attempts,
            idempotency_key=p.key,
            arguments=p.arguments,
        )


def error_outcome(
    call: ToolCall,
    code: str,
    message: str,
    *,
    transient: bool = False,
    attempts: int = 0,
    key: str | None = None,
    arguments: dict[str, Any] | None = None,
) -> ToolOutcome:
    """A failed call's outcome; the model reads ``{"error": message, "code": code}``."""
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


def run_awaitable(awaitable: Awaitable[Any]) -> Any:
    """Run an async tool's awaitable to completion from sync code (a private event loop)."""
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
