"""The guard and loopwatch's attributes inside pydantic-ai agents, as a capability.

``pip install 'loopwatch[pydantic-ai]'``::

    from pydantic_ai import Agent
    from loopwatch.instrumentation.integrations.pydantic_ai import LoopwatchCapability

    agent = Agent("openai:gpt-4o", capabilities=[
        LoopwatchCapability(limits=LoopLimits(max_steps=10), task_type="support_ticket"),
    ])
    result = agent.run_sync("Where is order A-17?")   # a guard stop raises AgentLoopError

One pydantic-ai model request is one loop step. The guard sees every model response and every
tool call through the capability hooks (``wrap_run``, ``wrap_model_request``,
``wrap_tool_execute``); when it stops the run, the run ends with
:class:`~loopwatch.instrumentation.AgentLoopError` (a subclass by outcome) holding the
``RunResult``. pydantic-ai's own ends are recorded and reach the caller unchanged:
``UsageLimitExceeded`` as the matching limit stop, a tool's exception as ``error``.

Spans: when pydantic-ai is instrumented (``Agent(instrument=...)`` / ``Agent.instrument_all()``)
its ``invoke_agent`` / ``chat`` / ``execute_tool`` spans get loopwatch's attributes; otherwise the
guard emits loopwatch's own spans through :func:`~loopwatch.instrumentation.instrument`'s observer.
Either way the run lands in the store like a reference-loop run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from pydantic_ai import exceptions as pai_exceptions
from pydantic_ai import messages as pai_messages
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext

from ..clients.base import ModelPrice, cost_of
from ..runtime import semconv as sc
from ..runtime.config import RunConfig
from ..runtime.errors import AgentLoopError
from ..runtime.guard import Action, Cancel, Guardrail, LoopGuard, Verifier
from ..runtime.limits import LimitPolicy, LoopLimits
from ..runtime.observer import RunObserver
from ..runtime.reasons import StopReason
from ..runtime.retry import classify
from ..runtime.types import Message, ModelResponse, RunResult, ToolCall, Usage
from .common import (
    GuardStopped,
    SpanAnnotator,
    current_span_if,
    guard_config,
    tool_error_content,
)

__all__ = ["LoopwatchCapability", "usage_limit_reason"]

# pydantic-ai's finish reasons (OTel values) in the vocabulary classify_provider_stop knows.
_FINISH: dict[str, str] = {
    "tool_call": "tool_calls",
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
}


def usage_limit_reason(message: str) -> StopReason:
    """The stop reason for a pydantic-ai ``UsageLimitExceeded`` message."""
    text = message.lower()
    if "request" in text:
        return StopReason.MAX_MODEL_CALLS
    if "tool_calls" in text or "tool call" in text:
        return StopReason.MAX_TOOL_CALLS
    return StopReason.TOKEN_BUDGET


class _OutputTools:
    """What the guard asks of a registry: pydantic-ai's output tools are the run's done tools."""

    __slots__ = ("names",)

    def __init__(self) -> None:
        self.names: set[str] = set()

    def get(self, name: str) -> Any:
        return _DONE if name in self.names else None


class _Done:
    done = True


_DONE = _Done()


@dataclass
class LoopwatchCapability(AbstractCapability[Any]):
    """Runs a :class:`~loopwatch.instrumentation.runtime.guard.LoopGuard` over each agent run.

    Args:
        limits: the run's limits, or a ``LimitPolicy`` picked by ``task_type``.
        task_type: the task type runs are recorded under.
        agent_name: default: the agent's name, else ``agent``.
        prices: USD per million tokens by model name for the cost budget; without them cost
            stays 0 (pydantic-ai's bundled price estimate is not used: it goes stale silently).
        verify, cancel, guardrails, repeat_exempt: as for ``LoopGuard``.
        observer: a run observer of your own; default: annotate pydantic-ai's spans when it is
            instrumented, else loopwatch's own spans (``instrument()``).
        capture_content: record arguments in explanations on spans (default: the GenAI env var).
        config: a :class:`~loopwatch.instrumentation.runtime.config.RunConfig` for every run (the
            fields above, when set, win over its own).
    """

    _: KW_ONLY
    limits: LoopLimits | LimitPolicy | None = None
    task_type: str = "default"
    agent_name: str | None = None
    prices: Mapping[str, ModelPrice] | None = None
    verify: Verifier | None = None
    cancel: Cancel | None = None
    guardrails: Sequence[Guardrail] = ()
    repeat_exempt: Sequence[str] = ()
    observer: RunObserver | None = None
    capture_content: bool | None = None
    config: RunConfig | None = None
    id: str | None = "loopwatch"
    guard: LoopGuard | None = field(default=None, init=False, repr=False)
    """The current run's guard (on the per-run copy)."""
    last_result: RunResult | None = field(default=None, init=False, repr=False)
    """The ``RunResult`` of the run that ended last (on the capability the agent was given)."""
    _origin: LoopwatchCapability | None = field(default=None, init=False, repr=False)
    _tools: _OutputTools = field(default_factory=_OutputTools, init=False, repr=False)
    _messages: list[Message] = field(default_factory=list, init=False, repr=False)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def for_run(self, ctx: RunContext[Any]) -> LoopwatchCapability:
        # The options carried over; the per-run state (init=False fields) starts fresh.
        copy = replace(self)
        copy._origin = self
        return copy

    def _finish(self, guard: LoopGuard) -> RunResult:
        result = guard.finish(self._messages)
        self.last_result = result
        if self._origin is not None:
            self._origin.last_result = result
        return result

    # --- run -------------------------------------------------------------------------------

    def _new_guard(self, ctx: RunContext[Any]) -> LoopGuard:
        run_id = getattr(ctx, "run_id", None)
        cfg = guard_config(
            self,
            getattr(getattr(ctx, "agent", None), "name", None),
            registry=self._tools,
            **({"run_id": run_id} if isinstance(run_id, str) and run_id else {}),
        )
        if cfg.observer is None:
            run_span = current_span_if(sc.OP_INVOKE_AGENT)
            if run_span is not None:
                annotator = SpanAnnotator(run_span, capture_content=self.capture_content)
                cfg = cfg.with_options(observer=annotator)
        return LoopGuard(config=cfg)

    async def before_run(self, ctx: RunContext[Any]) -> None:
        # Inside pydantic-ai's run span (its Instrumentation capability is outermost).
        self.guard = self._new_guard(ctx)
        self.guard.start(self._messages)

    async def after_run(self, ctx: RunContext[Any], *, result: Any) -> Any:
        guard = self.guard
        if guard is None:
            return result
        if not guard.stopped:
            # The run ended on pydantic-ai's terms (e.g. an output validator accepted what the
            # guard had not yet seen as final): it succeeded.
            output = getattr(result, "output", None)
            guard.complete(None if output is None else str(output))
        outcome = self._finish(guard)
        if not outcome.ok:
            raise AgentLoopError.for_result(outcome)
        return result

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> Any:
        # An error raised here replaces the run's error (pydantic-ai's contract; wrap_run could
        # only observe it): a guard stop becomes AgentLoopError, pydantic-ai's own ends are
        # recorded and re-raised unchanged.
        guard = self.guard
        if guard is None:
            raise error
        if isinstance(error, GuardStopped):
            raise AgentLoopError.for_result(self._finish(guard)) from error
        n = guard.steps
        if isinstance(error, pai_exceptions.UsageLimitExceeded):
            why = f"Stopped at step {n}: pydantic-ai's usage limit was reached: {error}"
            guard.stop(usage_limit_reason(str(error)), why)
        elif isinstance(error, asyncio.CancelledError):
            guard.stop(StopReason.CANCELLED, f"Stopped at step {n}: the run was cancelled.")
        elif getattr(error, "timed_out", False) or isinstance(error, TimeoutError):
            guard.stop(StopReason.TIMEOUT, f"Stopped at step {n}: the run timed out ({error}).")
        else:
            guard.fail(error, where="the agent run")
        self._finish(guard)
        raise error

    # --- model requests --------------------------------------------------------------------

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, handler: Any
    ) -> Any:
        guard = self.guard
        if guard is None:
            return await handler(request_context)
        params = getattr(request_context, "model_request_parameters", None)
        for tool in getattr(params, "output_tools", None) or ():
            self._tools.names.add(tool.name)
        nudge = guard.take_nudge()
        d = guard.before_step()
        if d.done:
            raise GuardStopped(d)
        if nudge is not None:
            request_context = _with_nudge(request_context, nudge)
        model = getattr(getattr(request_context, "model", None), "model_name", None)
        guard.model_call_started(model if isinstance(model, str) else None)
        try:
            response = await handler(request_context)
        except Exception as exc:
            guard.model_call_failed(exc)
            raise
        ours = self._convert(response, model if isinstance(model, str) else None)
        self._messages.append(ours.message)
        d = guard.after_model(ours)
        if d.stop:
            raise GuardStopped(d)
        if d.action is Action.RUN_TOOLS:
            for call in ours.message.tool_calls:
                if call.name in self._tools.names:
                    d = guard.before_tool(call)
                    if d.stop:
                        raise GuardStopped(d)
                    if d.action is Action.REJECTED:
                        break
        if d.action is Action.REJECTED:
            # The completion check found the answer incomplete: pydantic-ai's own retry prompt
            # carries the unmet criteria back to the model.
            raise pai_exceptions.ModelRetry(d.feedback or "The task is not complete yet.")
        return response

    def _convert(self, response: Any, requested: str | None) -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for part in getattr(response, "parts", ()) or ():
            if isinstance(part, pai_messages.TextPart):
                texts.append(part.content)
            elif isinstance(part, pai_messages.ToolCallPart):
                calls.append(ToolCall(part.tool_call_id, part.tool_name, _arguments(part)))
        finish = getattr(response, "finish_reason", None)
        stop = _FINISH.get(finish, finish) if isinstance(finish, str) else None
        if stop is None and calls:
            stop = "tool_calls"
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "input_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "output_tokens", 0) or 0)
        name = getattr(response, "model_name", None)
        name = name if isinstance(name, str) else None
        cost = cost_of(self.prices, (name, requested), tokens_in, tokens_out)
        return ModelResponse(
            Message("assistant", "".join(texts) or None, tuple(calls)),
            stop,
            Usage(tokens_in, tokens_out, cost),
            name or requested,
        )

    # --- tools -----------------------------------------------------------------------------

    async def wrap_tool_execute(
        self, ctx: RunContext[Any], *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        guard = self.guard
        if guard is None:
            return await handler(args)
        ours = ToolCall(
            call.tool_call_id,
            call.tool_name,
            dict(args) if isinstance(args, Mapping) else _arguments(call),
        )
        d = guard.before_tool(ours)
        if d.stop:
            raise GuardStopped(d)
        if d.done:  # the run already completed (an output tool): run it unobserved
            return await handler(args)
        try:
            value = await handler(args)
        except Exception as exc:
            name = type(exc).__name__
            if name in ("ToolRetryError", "ToolFailedError"):
                code = "MODEL_RETRY" if name == "ToolRetryError" else "TOOL_FAILED"
                content = tool_error_content(code, str(exc))
            else:
                info = classify(exc)
                code, content = info.code, tool_error_content(info.code, info.message)
            self._messages.append(Message("tool", content, tool_call_id=ours.id))
            d = guard.after_tool(ours, content, error_code=code)
            if d.stop:
                raise GuardStopped(d) from exc
            raise
        content = value if isinstance(value, str) else _text_of(value)
        self._messages.append(Message("tool", content, tool_call_id=ours.id))
        d = guard.after_tool(ours, content)
        if d.stop:
            raise GuardStopped(d)
        return value


def _with_nudge(request_context: Any, nudge: str) -> Any:
    # A request hook may hand the model a changed context (pydantic-ai's ModelRequestContext is
    # replaced, not mutated): the nudge goes in as a user prompt after the tool results.
    messages = list(getattr(request_context, "messages", None) or [])
    prompt = pai_messages.UserPromptPart(nudge)
    last = messages[-1] if messages else None
    if isinstance(last, pai_messages.ModelRequest):
        messages[-1] = replace(last, parts=[*last.parts, prompt])
    else:
        messages.append(pai_messages.ModelRequest(parts=[prompt]))
    return replace(request_context, messages=messages)


def _arguments(part: Any) -> dict[str, Any] | str:
    args = getattr(part, "args", None)
    if isinstance(args, dict):
        return args
    try:
        return dict(part.args_as_dict())
    except Exception:
        return str(args or "")


def _text_of(value: Any) -> str:
    import json

    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)
