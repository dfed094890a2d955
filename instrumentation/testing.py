"""Fakes for testing agent loops without a real model: scripted models, scripted tools, a clock.

Public and stable, for your own tests::

    from loopwatch.instrumentation.testing import CounterModel, FakeModel, tool_response

    limits = LoopLimits(max_steps=3)
    result = run(CounterModel(), registry, "go", limits=limits, raise_on_stop=False)
    assert result.stop_reason == "max_steps"
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .runtime.types import Message, ModelResponse, ToolCall, Usage

__all__ = [
    "CounterModel",
    "FakeClock",
    "FakeModel",
    "HangingModel",
    "LoopingModel",
    "ScriptExhausted",
    "ScriptedTool",
    "failing_tool",
    "flaky_tool",
    "text_response",
    "tool_call",
    "tool_response",
]

_ids = itertools.count(1)


class ScriptExhausted(RuntimeError):
    """A ``FakeModel`` was called once more than its script has responses."""


def tool_call(name: str, /, **arguments: Any) -> ToolCall:
    """A ``ToolCall`` with a fresh id: ``tool_call("read_file", path="a.txt")``."""
    return ToolCall(f"call_{next(_ids)}", name, arguments)


def text_response(
    text: str, stop_reason: str | None = "end_turn", usage: Usage | None = None
) -> ModelResponse:
    """A response with text and no tool call (a final answer, by default)."""
    return ModelResponse(Message("assistant", text), stop_reason, usage or Usage())


def tool_response(
    *calls: ToolCall,
    text: str | None = None,
    stop_reason: str | None = "tool_use",
    usage: Usage | None = None,
) -> ModelResponse:
    """A response asking for ``calls``."""
    return ModelResponse(Message("assistant", text, tuple(calls)), stop_reason, usage or Usage())


def _as_response(item: ModelResponse | ToolCall | Sequence[ToolCall] | str) -> ModelResponse:
    if isinstance(item, ModelResponse):
        return item
    if isinstance(item, str):
        return text_response(item)
    if isinstance(item, ToolCall):
        return tool_response(item)
    return tool_response(*item)


class _ScriptedModel:
    """Common parts: call log, optional latency on a fake clock, async form."""

    model = "fake"

    def __init__(self, *, clock: FakeClock | None = None, latency_s: float = 0.0) -> None:
        self.calls: list[list[Message]] = []
        """The messages of every call, copied."""
        self.tools_offered: list[list[Mapping[str, Any]]] = []
        """The tools offered on every call."""
        self.clock = clock
        self.latency_s = latency_s

    def _next(self) -> ModelResponse:
        raise NotImplementedError

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        self.calls.append(list(messages))
        self.tools_offered.append(list(tools))
        if self.clock is not None and self.latency_s:
            self.clock.advance(self.latency_s)
        return self._next()

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        return self.complete(messages, tools)


class FakeModel(_ScriptedModel):
    """Returns scripted responses in order.

    Items may be ``ModelResponse``s, a ``str`` (a final answer), a ``ToolCall`` or a list of
    them (one response asking for those calls). Past the end it raises
    :class:`ScriptExhausted`, unless ``then`` gives a response to repeat.
    """

    def __init__(
        self,
        responses: Iterable[ModelResponse | ToolCall | Sequence[ToolCall] | str],
        *,
        then: ModelResponse | str | None = None,
        clock: FakeClock | None = None,
        latency_s: float = 0.0,
    ) -> None:
        super().__init__(clock=clock, latency_s=latency_s)
        self.responses = [_as_response(r) for r in responses]
        self.then = _as_response(then) if then is not None else None
        self._i = 0

    def _next(self) -> ModelResponse:
        if self._i < len(self.responses):
            self._i += 1
            return self.responses[self._i - 1]
        if self.then is not None:
            return self.then
        n = len(self.responses)
        raise ScriptExhausted(
            f"FakeModel ran out of script: call {n + 1} asked for a response, the script has "
            f"{n}; add responses, or pass then= to repeat one"
        )


class LoopingModel(_ScriptedModel):
    """Asks for the same tool call every time (seed 000): trips ``repeated_action``."""

    def __init__(
        self,
        tool_call: ToolCall,
        *,
        usage: Usage | None = None,
        clock: FakeClock | None = None,
        latency_s: float = 0.0,
    ) -> None:
        super().__init__(clock=clock, latency_s=latency_s)
        self.tool_call = tool_call
        self.usage = usage or Usage()

    def _next(self) -> ModelResponse:
        return tool_response(self.tool_call, usage=self.usage)


class CounterModel(_ScriptedModel):
    """Never answers; calls ``tool`` with ``{"text": "turn N"}``, new arguments each time.

    Escapes the repeat detectors, so only budgets stop it.
    """

    def __init__(
        self,
        tool: str = "echo",
        *,
        usage: Usage | None = None,
        clock: FakeClock | None = None,
        latency_s: float = 0.0,
    ) -> None:
        super().__init__(clock=clock, latency_s=latency_s)
        self.tool = tool
        self.usage = usage or Usage()
        self.n = 0

    def _next(self) -> ModelResponse:
        self.n += 1
        call = ToolCall(f"c{self.n}", self.tool, {"text": f"turn {self.n}"})
        return tool_response(call, usage=self.usage)


class HangingModel:
    """An async model whose call never returns (until cancelled): for deadline tests."""

    model = "hanging"

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        self.started += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


class FakeClock:
    """A monotonic clock that moves only when told.

    Pass it as ``clock=``, and its ``sleep``/``asleep`` to a ``ToolRegistry``: sleeps advance
    the time and are recorded, nothing waits.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        """Every delay slept, in order."""

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


class ScriptedTool:
    """A tool function following a script: each call takes the next item; an exception is raised,
    anything else returned. The last item repeats once the script runs out.

    ``params`` names the keyword parameters (its signature, for the registry's schema);
    ``idempotent=True`` adds an ``idempotency_key`` parameter so a side-effecting tool is retried.
    Every call's keywords are kept in ``calls``.
    """

    def __init__(
        self,
        script: Sequence[Any],
        *,
        params: Sequence[str] = (),
        idempotent: bool = False,
        name: str = "scripted",
        on_call: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not script:
            raise ValueError("script must not be empty")
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []
        self.on_call = on_call
        self.__name__ = name
        self.__doc__ = f"Scripted test tool {name}."
        kinds = [
            inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=str) for p in params
        ]
        if idempotent:
            kinds.append(
                inspect.Parameter(
                    "idempotency_key", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str
                )
            )
        self.__signature__ = inspect.Signature(kinds)

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(dict(kwargs))
        if self.on_call is not None:
            self.on_call(kwargs)
        item = self.script[min(len(self.calls), len(self.script)) - 1]
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, type) and issubclass(item, BaseException):
            raise item()
        return item


def failing_tool(
    error: BaseException, *, params: Sequence[str] = (), name: str = "failing"
) -> ScriptedTool:
    """A tool that always raises ``error``."""
    return ScriptedTool([error], params=params, name=name)


def flaky_tool(
    failures: int,
    error: BaseException,
    result: Any = "ok",
    *,
    params: Sequence[str] = (),
    idempotent: bool = False,
    name: str = "flaky",
) -> ScriptedTool:
    """A tool that raises ``error`` ``failures`` times, then returns ``result``."""
    return ScriptedTool(
        [error] * failures + [result], params=params, idempotent=idempotent, name=name
    )
