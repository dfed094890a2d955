"""The reference loop's logic, written once: a generator that yields what to do next.

:func:`loop_steps` asks the guard at every point and yields a :class:`ModelCall` or a
:class:`ToolRun`; a driver performs it and sends the result back (or throws the exception the
call raised, or :class:`DeadlineHit` when the run's deadline cut it off). ``run`` and ``arun``
are two thin drivers of it, sync and async (tenacity's pattern; docs/runtime.md, "run and
arun")::

    machine = loop_steps(guard, messages, tools, model_name)
    action = next(machine)
    while True:
        result = perform(action)             # model.complete(...) or registry.execute(...)
        action = machine.send(result)        # StopIteration: the guard has decided

Each model call gets a copy of the conversation (a snapshot: a client that keeps it sees the
conversation as it was sent), in both drivers.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .decisions import Action
from .guard import LoopGuard
from .types import Message, ModelResponse, ToolCall

__all__ = ["DeadlineHit", "LoopState", "ModelCall", "ToolRun", "loop_steps"]


@dataclass(frozen=True, slots=True)
class ModelCall:
    """Call the model with ``messages`` (a copy) offering ``tools``; send back its response."""

    messages: list[Message]
    tools: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """Run ``call`` (``on_retry=guard.record_retry``); send back its outcome."""

    call: ToolCall


class DeadlineHit(Exception):
    """Thrown into the machine when the run's deadline cut off the call in progress."""


class LoopState:
    """What the machine leaves behind for its driver: the model's exception, if one ended it."""

    __slots__ = ("cause",)

    def __init__(self) -> None:
        self.cause: BaseException | None = None


def not_a_response(value: object) -> TypeError:
    """The error for a model whose ``complete()`` returned something else."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return TypeError(
        f"the model's complete() must return a ModelResponse, got {type(value).__name__}: {shown}"
    )


def _rejection(call: ToolCall, feedback: str | None) -> Message:
    content = json.dumps({"error": feedback or "not complete", "code": "COMPLETION_REJECTED"})
    return Message("tool", content, tool_call_id=call.id)


Step = Generator[ModelCall | ToolRun, Any, None]


def loop_steps(
    guard: LoopGuard,
    messages: list[Message],
    tools: Sequence[Mapping[str, Any]],
    model_name: str | None,
    state: LoopState,
) -> Step:
    """The loop, one action at a time, until the guard decides (docs/runtime.md)."""
    while True:
        d = guard.before_step()
        if d.done:
            return
        if d.feedback:  # the last-step notice, or a nudge
            messages.append(Message("user", d.feedback))
        guard.model_call_started(model_name)
        try:
            response = yield ModelCall(list(messages), tools if d.tools_allowed else [])
            if not isinstance(response, ModelResponse):
                raise not_a_response(response)
        except DeadlineHit:
            guard.model_call_failed(TimeoutError("the run's deadline passed"), deadline=True)
            return
        except Exception as exc:
            guard.model_call_failed(exc)
            state.cause = exc
            return
        messages.append(response.message)
        d = guard.after_model(response)
        if d.action is Action.RUN_TOOLS:
            yield from _tool_calls(guard, messages, response.message.tool_calls)
        elif d.action is Action.REJECTED:
            messages.append(Message("user", d.feedback))
        if guard.end_step().done:
            return


def _tool_calls(guard: LoopGuard, messages: list[Message], calls: Sequence[ToolCall]) -> Step:
    for call in calls:
        d = guard.before_tool(call)
        if d.done:
            return
        if d.action is Action.REJECTED:
            messages.append(_rejection(call, d.feedback))
            continue
        try:
            outcome = yield ToolRun(call)
        except DeadlineHit:
            guard.tool_interrupted(call)
            return
        messages.append(Message("tool", outcome.content, tool_call_id=call.id))
        if guard.after_tool(call, outcome).done:
            return
