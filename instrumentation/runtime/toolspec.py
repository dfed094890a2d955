"""What the tool layer hands around: a registered tool's spec, one call's outcome, a retry.

``ToolOutcome`` is how one logical tool call ended, retries included (docs/tools.md).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .backoff import RetryPolicy
from .types import ToolCall

__all__ = [
    "CIRCUIT_OPEN",
    "IDEMPOTENCY_KEY",
    "INVALID_ARGUMENTS",
    "INVALID_RESULT",
    "TOOL_CALL_ID",
    "TOOL_NAME_PATTERN",
    "UNKNOWN_TOOL",
    "RetryEvent",
    "ToolFn",
    "ToolOutcome",
    "ToolSpec",
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
    """How one logical tool call ended, retries included. Never an exception.

    The one record of a tool call from execution to span to replay (docs/architecture.md, "One
    tool call's record"): the registry returns it, the guard reads it, the observer gets it
    (with the fingerprints filled in: ``ToolRecord`` is this class) and a replay is fed it.
    Build it with keywords; fields after ``content`` have defaults.
    """

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
    fingerprint: str = ""
    """Short hash of the call (name + stable JSON of the arguments, volatile text normalized);
    filled on the record an observer gets, empty otherwise."""
    result_fingerprint: str = ""
    """Short hash of ``content`` as compared; filled like ``fingerprint``."""
    error_fingerprint: str | None = None
    """Short hash of the failure (tool, code, normalized message); filled like ``fingerprint``.
    A replay takes it as the failure's identity (``repeated_error``) when it is there."""

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
