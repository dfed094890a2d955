"""The reference agent loop, sync (:func:`run`) and async (:func:`arun`), driven by a LoopGuard.

The loop's logic is written once, as a step machine (``steps.loop_steps``); ``run`` and ``arun``
are its two thin drivers, so both behave the same. A non-success stop raises
:class:`AgentLoopError` (a subclass by outcome) carrying the partial result;
``raise_on_stop=False`` returns the result instead. ``arun`` also interrupts a model or tool
call that is still running at the wall-clock deadline.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, Unpack, runtime_checkable

from .config import RunConfig, RunOptions, run_config
from .errors import AgentLoopError
from .guard import LoopGuard
from .limits import LIMITS_ENV, resolve_limits
from .reasons import StopReason
from .steps import DeadlineHit, LoopState, ModelCall, Step, ToolRun, loop_steps
from .tools import RetryEvent, ToolOutcome
from .types import Message, ModelResponse, RunResult, ToolCall

__all__ = [
    "LIMITS_ENV",
    "AsyncModel",
    "AsyncTools",
    "Model",
    "RunConfig",
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


def _provider_name(model: object) -> str | None:
    value = getattr(model, "provider", None)
    return value if isinstance(value, str) and value else None


def _model_name(model: object) -> str | None:
    for attr in ("model", "model_name", "name"):
        value = getattr(model, attr, None)
        if isinstance(value, str):
            return value
    return None


def _prepare(
    model: object,
    registry: Any,
    user_input: UserInput,
    config: RunConfig | None,
    system: str,
    resume: RunResult | str | Mapping[str, Any] | None,
    options: dict[str, Any],
) -> tuple[LoopGuard, list[Message]]:
    # The one place run and arun turn their arguments into a guard and a conversation.
    cfg = run_config(config, registry=registry, **options)
    if cfg.provider is None:
        cfg = cfg.with_options(provider=_provider_name(model))
    guard = LoopGuard(config=cfg)
    messages = _initial_messages(system, user_input, _resumed(resume))
    guard.start(messages)
    return guard, messages


def _outcome(result: RunResult, raise_on_stop: bool, cause: BaseException | None) -> RunResult:
    if raise_on_stop and not result.ok:
        raise AgentLoopError.for_result(result) from cause
    return result


def _failed(guard: LoopGuard, exc: Exception, raise_on_stop: bool) -> RunResult:
    # An unexpected exception inside the loop stops it with `error`; the caller still gets the
    # partial result, or an AgentLoopError chained to the cause.
    guard.fail(exc)
    if raise_on_stop:
        raise AgentLoopError.for_result(guard.finish()) from exc
    return guard.finish()


def _interrupted(guard: LoopGuard, what: str) -> None:
    guard.stop(StopReason.CANCELLED, f"Stopped at step {guard.steps}: {what}.")
    guard.finish()


def run(
    model: Model,
    registry: Tools,
    user_input: UserInput,
    /,
    *,
    config: RunConfig | None = None,
    system: str = "",
    raise_on_stop: bool = True,
    resume: RunResult | str | Mapping[str, Any] | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Run the agent loop until the guard stops it.

    ``user_input`` is the user's text, or the conversation so far as a list of ``Message``
    (earlier turns as context, ending with the new user message; ``system`` is put first unless
    it starts with a system message). ``config`` is the run's :class:`RunConfig`; its fields
    may also be given as keywords (``limits=``, ``task_type=`` ...; a keyword wins). Without
    limits the TOML file named by ``LOOPWATCH_LIMITS`` applies, else ``LoopLimits()``.
    ``resume`` continues a saved run's conversation as a new run with fresh budgets: a
    ``RunResult``, or the text of ``RunResult.to_json()`` (``user_input`` may then be ``None``).
    Raises :class:`AgentLoopError` on a non-success stop unless ``raise_on_stop=False``.
    """
    guard, messages = _prepare(model, registry, user_input, config, system, resume, dict(options))
    state = LoopState()
    machine = loop_steps(guard, messages, registry.specs(), _model_name(model), state)
    try:
        _drive(machine, model, registry, guard)
    except Exception as exc:
        return _failed(guard, exc, raise_on_stop)
    except BaseException:
        _interrupted(guard, "the run was interrupted")
        raise
    return _outcome(guard.finish(), raise_on_stop, state.cause)


def _drive(machine: Step, model: Model, registry: Tools, guard: LoopGuard) -> None:
    result: Any = None
    action = next(machine, None)
    while action is not None:
        if isinstance(action, ModelCall):
            try:
                result = model.complete(action.messages, action.tools)
            except Exception as exc:
                action = _throw(machine, exc)
                continue
        else:
            result = registry.execute(action.call, on_retry=guard.record_retry)
        action = _send(machine, result)


def _send(machine: Step, value: Any) -> ModelCall | ToolRun | None:
    try:
        return machine.send(value)
    except StopIteration:
        return None


def _throw(machine: Step, exc: BaseException) -> ModelCall | ToolRun | None:
    try:
        return machine.throw(exc)
    except StopIteration:
        return None


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
            raise DeadlineHit from None
        raise


async def arun(
    model: Model | AsyncModel,
    registry: AsyncTools,
    user_input: UserInput,
    /,
    *,
    config: RunConfig | None = None,
    system: str = "",
    raise_on_stop: bool = True,
    resume: RunResult | str | Mapping[str, Any] | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Async :func:`run`, the same arguments. A model or tool call still running at the
    deadline is cancelled and the run stops with ``timeout``. Cancelling the task itself
    records ``cancelled`` and re-raises."""
    import asyncio  # only async runs pay for it

    guard, messages = _prepare(model, registry, user_input, config, system, resume, dict(options))
    state = LoopState()
    machine = loop_steps(guard, messages, registry.specs(), _model_name(model), state)
    try:
        await _adrive(machine, model, registry, guard)
    except asyncio.CancelledError:
        _interrupted(guard, "the task was cancelled")
        raise
    except Exception as exc:
        return _failed(guard, exc, raise_on_stop)
    except BaseException:
        _interrupted(guard, "the run was interrupted")
        raise
    return _outcome(guard.finish(), raise_on_stop, state.cause)


async def _adrive(
    machine: Step, model: Model | AsyncModel, registry: AsyncTools, guard: LoopGuard
) -> None:
    import asyncio

    acomplete = getattr(model, "acomplete", None)
    result: Any = None
    action = next(machine, None)
    while action is not None:
        try:
            if isinstance(action, ModelCall):
                if acomplete is not None:
                    call = acomplete(action.messages, action.tools)
                else:
                    sync_model: Any = model
                    call = asyncio.to_thread(sync_model.complete, action.messages, action.tools)
                result = await _bounded(guard, call)
            else:
                tool = registry.aexecute(action.call, on_retry=guard.record_retry)
                result = await _bounded(guard, tool)
        except DeadlineHit as hit:
            action = _throw(machine, hit)
            continue
        except Exception as exc:
            if not isinstance(action, ModelCall):
                raise
            action = _throw(machine, exc)
            continue
        action = _send(machine, result)
