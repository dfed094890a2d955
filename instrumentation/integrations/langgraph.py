"""The guard and loopwatch's spans inside LangGraph (and any langchain-core runnable), as a
callback handler.

``pip install 'loopwatch[langgraph]'``::

    from loopwatch.instrumentation.integrations.langgraph import LoopwatchCallbackHandler

    handler = LoopwatchCallbackHandler(limits=LoopLimits(max_steps=10), task_type="support")
    graph.invoke({"messages": [("user", "Where is order A-17?")]},
                 config={"callbacks": [handler]})      # a guard stop raises AgentLoopError

Each top-level invocation of the graph (a chain run without a parent) is one loopwatch run; each
chat-model call inside it is one step; each tool run is a tool call. The handler raises on the
sync and the async path alike (``raise_error=True``, run inline), so a guard stop ends the graph
with :class:`~loopwatch.instrumentation.runtime.errors.AgentLoopError` holding the ``RunResult``.
LangGraph's ``GraphRecursionError`` is recorded as ``max_steps`` and re-raised unchanged; a tool
error is counted from the tool's error (``on_tool_error``) or its ``ToolMessage`` with
``status="error"``. LangGraph emits no OpenTelemetry spans of its own: loopwatch's spans come from
the observer :func:`~loopwatch.instrumentation.instrument` installed, as for the reference loop.
One handler can serve concurrent invocations: runs are told apart by their root run id.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from ..clients.base import cost_of
from ..runtime.errors import AgentLoopError
from ..runtime.guard import Action, Decision, LoopGuard
from ..runtime.reasons import StopReason
from ..runtime.retry import classify
from ..runtime.types import Message, ModelResponse, ToolCall, Usage
from .common import GuardOptions, reject, tool_error_content

__all__ = ["LoopwatchCallbackHandler"]


@dataclass(slots=True)
class _Run:
    guard: LoopGuard
    messages: list[Message] = field(default_factory=list)
    tools: dict[UUID, ToolCall] = field(default_factory=dict)
    done: bool = False
    stopped: AgentLoopError | None = None
    """The guard's stop, raised again at the next model or tool call if something in the graph
    caught it (a ToolNode with ``handle_tool_errors=True`` catches every exception)."""


def _class_names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return "" if content is None else str(content)


@dataclass(eq=False, kw_only=True)
class LoopwatchCallbackHandler(GuardOptions, BaseCallbackHandler):
    """Runs a :class:`~loopwatch.instrumentation.runtime.guard.LoopGuard` over each top-level run.

    Args:
        limits: the run's limits, or a ``LimitPolicy`` picked by ``task_type``.
        task_type: the task type runs are recorded under.
        agent_name: the agent's name (default: the graph's name, else ``agent``).
        prices: USD per million tokens by model name for the cost budget; without them cost
            stays 0.
        verify, cancel, guardrails, repeat_exempt, observer: as for ``LoopGuard``.
    """

    raise_error = True
    """A guard stop must end the graph, on the sync and the async path."""
    run_inline = True
    """Called in the graph's own thread or event loop, in order: no executor hop."""

    last_result: Any = field(default=None, init=False, repr=False)
    """The ``RunResult`` of the run that ended last (for a run that raised nothing)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _runs: dict[UUID, _Run] = field(default_factory=dict, init=False, repr=False)
    _root: dict[UUID, UUID] = field(default_factory=dict, init=False, repr=False)

    def take_nudge(self) -> str | None:
        """The nudge waiting for the model of a watched run, if any, and forget it.

        LangChain hands callbacks a copy of a chat model's messages, so the handler cannot add
        a nudge itself: a graph node that runs before the model node adds it to the state's
        messages (docs/integrations/langgraph.md, "Nudges"). Not taken, it is dropped at the
        next model call and the detector's next trip stops the run.
        """
        with self._lock:
            runs = [r for r in self._runs.values() if not r.done]
        for run in runs:
            nudge = run.guard.take_nudge()
            if nudge is not None:
                return nudge
        return None

    # --- run bookkeeping ------------------------------------------------------------------

    def _run_of(self, run_id: UUID) -> _Run | None:
        root = self._root.get(run_id)
        return self._runs.get(root) if root is not None else None

    def _link(self, run_id: UUID, parent_run_id: UUID | None) -> _Run | None:
        if parent_run_id is None:
            return None
        with self._lock:
            root = self._root.get(parent_run_id)
            if root is None:
                return None
            self._root[run_id] = root
            return self._runs.get(root)

    def _unlink(self, run_id: UUID) -> None:
        with self._lock:
            self._root.pop(run_id, None)

    def _enter(self, run_id: UUID, parent_run_id: UUID | None) -> _Run | None:
        """The run a model or tool call starts in, None when it is not watched or is over; the
        guard's stop again when something in the graph caught it."""
        run = self._link(run_id, parent_run_id)
        if run is None:
            return None
        if run.stopped is not None:
            raise run.stopped
        return None if run.done else run

    def _leave(self, run_id: UUID) -> _Run | None:
        """The run a model or tool call ended in, None when it is not watched or is over."""
        run = self._run_of(run_id)
        self._unlink(run_id)
        return None if run is None or run.done else run

    def _end_root(self, run_id: UUID, parent_run_id: UUID | None) -> _Run | None:
        """The run a chain's end ends (a top-level chain's, not yet done), marked done."""
        if parent_run_id is not None:
            self._unlink(run_id)
            return None
        run = self._end(run_id)
        if run is None or run.done:
            return None
        run.done = True
        return run

    def _stop(self, run: _Run, decision: Decision, cause: BaseException | None = None) -> None:
        run.done = True
        result = run.guard.finish(run.messages)
        self.last_result = result
        run.stopped = AgentLoopError.for_result(result)
        raise run.stopped from cause

    # --- chains: the run ------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is not None:
            self._link(run_id, parent_run_id)
            return
        name = kwargs.get("name") or (serialized or {}).get("name")
        guard = self.new_guard(name, run_id=str(run_id))
        run = _Run(guard)
        with self._lock:
            self._runs[run_id] = run
            self._root[run_id] = run_id
        guard.start(run.messages)

    def on_chain_end(
        self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        run = self._end_root(run_id, parent_run_id)
        if run is None:
            return
        if not run.guard.stopped:
            # The graph ended by itself after something other than a final answer the guard saw
            # (a tool node last, a custom end condition): it completed.
            answers = [m.content for m in run.messages if m.role == "assistant" and m.content]
            run.guard.complete(answers[-1] if answers else None)
        self.last_result = run.guard.finish(run.messages)

    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._end_root(run_id, parent_run_id)
        if run is None:
            return
        guard = run.guard
        names = _class_names(error)
        if "GraphRecursionError" in names:
            guard.stop(
                StopReason.MAX_STEPS,
                f"Stopped at step {guard.steps}: LangGraph's recursion limit was reached "
                f"({error}). Raise recursion_limit in the run's config, or set max_steps, if "
                "successful runs need more steps.",
            )
        elif "CancelledError" in names:
            guard.stop(
                StopReason.CANCELLED, f"Stopped at step {guard.steps}: {type(error).__name__}."
            )
        else:
            guard.fail(error, where="the graph")
        self.last_result = guard.finish(run.messages)

    def _end(self, run_id: UUID) -> _Run | None:
        with self._lock:
            self._root.pop(run_id, None)
            run = self._runs.pop(run_id, None)
            if run is not None:
                # Children that never reported their end (an error cut them off) go too.
                for child in [c for c, r in self._root.items() if r == run_id]:
                    del self._root[child]
        return run

    # --- chat models: the steps -----------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._enter(run_id, parent_run_id)
        if run is None:
            return
        guard = run.guard
        d = guard.before_step()
        if d.done:
            self._stop(run, d)
        params = kwargs.get("invocation_params") or {}
        model = (
            (metadata or {}).get("ls_model_name") or params.get("model") or params.get("model_name")
        )
        guard.model_call_started(str(model) if model else None)

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.on_chat_model_start(
            serialized, [], run_id=run_id, parent_run_id=parent_run_id, **kwargs
        )

    def on_llm_end(
        self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        run = self._leave(run_id)
        if run is None:
            return
        ours = self._convert(response)
        run.messages.append(ours.message)
        d = run.guard.after_model(ours)
        if d.action is Action.REJECTED:
            d = reject(run.guard, d)
        if d.stop:
            self._stop(run, d)

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._leave(run_id)
        if run is None:
            return
        # The run stops with `error`; the model's exception goes on up through the graph.
        run.guard.model_call_failed(error)

    def _convert(self, response: Any) -> ModelResponse:
        generations = getattr(response, "generations", None) or [[]]
        first = generations[0][0] if generations and generations[0] else None
        message = getattr(first, "message", None)
        text = _text(getattr(message, "content", None) if message is not None else None)
        if message is None and first is not None:
            text = str(getattr(first, "text", "") or "")
        calls = tuple(
            ToolCall(str(c.get("id") or ""), str(c.get("name") or ""), dict(c.get("args") or {}))
            for c in (getattr(message, "tool_calls", None) or ())
        )
        meta = getattr(message, "response_metadata", None) or {}
        stop = meta.get("finish_reason") or meta.get("stop_reason")
        if stop is None and calls:
            stop = "tool_calls"
        usage = getattr(message, "usage_metadata", None) or {}
        tokens_in = int(usage.get("input_tokens", 0) or 0)
        tokens_out = int(usage.get("output_tokens", 0) or 0)
        model = meta.get("model_name") or meta.get("model")
        cost = cost_of(self.prices, (model,), tokens_in, tokens_out)
        return ModelResponse(
            Message("assistant", text or None, calls),
            str(stop) if stop is not None else None,
            Usage(tokens_in, tokens_out, cost),
            str(model) if model else None,
        )

    # --- tools ----------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._enter(run_id, parent_run_id)
        if run is None:
            return
        name = kwargs.get("name") or (serialized or {}).get("name") or "tool"
        arguments: dict[str, Any] | str
        if inputs is not None:
            arguments = dict(inputs)
        else:
            try:
                parsed = json.loads(input_str)
                arguments = parsed if isinstance(parsed, dict) else input_str
            except ValueError:
                arguments = input_str
        call = ToolCall(str(kwargs.get("tool_call_id") or run_id), str(name), arguments)
        run.tools[run_id] = call
        d = run.guard.before_tool(call)
        if d.stop:
            self._stop(run, d)

    def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        run = self._leave(run_id)
        if run is None:
            return
        content = _text(getattr(output, "content", output))
        code = "TOOL_ERROR" if getattr(output, "status", None) == "error" else None
        self._tool_answered(run, run_id, content, code)

    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._leave(run_id)
        if run is None:
            return
        info = classify(error)
        self._tool_answered(
            run, run_id, tool_error_content(info.code, info.message), info.code, error
        )

    def _tool_answered(
        self,
        run: _Run,
        run_id: UUID,
        content: str,
        code: str | None,
        cause: BaseException | None = None,
    ) -> None:
        call = run.tools.pop(run_id, None)
        if call is None:
            return
        run.messages.append(Message("tool", content, tool_call_id=call.id))
        d = run.guard.after_tool(call, content, error_code=code)
        if d.stop:
            self._stop(run, d, cause)
