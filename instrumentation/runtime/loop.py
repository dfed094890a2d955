"""The reference agent loop, sync (:func:`run`) and async (:func:`arun`), driven by a LoopGuard.

Both behave the same. A non-success stop raises :class:`AgentLoopError` (a subclass by
outcome) carrying the partial result; ``raise_on_stop=False`` returns the result instead.
``arun`` also interrupts a model or tool call that is still running at the wall-clock deadline.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from .errors import AgentLoopError
from .guard import (
    Action,
    Approver,
    Cancel,
    Decision,
    Guardrail,
    LoopGuard,
    ProgressSignal,
    Verifier,
)
from .limits import LIMITS_ENV, LimitPolicy, LoopLimits, resolve_limits, resolve_shadow
from .observer import ObserverFactory, RunObserver
from .reasons import StopReason
from .tools import RetryEvent, ToolOutcome
from .types import Message, ModelResponse, RunResult, ToolCall

__all__ = [
    "LIMITS_ENV",
    "AsyncModel",
    "AsyncTools",
    "Model",
    "Tools",
    "arun",
    "resolve_limits",
    "run",
]

_T = TypeVar("_T")


@runtime_checkable
class Model(Protocol):
    """A chat model: one call with the conversation so far and the tools it may call."""

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse: ...


@runtime_checkable
class AsyncModel(Protocol):
    """An async chat model. ``arun`` prefers ``acomplete``; a sync model runs in a worker thread."""

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse: ...


class Tools(Protocol):
    """What ``run`` needs of a tool registry (``ToolRegistry`` fits)."""

    def get(self, name: str) -> Any: ...

    def specs(self) -> list[dict[str, Any]]: ...

    def execute(
        self, call: ToolCall, *, on_retry: Callable[[RetryEvent], None] | None = None
    ) -> ToolOutcome: ...


class AsyncTools(Protocol):
    """What ``arun`` needs of a tool registry (``ToolRegistry`` fits)."""

    def get(self, name: str) -> Any: ...

    def specs(self) -> list[dict[str, Any]]: ...

    async def aexecute(
        self, call: ToolCall, *, on_retry: Callable[[RetryEvent], None] | None = None
    ) -> ToolOutcome: ...


UserInput = str | Sequence[Message] | None
"""The user's text, or the conversation so far (earlier turns, ending with the new message)."""


def _resumed(resume: RunResult | str | Mapping[str, Any] | None) -> RunResult | None:
    if resume is None or isinstance(resume, RunResult):
        return resume
    try:
        if isinstance(resume, str):
            return RunResult.from_json(resume)
        if isinstance(resume, Mapping):
            return RunResult.from_dict(dict(resume))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"resume= could not be read as a saved run ({type(exc).__name__}: {exc}); pass a "
            "RunResult, or the text of RunResult.to_json()"
        ) from exc
    raise TypeError(
        f"resume= takes a RunResult or the text of RunResult.to_json() (load it with "
        f"RunResult.from_json), got {type(resume).__name__}"
    )


def _initial_messages(
    system: str, user_input: UserInput, resume: RunResult | None
) -> list[Message]:
    messages: list[Message] = []
    if resume is not None:
        messages = list(resume.messages)
        answered = {m.tool_call_id for m in messages if m.role == "tool"}
        # A stopped run may end with calls that never ran; providers reject unanswered calls.
        for m in list(messages):
            for call in m.tool_calls:
                if call.id not in answered:
                    messages.append(
                        Message(
                            "tool",
                            json.dumps(
                                {
                                    "error": "not run: the previous run stopped "
                                    f"({resume.stop_reason.value})",
                                    "code": "NOT_RUN",
                                }
                            ),
                            tool_call_id=call.id,
                        )
                    )
    if isinstance(user_input, str):
        if resume is None and system:
            messages.append(Message("system", system))
        messages.append(Message("user", user_input))
    elif user_input is not None:
        conversation = list(user_input)
        for i, m in enumerate(conversation):
            if not isinstance(m, Message):
                raise TypeError(
                    "user_input takes the user's text or a list of Message, got "
                    f"{type(m).__name__} at index {i}"
                )
        if resume is None and system and not (conversation and conversation[0].role == "system"):
            messages.append(Message("system", system))
        messages.extend(conversation)
    elif resume is None and system:
        messages.append(Message("system", system))
    if not any(m.role != "system" for m in messages):
        raise ValueError("user_input is required unless resume= is given")
    return messages


def _not_a_response(value: object) -> TypeError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return TypeError(
        f"the model's complete() must return a ModelResponse, got {type(value).__name__}: {shown}"
    )


def _provider_name(model: object) -> str | None:
    value = getattr(model, "provider", None)
    return value if isinstance(value, str) and value else None


def _model_name(model: object) -> str | None:
    for attr in ("model", "model_name", "name"):
        value = getattr(model, attr, None)
        if isinstance(value, str):
            return value
    return None


def _rejection(call: ToolCall, feedback: str | None) -> Message:
    content = json.dumps({"error": feedback or "not complete", "code": "COMPLETION_REJECTED"})
    return Message("tool", content, tool_call_id=call.id)


def _new_guard(
    registry: Tools | AsyncTools,
    limits: LoopLimits | LimitPolicy | None,
    task_type: str,
    kw: dict[str, Any],
) -> LoopGuard:
    return LoopGuard(
        resolve_limits(limits, task_type),
        task_type=task_type,
        registry=registry,
        shadow=resolve_shadow(limits, task_type),
        **kw,
    )


def _outcome(result: RunResult, raise_on_stop: bool, cause: BaseException | None) -> RunResult:
    if raise_on_stop and not result.ok:
        raise AgentLoopError.for_result(result) from cause
    return result


def run(
    model: Model,
    registry: Tools,
    user_input: UserInput,
    *,
    system: str = "",
    limits: LoopLimits | LimitPolicy | None = None,
    task_type: str = "default",
    verify: Verifier | None = None,
    cancel: Cancel | None = None,
    raise_on_stop: bool = True,
    agent_name: str = "agent",
    approver: Approver | None = None,
    guardrails: Sequence[Guardrail] = (),
    progress: ProgressSignal | None = None,
    repeat_exempt: Sequence[str] = (),
    observer: RunObserver | None = None,
    observer_factory: ObserverFactory | None = None,
    parent: LoopGuard | None = None,
    clock: Callable[[], float] | None = None,
    resume: RunResult | str | Mapping[str, Any] | None = None,
    run_id: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    conversation_id: str | None = None,
) -> RunResult:
    """Run the agent loop until the guard stops it; see :class:`LoopGuard` for every argument.

    ``user_input`` is the user's text, or the conversation so far as a list of ``Message``
    (earlier turns as context, ending with the new user message; ``system`` is put first unless
    it starts with a system message). ``limits`` may be a ``LimitPolicy`` (picked by
    ``task_type``); without it the TOML file named by ``LOOPWATCH_LIMITS`` applies, else
    ``LoopLimits()``. ``resume`` continues a saved run's conversation as a new run with fresh
    budgets: a ``RunResult``, or the text of ``RunResult.to_json()`` (``user_input`` may then be
    ``None``). ``attributes`` go on the run span (e.g. a task label); ``conversation_id`` names
    the conversation (session, thread) the run belongs to. Raises
    :class:`AgentLoopError` on a non-success stop unless ``raise_on_stop=False``.
    """
    guard = _new_guard(
        registry,
        limits,
        task_type,
        dict(
            agent_name=agent_name,
            verify=verify,
            cancel=cancel,
            approver=approver,
            guardrails=guardrails,
            progress=progress,
            repeat_exempt=repeat_exempt,
            observer=observer,
            observer_factory=observer_factory,
            parent=parent,
            clock=clock,
            run_id=run_id,
            attributes=attributes,
            conversation_id=conversation_id,
            provider=_provider_name(model),
        ),
    )
    messages = _initial_messages(system, user_input, _resumed(resume))
    guard.start(messages)
    tools = registry.specs()
    name = _model_name(model)
    cause: BaseException | None = None
    try:
        while True:
            d = guard.before_step()
            if d.done:
                break
            if d.feedback:
                messages.append(Message("user", d.feedback))
            guard.model_call_started(name)
            try:
                response = model.complete(messages, tools if d.tools_allowed else [])
                if not isinstance(response, ModelResponse):
                    raise _not_a_response(response)
            except Exception as exc:
                guard.model_call_failed(exc)
                cause = exc
                break
            messages.append(response.message)
            d = guard.after_model(response)
            if d.action is Action.RUN_TOOLS:
                for call in response.message.tool_calls:
                    d = guard.before_tool(call)
                    if d.done:
                        break
                    if d.action is Action.REJECTED:
                        messages.append(_rejection(call, d.feedback))
                        continue
                    outcome = registry.execute(call, on_retry=guard.record_retry)
                    messages.append(Message("tool", outcome.content, tool_call_id=call.id))
                    if guard.after_tool(call, outcome).done:
                        break
            elif d.action is Action.REJECTED:
                messages.append(Message("user", d.feedback))
            if guard.end_step().done:
                break
    except Exception as exc:
        # An unexpected exception inside the loop stops it with `error`; the caller still gets
        # the partial result, or an AgentLoopError chained to the cause.
        guard.fail(exc)
        if raise_on_stop:
            raise AgentLoopError.for_result(guard.finish()) from exc
        return guard.finish()
    except BaseException:
        guard.stop(StopReason.CANCELLED, f"Stopped at step {guard.steps}: the run was interrupted.")
        guard.finish()
        raise
    return _outcome(guard.finish(), raise_on_stop, cause)


class _DeadlineHit(Exception):
    """The run's deadline interrupted an awaited call."""


async def _bounded(guard: LoopGuard, aw: Awaitable[_T]) -> _T:
    import asyncio  # only async runs pay for it

    left = guard.remaining_wall_s()
    if left is None:
        return await aw
    try:
        async with asyncio.timeout(left) as scope:
            return await aw
    except TimeoutError:
        if scope.expired():
            raise _DeadlineHit from None
        raise


async def arun(
    model: Model | AsyncModel,
    registry: AsyncTools,
    user_input: UserInput,
    *,
    system: str = "",
    limits: LoopLimits | LimitPolicy | None = None,
    task_type: str = "default",
    verify: Verifier | None = None,
    cancel: Cancel | None = None,
    raise_on_stop: bool = True,
    agent_name: str = "agent",
    approver: Approver | None = None,
    guardrails: Sequence[Guardrail] = (),
    progress: ProgressSignal | None = None,
    repeat_exempt: Sequence[str] = (),
    observer: RunObserver | None = None,
    observer_factory: ObserverFactory | None = None,
    parent: LoopGuard | None = None,
    clock: Callable[[], float] | None = None,
    resume: RunResult | str | Mapping[str, Any] | None = None,
    run_id: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    conversation_id: str | None = None,
) -> RunResult:
    """Async :func:`run`. A model or tool call still running at the deadline is cancelled and the
    run stops with ``timeout``. Cancelling the task itself records ``cancelled`` and re-raises."""
    import asyncio  # only async runs pay for it

    guard = _new_guard(
        registry,
        limits,
        task_type,
        dict(
            agent_name=agent_name,
            verify=verify,
            cancel=cancel,
            approver=approver,
            guardrails=guardrails,
            progress=progress,
            repeat_exempt=repeat_exempt,
            observer=observer,
            observer_factory=observer_factory,
            parent=parent,
            clock=clock,
            run_id=run_id,
            attributes=attributes,
            conversation_id=conversation_id,
            provider=_provider_name(model),
        ),
    )
    messages = _initial_messages(system, user_input, _resumed(resume))
    guard.start(messages)
    tools = registry.specs()
    name = _model_name(model)
    acomplete = getattr(model, "acomplete", None)
    cause: BaseException | None = None
    try:
        while True:
            d: Decision = guard.before_step()
            if d.done:
                break
            if d.feedback:
                messages.append(Message("user", d.feedback))
            guard.model_call_started(name)
            offered = tools if d.tools_allowed else []
            try:
                if acomplete is not None:
                    response: ModelResponse = await _bounded(
                        guard, acomplete(list(messages), offered)
                    )
                else:
                    sync_model: Any = model
                    response = await _bounded(
                        guard, asyncio.to_thread(sync_model.complete, list(messages), offered)
                    )
                if not isinstance(response, ModelResponse):
                    raise _not_a_response(response)
            except _DeadlineHit:
                guard.model_call_failed(TimeoutError("the run's deadline passed"), deadline=True)
                break
            except Exception as exc:
                guard.model_call_failed(exc)
                cause = exc
                break
            messages.append(response.message)
            d = guard.after_model(response)
            if d.action is Action.RUN_TOOLS:
                for call in response.message.tool_calls:
                    d = guard.before_tool(call)
                    if d.done:
                        break
                    if d.action is Action.REJECTED:
                        messages.append(_rejection(call, d.feedback))
                        continue
                    try:
                        outcome = await _bounded(
                            guard, registry.aexecute(call, on_retry=guard.record_retry)
                        )
                    except _DeadlineHit:
                        guard.tool_interrupted(call)
                        break
                    messages.append(Message("tool", outcome.content, tool_call_id=call.id))
                    if guard.after_tool(call, outcome).done:
                        break
            elif d.action is Action.REJECTED:
                messages.append(Message("user", d.feedback))
            if guard.end_step().done:
                break
    except asyncio.CancelledError:
        guard.stop(StopReason.CANCELLED, f"Stopped at step {guard.steps}: the task was cancelled.")
        guard.finish()
        raise
    except Exception as exc:
        # An unexpected exception inside the loop stops it with `error`; the caller still gets
        # the partial result, or an AgentLoopError chained to the cause.
        guard.fail(exc)
        if raise_on_stop:
            raise AgentLoopError.for_result(guard.finish()) from exc
        return guard.finish()
    except BaseException:
        guard.stop(StopReason.CANCELLED, f"Stopped at step {guard.steps}: the run was interrupted.")
        guard.finish()
        raise
    return _outcome(guard.finish(), raise_on_stop, cause)
