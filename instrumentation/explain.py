"""The catalogue of explanations: how a stop names its step, its call and its evidence.

One place for the wording, so the guard, a replay and an import say the same thing. Values are
cut to ``width`` characters: an explanation is a sentence, not a dump.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .reasons import StopReason
from .types import ToolCall

__all__ = [
    "ADVICE_BY_CODE",
    "ADVICE_BY_REASON",
    "advice",
    "describe",
    "describe_call",
    "preview",
    "step_list",
]

ADVICE_BY_CODE: dict[str, str] = {
    "NOT_FOUND": "Check the path or name, or list what exists first.",
    "HTTP_404": "Check the path or name, or list what exists first.",
    "UNKNOWN_TOOL": "The model called a tool that is not registered: "
    "check the tool names and descriptions it is given.",
    "INVALID_ARGUMENTS": "Check the tool's parameter schema and description: "
    "the model keeps sending arguments it rejects.",
    "PERMISSION": "The tool lacks permission: grant it, or give the model a tool it may use.",
    "TIMEOUT": "The tool keeps timing out: check the service it calls.",
    "CIRCUIT_OPEN": "The tool's service is failing: check it before running more agents on it.",
}
"""Advice for an error code, where the code says more than the detector."""

ADVICE_BY_REASON: dict[StopReason, str] = {
    StopReason.REPEATED_ACTION: "Tell the model what the result means, "
    "or mark the tool repeat_exempt if repeating it is legitimate.",
    StopReason.REPEATED_TOOL_CALL: "The result gave the model nothing new: "
    "make the tool's result or description say what to do instead.",
    StopReason.REPEATED_ERROR: "Fix the cause of the error, "
    "or make the error message tell the model what to change.",
    StopReason.TOOL_FAILURES: "Check the tools' services and error messages.",
    StopReason.NO_PROGRESS: "Check what the model is waiting for, "
    "or raise max_idle_turns for this task type.",
}
"""Advice for a detector's stop."""


def advice(reason: StopReason, code: str | None = None) -> str:
    """The advice for a stop: the error code's, else the detector's."""
    return ADVICE_BY_CODE.get(code or "", ADVICE_BY_REASON.get(reason, ""))


def preview(text: str, width: int = 60) -> str:
    """``repr`` of ``text`` on one line, cut to ``width`` characters."""
    r = repr(" ".join(text.split()))
    return r if len(r) <= width else r[: width - 4] + "...'"


def describe(name: str, arguments: Any, width: int = 60) -> str:
    """``name(key='value', ...)``, each value's repr cut to ``width`` characters."""
    if isinstance(arguments, str):
        text = arguments if len(arguments) <= width else arguments[: width - 3] + "..."
        return f"{name}({text})"
    if not isinstance(arguments, dict):
        return f"{name}(...)"
    parts = []
    for key, value in arguments.items():
        r = repr(value)
        if len(r) > width:
            r = r[: width - 3] + "..."
        parts.append(f"{key}={r}")
    return f"{name}({', '.join(parts)})"


def describe_call(call: ToolCall, width: int = 60) -> str:
    """``name(key='value', ...)``, each value's repr cut to ``width`` characters."""
    return describe(call.name, call.arguments, width)


def step_list(steps: Sequence[int]) -> str:
    """``1, 3, 5`` — or ``2-6`` for consecutive steps."""
    if len(steps) > 2 and list(steps) == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    return ", ".join(str(s) for s in steps)
