"""The tool layer: register plain functions, describe them to the model, run the calls it asks for.

A failing, unknown or wrongly-called tool never raises into the loop: the model gets
``{"error": ..., "code": ...}`` back and can fix its arguments or pick another tool.
Transient failures are retried in this one layer, with backoff and full jitter; a tool whose
calls keep failing is cut off by a per-tool circuit breaker (docs/tools.md).

This module is the public face; the parts live by concern: :mod:`.toolspec` (what is handed
around), :mod:`.registry` (``ToolRegistry``), :mod:`.execution` (one call through the retry
machine), :mod:`.arguments` (the one argument parser and the schema check) and
:mod:`.toolschema` (schemas derived from signatures).
"""

from __future__ import annotations

from .arguments import InvalidArguments, parse_arguments, validate_arguments
from .execution import result_text
from .outcomes import ErrorResult
from .registry import ToolRegistry
from .toolschema import schema_from_function
from .toolspec import (
    CIRCUIT_OPEN,
    IDEMPOTENCY_KEY,
    INVALID_ARGUMENTS,
    INVALID_RESULT,
    TOOL_CALL_ID,
    TOOL_NAME_PATTERN,
    UNKNOWN_TOOL,
    RetryEvent,
    ToolOutcome,
    ToolSpec,
)

__all__ = [
    "CIRCUIT_OPEN",
    "IDEMPOTENCY_KEY",
    "INVALID_ARGUMENTS",
    "INVALID_RESULT",
    "TOOL_CALL_ID",
    "TOOL_NAME_PATTERN",
    "UNKNOWN_TOOL",
    "ErrorResult",
    "InvalidArguments",
    "RetryEvent",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "parse_arguments",
    "result_text",
    "schema_from_function",
    "validate_arguments",
]
