"""The catalogue of explanations: how a stop names its step, its call and its evidence.

One place for the wording (the guard's stops here, the detectors' evidence in ``detectors.py``
through :func:`describe`, :func:`preview` and :func:`step_list`), so the guard, a replay and an
import say the same thing. Values are cut to ``width`` characters: an explanation is a sentence,
not a dump.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .reasons import StopReason
from .types import ToolCall

__all__ = [
    "ADVICE_BY_CODE",
    "ADVICE_BY_REASON",
    "CANCELLED",
    "INTERRUPTED",
    "NO_DECISION",
    "advice",
    "approval_refused",
    "budget_used_up",
    "circuit_open",
    "completion_rejected",
    "describe",
    "describe_call",
    "guardrail_vetoed",
    "interrupted",
    "last_call_note",
    "max_steps_used",
    "no_approver",
    "output_truncated",
    "preview",
    "raised",
    "refused",
    "signal_without_call",
    "step_list",
    "stopped",
    "tool_cap_reached",
    "unknown_signal",
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


# --- the guard's stops, in words ------------------------------------------------------------
# Every explanation starts with where the run stopped: "Stopped at step N: ...", "Stopped after
# step N: ..." (between steps) or "Stopped at step N before <call>: ..." (a call never ran).


def stopped(step: int, text: str, *, after: bool = False, before: ToolCall | None = None) -> str:
    """``Stopped at step N: text`` (``after``: between steps; ``before``: the call refused)."""
    if after:
        return f"Stopped after step {step}: {text}"
    if before is not None:
        return f"Stopped at step {step} before {describe_call(before)}: {text}"
    return f"Stopped at step {step}: {text}"


def last_call_note(call: ToolCall | None, step: int) -> str:
    """`` Last call: name(...) at step N.`` (empty without a call)."""
    return "" if call is None else f" Last call: {describe_call(call)} at step {step}."


CANCELLED = "the run was cancelled."
INTERRUPTED = "the run was interrupted."


def max_steps_used(max_steps: int, note: str) -> str:
    return (
        f"all {max_steps} steps (max_steps={max_steps}) are used and the model has not answered."
        f"{note} Raise max_steps for this task type if successful runs need more, or split the "
        "task."
    )


def budget_used_up(budget: str, whose: str, used: str, field: str, limit: object) -> str:
    """``the <budget> budget<whose> is used up (<used> of <field>=<limit>).``"""
    return f"the {budget} budget{whose} is used up ({used} of {field}={limit})."


def tool_cap_reached(name: str, cap: int) -> str:
    return (
        f"{name} was called {cap} times, its cap (max_calls_per_tool). "
        "Raise the cap if the task needs more."
    )


def signal_without_call(signal: str | None) -> str:
    return f"the provider signalled {signal!r} but the response has no tool call."


def output_truncated(signal: str | None) -> str:
    return (
        f"the model's output hit its length limit (stop signal {signal!r}); the partial text is "
        "kept. Raise the model's output token limit, or ask for a shorter answer."
    )


def refused(signal: str | None) -> str:
    return f"the provider refused or filtered the answer (stop signal {signal!r})."


def unknown_signal(signal: str | None) -> str:
    return f"unknown provider stop signal {signal!r}; only tool-call signals continue a run."


def guardrail_vetoed(call: ToolCall, why: str) -> str:
    return f"a guardrail vetoed {describe_call(call)}: {why}."


def no_approver(call: ToolCall) -> str:
    return f"{describe_call(call)} requires approval and no approver is set."


def approval_refused(call: ToolCall) -> str:
    return f"the approver refused {describe_call(call)}."


def circuit_open(call: ToolCall) -> str:
    return (
        f"{describe_call(call)} was refused because the circuit breaker of {call.name} is open. "
        f"{ADVICE_BY_CODE['CIRCUIT_OPEN']}"
    )


def interrupted(where: str, deadline: str, *, advise: bool = False) -> str:
    tip = " Raise max_wall_s if successful runs need longer." if advise else ""
    return f"{where} was interrupted at the deadline ({deadline}).{tip}"


def raised(where: str, error: BaseException) -> str:
    text = str(error)
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return f"{where} raised {text}."


def completion_rejected(rejects: int, max_rejects: int, unmet: Sequence[str]) -> str:
    return (
        f"the completion check rejected the answer {rejects} times "
        f"(max_completion_rejects={max_rejects}); still unmet: {'; '.join(unmet)}."
    )


NO_DECISION = "the loop ended without a stop decision from the guard."
