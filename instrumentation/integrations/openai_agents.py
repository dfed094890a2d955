"""The guard and loopwatch's spans inside the OpenAI Agents SDK, through its run hooks.

``pip install 'loopwatch[openai-agents]'``::

    from loopwatch.instrumentation.integrations.openai_agents import LoopwatchRunHooks, run

    result = await run(agent, "Where is order A-17?",
                       hooks=LoopwatchRunHooks(limits=LoopLimits(max_steps=10)))

One model call of the run is one loop step; each local tool call is a tool call. When the guard
stops the run, a hook raises :class:`GuardStop`, an ``agents.exceptions.AgentsException`` (so the
SDK ends the run its own way, attaching its ``run_data``) that is also an
:class:`~loopwatch.instrumentation.runtime.errors.AgentLoopError` of the right subclass, holding the
``RunResult``. The SDK's own ends are recorded by :func:`run` / :func:`run_sync` (or by
``hooks.record_error(exc)`` around your own ``Runner.run``): ``MaxTurnsExceeded`` → ``max_steps``,
guardrail tripwires → ``guardrail``, ``ModelRefusalError`` → ``refusal``, model and tool timeouts
→ ``timeout``, a Responses ``incomplete`` / ``finish_reason='length'`` → ``output_truncated``;
those exceptions reach the caller unchanged. The SDK traces to its own backend, not to
OpenTelemetry: loopwatch's spans come from the observer that
:func:`~loopwatch.instrumentation.instrument` installed. A hooks object serves one run at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents import Runner
from agents.exceptions import AgentsException
from agents.lifecycle import RunHooks

from ..clients.base import cost_of, tool_call_arguments
from ..clients.openai import responses_message_text
from ..runtime.errors import (
    AgentLoopError,
    AgentStuck,
    LimitReached,
    ModelStopped,
    RunFailed,
    RunInterrupted,
)
from ..runtime.guard import Action, Decision, LoopGuard
from ..runtime.reasons import Outcome, StopReason
from ..runtime.types import Message, ModelResponse, RunResult, ToolCall, Usage
from .common import GuardOptions, reject

__all__ = [
    "SDK_TOOL_ERROR_PREFIX",
    "GuardAgentStuck",
    "GuardLimitReached",
    "GuardModelStopped",
    "GuardRunFailed",
    "GuardRunInterrupted",
    "GuardStop",
    "LoopwatchRunHooks",
    "run",
    "run_sync",
    "stop_reason_for",
]

SDK_TOOL_ERROR_PREFIX = "An error occurred while running the tool"
"""How the SDK's default tool-failure function words a tool's exception to the model: such a
result counts as a tool error (code ``TOOL_ERROR``)."""


class GuardStop(AgentsException, AgentLoopError):
    """The guard stopped the run: an Agents SDK exception that is also an ``AgentLoopError``."""

    def __init__(self, reason: StopReason | str, result: RunResult) -> None:
        AgentLoopError.__init__(self, reason, result)
        self.run_data = None

    @staticmethod
    def of(result: RunResult) -> GuardStop:
        """The stop of the right subclass (``except LimitReached`` catches a limit stop)."""
        cls = _BY_OUTCOME.get(result.outcome, GuardStop)
        return cls(result.stop_reason, result)


class GuardLimitReached(GuardStop, LimitReached):
    """A budget ran out."""


class GuardAgentStuck(GuardStop, AgentStuck):
    """The run was looping or failing."""


class GuardModelStopped(GuardStop, ModelStopped):
    """The provider truncated or refused."""


class GuardRunInterrupted(GuardStop, RunInterrupted):
    """Cancelled, refused approval, or a guardrail."""


class GuardRunFailed(GuardStop, RunFailed):
    """A circuit was open, or something raised."""


_BY_OUTCOME: dict[Outcome, type[GuardStop]] = {
    Outcome.LIMIT: GuardLimitReached,
    Outcome.STUCK: GuardAgentStuck,
    Outcome.MODEL: GuardModelStopped,
    Outcome.INTERRUPTED: GuardRunInterrupted,
    Outcome.ERROR: GuardRunFailed,
}


def stop_reason_for(exc: BaseException) -> StopReason:
    """The stop reason for an exception the SDK ended a run with."""
    names = {c.__name__ for c in type(exc).__mro__}
    text = str(exc)
    if "MaxTurnsExceeded" in names:
        return StopReason.MAX_STEPS
    if any(n.endswith("GuardrailTripwireTriggered") for n in names):
        return StopReason.GUARDRAIL
    if "ModelRefusalError" in names:
        return StopReason.REFUSAL
    if names & {"ModelTimeoutError", "ToolTimeoutError", "TimeoutError"}:
        return StopReason.TIMEOUT
    if "ModelBehaviorError" in names:
        if "max_output_tokens" in text or "'length'" in text or "max_tokens" in text:
            return StopReason.OUTPUT_TRUNCATED
        if "content_filter" in text:
            return StopReason.REFUSAL
    if "CancelledError" in names:
        return StopReason.CANCELLED
    return StopReason.ERROR


@dataclass(eq=False, kw_only=True)
class LoopwatchRunHooks(GuardOptions, RunHooks[Any]):
    """Run hooks that drive a :class:`~loopwatch.instrumentation.runtime.guard.LoopGuard`.

    Args:
        limits, task_type, verify, cancel, guardrails, repeat_exempt, observer: as for
            ``LoopGuard``.
        agent_name: default: the first agent's name.
        prices: USD per million tokens by model name for the cost budget; without them cost
            stays 0.
    """

    guard: LoopGuard | None = field(default=None, init=False, repr=False)
    """The current run's guard."""
    result: RunResult | None = field(default=None, init=False, repr=False)
    """The last run's ``RunResult``, once it ended."""
    _messages: list[Message] = field(default_factory=list, init=False, repr=False)
    _calls: dict[str, ToolCall] = field(default_factory=dict, init=False, repr=False)

    def _guard(self, agent: Any) -> LoopGuard:
        guard = self.guard
        if guard is None or self.result is not None:
            self._messages = []
            self._calls = {}
            self.result = None
            guard = self.guard = self.new_guard(getattr(agent, "name", None))
            guard.start(self._messages)
        return guard

    def _raise(self, decision: Decision) -> None:
        guard = self.guard
        assert guard is not None
        self.result = guard.finish(self._messages)
        raise GuardStop.of(self.result)

    # --- the SDK's hooks -------------------------------------------------------------------

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        self._guard(agent)

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        guard = self._guard(agent)
        nudge = guard.take_nudge()
        d = guard.before_step()
        if d.done:
            self._raise(d)
        if nudge is not None:
            # The SDK hands this hook the very input list it sends the model (checked by
            # tests/test_nudge_integrations.py): the nudge goes at its end, as a user message.
            input_items.append({"role": "user", "content": nudge})
        model = getattr(agent, "model", None)
        name = model if isinstance(model, str) else getattr(model, "model", None)
        guard.model_call_started(name if isinstance(name, str) else None)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        guard = self._guard(agent)
        ours = self._convert(response, agent)
        self._messages.append(ours.message)
        d = guard.after_model(ours)
        if d.action is Action.REJECTED:
            d = reject(guard, d)
        if d.stop:
            self._raise(d)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        guard = self._guard(agent)
        call_id = str(getattr(context, "tool_call_id", "") or id(context))
        name = str(getattr(context, "tool_name", None) or getattr(tool, "name", "tool"))
        arguments = tool_call_arguments(getattr(context, "tool_arguments", None))
        call = ToolCall(call_id, name, arguments)
        self._calls[call_id] = call
        d = guard.before_tool(call)
        if d.stop:
            self._raise(d)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        guard = self._guard(agent)
        call_id = str(getattr(context, "tool_call_id", "") or id(context))
        call = self._calls.pop(call_id, None)
        if call is None:
            return
        content = result if isinstance(result, str) else str(result)
        code = "TOOL_ERROR" if content.startswith(SDK_TOOL_ERROR_PREFIX) else None
        self._messages.append(Message("tool", content, tool_call_id=call.id))
        d = guard.after_tool(call, content, error_code=code)
        if d.stop:
            self._raise(d)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        guard = self._guard(agent)
        if not guard.stopped:
            # A final output the guard had not seen as one (structured output, a handoff's
            # agent answering): the run completed.
            guard.complete(None if output is None else str(output))
        self.result = guard.finish(self._messages)

    # --- ends the hooks do not see ---------------------------------------------------------

    def record_error(self, exc: BaseException) -> RunResult | None:
        """Record how the SDK ended the run (call it with what ``Runner.run`` raised)."""
        if isinstance(exc, GuardStop) or self.guard is None or self.result is not None:
            return self.result
        guard = self.guard
        reason = stop_reason_for(exc)
        if reason is StopReason.ERROR:
            guard.fail(exc, where="the agent run")
        else:
            guard.stop(
                reason,
                f"Stopped at step {guard.steps}: the Agents SDK ended the run with "
                f"{type(exc).__name__}: {exc}",
            )
        self.result = guard.finish(self._messages)
        return self.result

    def _convert(self, response: Any, agent: Any) -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        refused = False
        for item in getattr(response, "output", None) or ():
            kind = getattr(item, "type", None)
            if kind == "message":
                refused = responses_message_text(item, texts) or refused
            elif kind == "function_call":
                calls.append(
                    ToolCall(
                        str(getattr(item, "call_id", "") or ""),
                        str(getattr(item, "name", "") or ""),
                        tool_call_arguments(getattr(item, "arguments", None)),
                    )
                )
        stop = "tool_calls" if calls else ("refusal" if refused else "stop")
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "input_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "output_tokens", 0) or 0)
        model = getattr(agent, "model", None)
        name = model if isinstance(model, str) else getattr(model, "model", None)
        name = name if isinstance(name, str) else None
        cost = cost_of(self.prices, (name,), tokens_in, tokens_out)
        return ModelResponse(
            Message("assistant", "".join(texts) or None, tuple(calls)),
            stop,
            Usage(tokens_in, tokens_out, cost),
            name,
        )


async def run(agent: Any, input: Any, *, hooks: LoopwatchRunHooks, **kwargs: Any) -> Any:
    """``Runner.run`` with ``hooks``, recording how the SDK ended the run if it raised."""
    try:
        return await Runner.run(agent, input, hooks=hooks, **kwargs)
    except BaseException as exc:
        hooks.record_error(exc)
        raise


def run_sync(agent: Any, input: Any, *, hooks: LoopwatchRunHooks, **kwargs: Any) -> Any:
    """``Runner.run_sync`` with ``hooks``, recording how the SDK ended the run if it raised."""
    try:
        return Runner.run_sync(agent, input, hooks=hooks, **kwargs)
    except BaseException as exc:
        hooks.record_error(exc)
        raise
