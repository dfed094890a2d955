"""LoopGuard: the one place where every stop decision of an agent loop is made.

A loop asks the guard at four points and does what the returned :class:`Decision` says::

    guard = LoopGuard(limits, registry=registry)
    guard.start(messages)
    while True:
        d = guard.before_step()                 # budgets, cancellation
        if d.done:
            break
        response = model.complete(messages, tools if d.tools_allowed else [])
        messages.append(response.message)
        d = guard.after_model(response)         # provider stop signal, completion check
        if d.action is Action.RUN_TOOLS:
            for call in response.message.tool_calls:
                d = guard.before_tool(call)     # gates, caps, repeat detectors
                if d.done:
                    break
                outcome = registry.execute(call, on_retry=guard.record_retry)
                messages.append(Message("tool", outcome.content, tool_call_id=call.id))
                if guard.after_tool(call, outcome).done:   # error and result detectors
                    break
        elif d.action is Action.REJECTED:
            messages.append(Message("user", d.feedback))
        if guard.end_step().done:               # idle-turn detector
            break
    result = guard.finish()

:func:`loopwatch.instrumentation.loop.run` is exactly this loop with the details filled in.
Once the guard has stopped, every further question returns the same stop decision.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from . import explain, semconv
from .decisions import (
    CONTINUE,
    LAST_STEP_NOTICE,
    RESEND,
    RUN_TOOLS,
    Action,
    Approver,
    Cancel,
    Decision,
    Guardrail,
    ProgressSignal,
    Settable,
    StepReport,
    ToolOutcomeLike,
    Verifier,
)
from .detectors import Detectors, ToolEvent
from .drops import record_drop
from .explain import describe_call
from .fingerprint import call_fingerprint, error_fingerprint, result_fingerprint, stable_json
from .limits import LimitPolicy, LoopLimits, resolve_limits, resolve_shadow
from .observer import (
    NOOP_OBSERVER,
    BudgetSnapshot,
    NoOpObserver,
    ObserverFactory,
    RunInfo,
    RunObserver,
    ToolRecord,
    get_observer_factory,
)
from .outcomes import UNKNOWN_ERROR, tool_error
from .reasons import LIMIT_OF, OUTCOME_OF, ProviderSignal, StopReason, classify_provider_stop
from .types import Message, ModelResponse, RunResult, Step, ToolCall, Usage

__all__ = [
    "LAST_STEP_NOTICE",
    "Action",
    "Approver",
    "Cancel",
    "Decision",
    "Guardrail",
    "LoopGuard",
    "ProgressSignal",
    "StepReport",
    "ToolOutcomeLike",
    "Verifier",
    "describe_call",
    "stop_reason_of",
]


_SHADOWED_EVENTS = ("start", "before_step", "after_model", "before_tool", "after_tool", "end_step")


def _approve_all(call: ToolCall) -> bool:
    return True


class _Registry(Protocol):
    def get(self, name: str) -> Any: ...


_ERROR_CODES_CIRCUIT = frozenset({"CIRCUIT_OPEN"})


def _arguments_of(call: ToolCall) -> Any:
    # Calls are compared by name and parsed arguments with ==, which for JSON data is exactly
    # stable-JSON equality (dict order never matters, at any depth; but 1, 1.0 and true are
    # equal). That spares hashing or encoding the arguments on every call.
    args = call.arguments
    if type(args) is str:
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


_SIGNALS: dict[str | None, ProviderSignal] = {}


def _signal(value: str | None) -> ProviderSignal:
    signal = _SIGNALS.get(value)
    if signal is None:
        signal = classify_provider_stop(value)
        if len(_SIGNALS) < 256:  # bounded: provider values are a small vocabulary
            _SIGNALS[value] = signal
    return signal


def _is_cancelled(cancel: Cancel | None) -> bool:
    if cancel is None:
        return False
    if isinstance(cancel, Settable):
        return bool(cancel.is_set())
    return bool(cancel())


@dataclass(slots=True)
class _ToolFlags:
    done: bool = False
    requires_approval: bool = False
    repeat_exempt: bool = False
    error_prefix: str | Sequence[str] | None = None


def _to_step(entry: tuple[Any, ...]) -> Step:
    index, kind, data = entry
    if kind == "model" and isinstance(data, ModelResponse):
        r = data
        return Step(
            index,
            kind,
            {
                "stop_reason": r.stop_reason,
                "tool_calls": len(r.message.tool_calls),
                "input_tokens": r.usage.input_tokens,
                "output_tokens": r.usage.output_tokens,
            },
        )
    return Step(index, kind, dict(data))


class _StepState:
    __slots__ = ("index", "new_calls", "new_results", "response", "tools")

    def __init__(self, index: int) -> None:
        self.index = index
        self.response: ModelResponse | None = None
        self.tools: list[ToolRecord] = []
        self.new_results = 0
        self.new_calls = 0


def stop_reason_of(error: BaseException) -> StopReason:
    """The stop an exception stands for: its ``stop_reason`` attribute when that names a stop
    reason other than ``completed`` (a model client raising for its open circuit breaker sets
    ``circuit_open``), else ``error``."""
    value = getattr(error, "stop_reason", None)
    try:
        reason = StopReason(value) if value is not None else StopReason.ERROR
    except ValueError:
        return StopReason.ERROR
    return StopReason.ERROR if reason is StopReason.COMPLETED else reason


class LoopGuard:
    """Counts what a run spends and decides, at every point, whether it goes on and why it stops.

    Args:
        limits: the run's limits, or a ``LimitPolicy`` to pick them by ``task_type``; default:
            the TOML file named by ``LOOPWATCH_LIMITS``, else ``LoopLimits()``.
        task_type: the task type the run is recorded under.
        agent_name: the agent's name (``invoke_agent {agent_name}`` span).
        registry: the tool registry, read for done / approval / repeat-exempt flags of tools.
        verify: completion check; unmet criteria go back to the model.
        cancel: cancellation signal; once set, no new step or tool call starts.
        approver: asked before each call of a tool with ``requires_approval``; none = refuse.
        guardrails: risk rules that can veto a call.
        progress: says whether a step brought new state (default: a tool result new to the run).
        repeat_exempt: tool names the repeat detectors skip (beside the registry's flags).
        observer: receives the run's lifecycle; else ``observer_factory``, else the factory
            installed with ``set_observer_factory``, else nothing.
        parent: the guard of the run this one runs inside: model calls, tool calls, tokens and
            cost are drawn from its budgets too, its deadline and cancellation apply here.
        clock: seconds, monotonic (default ``time.monotonic``; the parent's clock for a child).
        run_id: the run's id (default: a new uuid4 hex).
        attributes: extra attributes passed to the observer in ``RunInfo``.
        conversation_id: the conversation (session, thread) the run belongs to: the run's
            ``gen_ai.conversation.id`` and ``session.id``.
        provider: the model's provider (``openai``, ``anthropic`` ...): ``gen_ai.provider.name``
            until a response names it.
    """

    def __init__(
        self,
        limits: LoopLimits | LimitPolicy | None = None,
        *,
        task_type: str = "default",
        agent_name: str = "agent",
        registry: _Registry | None = None,
        verify: Verifier | None = None,
        cancel: Cancel | None = None,
        approver: Approver | None = None,
        guardrails: Sequence[Guardrail] = (),
        progress: ProgressSignal | None = None,
        repeat_exempt: Sequence[str] = (),
        observer: RunObserver | None = None,
        observer_factory: ObserverFactory | None = None,
        parent: LoopGuard | None = None,
        clock: Callable[[], float] | None = None,
        run_id: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        shadow: LoopLimits | None = None,
        conversation_id: str | None = None,
        provider: str | None = None,
    ) -> None:
        self.limits = resolve_limits(limits, task_type)
        self.task_type = task_type
        self.agent_name = agent_name
        self.run_id = run_id or uuid.uuid4().hex
        self.parent = parent
        self.clock: Callable[[], float] = clock or (parent.clock if parent else time.monotonic)
        self._registry = registry
        self._verify = verify
        self._cancel = cancel
        self._approver = approver
        self._guardrails = tuple(guardrails)
        self._progress = progress
        self._exempt_names = frozenset(repeat_exempt)
        self._attributes = dict(attributes or {})
        self.conversation_id = conversation_id
        self.provider = provider
        self._observer_arg = observer
        self._factory_arg = observer_factory
        self._observer: RunObserver = NOOP_OBSERVER
        self._observing = False
        # Ancestors, nearest first: usage is drawn from each of their budgets too.
        chain: list[LoopGuard] = []
        g = parent
        while g is not None:
            chain.append(g)
            g = g.parent
        self._ancestors = tuple(chain)
        lim = self.limits
        self._max_steps = lim.max_steps
        self._max_model_calls = lim.max_model_calls
        self._max_tool_calls = lim.max_tool_calls
        self._max_tokens = lim.max_tokens
        self._max_cost = lim.max_cost_usd
        self._max_wall = lim.max_wall_s
        self._per_tool = lim.max_calls_per_tool
        self._timed = self._max_wall is not None or any(a._max_wall is not None for a in chain)
        self._cancels = tuple(c for c in (cancel, *(a._cancel for a in chain)) if c is not None)
        # Guards (this one and ancestors) with a budget other than steps: the only ones to check.
        self._budgeted = tuple(g for g in (self, *chain) if g._has_budgets())
        self._answer_on_last_step = lim.answer_on_last_step
        # Limits never change during a run: one read-only map shared by every snapshot.
        self._limit_map: Mapping[str, float | None] = MappingProxyType(
            {b: lim.limit_of(b) for b in semconv.BUDGETS}
        )
        self._limits_on = tuple((b, v) for b, v in self._limit_map.items() if v)
        # Budget -> usage at which the soft warning fires; entries go once they fired.
        self._warn_at: dict[str, float] = dict(lim.warning_thresholds)

        # counters
        self.steps = 0
        """Steps started."""
        self.model_calls = 0
        """Model calls made."""
        self.tool_calls = 0
        """Tool calls started."""
        self._input_tokens = 0
        self._output_tokens = 0
        self._cost_usd = 0.0
        self.started_at: float | None = None
        """Clock reading at ``start()``."""
        self._ended_at: float | None = None
        self._calls_per_tool: dict[str, int] = {}
        self._flags: dict[str, _ToolFlags] = {}
        # The five detectors, fed the same events a replay feeds them (detectors.py).
        self.detectors = Detectors.for_limits(lim)
        """The run's detectors (read their state; the guard feeds them)."""
        self._repeats = self.detectors.repeated_action
        self._idle = self.detectors.no_progress
        self._last_call: ToolCall | None = None
        self._last_call_step = 0
        self._rejects = 0
        self._circuit_events: set[str] = set()
        # The call before_tool let through, its parsed arguments and whether it is exempt.
        self._pending: ToolCall | None = None
        self._pending_args: Any = None
        self._pending_exempt = False
        self._fingerprint = ""  # of the pending call, when an observer wants it
        self._step: _StepState | None = None
        self._spare_step = _StepState(0)  # reused: one step is open at a time
        self._checked = -1  # steps count at which end_step found another step allowed
        self._last_text: str | None = None
        self._model_started = False
        # The trace, stored raw and turned into Step records only when asked (cheaper per step).
        # Tool calls are their ToolEvent records; the rest (step, kind, detail) tuples.
        self._log: list[Any] = []
        # outcome
        self._started = False
        self._messages: list[Message] | None = None
        self._decision: Decision | None = None
        self._final: str | None = None
        self._result: RunResult | None = None
        # Shadow limits (DESIGN §8): a silent guard under the candidate limits, fed the same
        # events, so the run records whether and where they would have stopped it.
        self.shadow_limits: LoopLimits | None = (
            shadow if shadow is not None else resolve_shadow(limits, task_type)
        )
        self._shadow: LoopGuard | None = None
        if self.shadow_limits is not None:
            self._start_shadow(self.shadow_limits)

    def _has_budgets(self) -> bool:
        return self.limits.has_budgets

    # --- state a caller can read ------------------------------------------------------------

    @property
    def usage(self) -> Usage:
        """Tokens and cost so far."""
        return Usage(self._input_tokens, self._output_tokens, self._cost_usd)

    @property
    def tokens(self) -> int:
        """Input plus output tokens so far."""
        return self._input_tokens + self._output_tokens

    @property
    def stopped(self) -> bool:
        """The run is over (completed or stopped)."""
        return self._decision is not None

    @property
    def decision(self) -> Decision | None:
        """The final decision, once the run is over."""
        return self._decision

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the run ended (``None`` while it goes on)."""
        return self._decision.reason if self._decision else None

    @property
    def explanation(self) -> str:
        """The stop's explanation (empty while the run goes on, or on success)."""
        return self._decision.explanation if self._decision else ""

    @property
    def wall_s(self) -> float:
        """Seconds since ``start()``."""
        if self.started_at is None:
            return 0.0
        end = self._ended_at if self._ended_at is not None else self.clock()
        return end - self.started_at

    @property
    def records(self) -> list[Step]:
        """The run's trace so far, as ``Step`` records (``RunResult.steps``).

        One ``tool`` record per tool call run; a ``model`` record for each model call that asked
        for no tool; ``verify``, ``warning`` records; one ``stop`` record at the end.
        """
        steps: list[Step] = []
        append = steps.append
        for e in self._log:
            if type(e) is ToolEvent:
                code = e.error_code
                if code is None:
                    detail = {
                        "tool": e.name,
                        "call_id": e.call_id,
                        "status": "ok",
                        "retries": e.retries,
                    }
                else:
                    detail = {
                        "tool": e.name,
                        "call_id": e.call_id,
                        "status": "error",
                        "retries": e.retries,
                        "error_code": code,
                    }
                append(Step(e.step, "tool", detail))
            else:
                append(_to_step(e))
        return steps

    def counters(self) -> dict[str, float]:
        """Usage of the six budgets (``semconv.BUDGETS``)."""
        return {
            "steps": self.steps,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tokens": self._input_tokens + self._output_tokens,
            "cost_usd": self._cost_usd,
            "wall_s": self.wall_s,
        }

    def remaining_wall_s(self) -> float | None:
        """Seconds left to the nearest deadline (this run's or an ancestor's); ``None``: none."""
        if not self._timed:
            return None
        left: float | None = None
        for g in (self, *self._ancestors):
            if g._max_wall is not None and g.started_at is not None:
                r = g._max_wall - (self.clock() - g.started_at)
                left = r if left is None else min(left, r)
        return None if left is None else max(left, 0.0)

    def budget_snapshot(self) -> BudgetSnapshot:
        """Usage and limits of every budget, and the highest utilization."""
        used = self.counters()
        top = 0.0
        for b, limit in self._limits_on:
            u = used[b] / limit
            if u > top:
                top = u
        return BudgetSnapshot(used=used, limits=self._limit_map, max_utilization=top)

    def _snapshot(self) -> BudgetSnapshot:
        # For the observer: the counters now, the dicts and ratios built only if it reads them.
        start = self.started_at
        end = self._ended_at
        wall = 0.0 if start is None else (end if end is not None else self.clock()) - start
        return BudgetSnapshot.lazy(
            (
                self.steps,
                self.model_calls,
                self.tool_calls,
                self._input_tokens + self._output_tokens,
                self._cost_usd,
                wall,
            ),
            self._limit_map,
            self._limits_on,
        )

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, messages: list[Message] | None = None) -> None:
        """Start the run's clock and tell the observer. ``messages`` is kept for ``finish()``.

        Called by ``before_step`` if the loop does not call it.
        """
        if messages is not None:
            self._messages = messages
        if self._started:
            return
        self._started = True
        self.started_at = self.clock()
        info = RunInfo(
            run_id=self.run_id,
            task_type=self.task_type,
            agent_name=self.agent_name,
            limits=self.limits,
            limits_version=self.limits.version,
            parent_run_id=self.parent.run_id if self.parent else None,
            attributes=self._attributes,
            conversation_id=self.conversation_id,
            provider=self.provider,
            messages=self._messages if self._messages is not None else (),
            registry=self._registry,
        )
        observer = self._observer_arg
        if observer is None:
            factory = self._factory_arg or get_observer_factory()
            if factory is not None:
                try:
                    observer = factory(info)
                except Exception:
                    record_drop("observer_error")
        if observer is not None and not isinstance(observer, NoOpObserver):
            self._observer = observer
            self._observing = True
            self._notify("run_started", info, self._snapshot())

    def before_step(self) -> Decision:
        """Decide whether the next step may start (cancellation and every budget)."""
        if self._decision is not None:
            return self._decision
        if not self._started:
            self.start()
        if self._step is not None:
            d = self.end_step()
            if d.done:
                return d
        # end_step already asked; only time and cancellation can have changed since.
        if self._checked != self.steps or self._cancels or self._timed:
            stop = self._may_not_step()
            if stop is not None:
                return stop
        self.steps = n = self.steps + 1
        step = self._spare_step
        step.index = n
        step.response = None
        step.new_results = 0
        step.new_calls = 0
        if step.tools:
            step.tools = []
        self._step = step
        if self._observing:
            self._notify("step_started", n, self._snapshot())
        wa = self._warn_at
        if wa:
            at = wa.get("steps")
            if at is not None and n >= at:
                self._warn("steps", n)
            if self._timed and "wall_s" in wa:
                self._warn("wall_s", self.wall_s)
        if self._answer_on_last_step and self._max_steps is not None and n == self._max_steps > 1:
            return Decision(Action.CONTINUE, feedback=LAST_STEP_NOTICE, tools_allowed=False)
        return CONTINUE

    def _may_not_step(self) -> Decision | None:
        # Whether another step may start: checked when a step ends (so the last step's span
        # carries the stop) and again before the next one starts (time passes in between).
        n = self.steps
        if self._cancels and self._cancelled():
            return self._conclude(
                StopReason.CANCELLED, explain.stopped(n, explain.CANCELLED, after=True)
            )
        if self._max_steps is not None and n >= self._max_steps:
            note = explain.last_call_note(self._last_call, self._last_call_step)
            return self._conclude(
                StopReason.MAX_STEPS,
                explain.stopped(n, explain.max_steps_used(self._max_steps, note), after=True),
            )
        if self._budgeted:
            return self._check_budgets(n, None, model=True)
        return None

    def model_call_started(self, model: str | None = None) -> None:
        """Tell the observer a model call begins (optional; ``after_model`` implies it)."""
        self._model_started = True
        if self._observing:
            self._notify("model_call_started", self.steps, model, self._snapshot())

    def model_call_failed(self, error: BaseException, *, deadline: bool = False) -> Decision:
        """The model call raised: the run stops with ``error``; ``deadline=True``: it was
        interrupted at the run's deadline, the run stops with ``timeout``."""
        self.model_calls += 1
        for a in self._ancestors:
            a.model_calls += 1
            a._checked = -1
        if self._observing:
            if not self._model_started:
                self._notify("model_call_started", self.steps, None, self._snapshot())
            self._notify("model_call_ended", None, error, self._snapshot())
        self._model_started = False
        self._record("model", {"error": type(error).__name__})
        if deadline:
            return self.timeout("the model call")
        return self.fail(error, where="the model call")

    def tool_interrupted(self, call: ToolCall) -> Decision:
        """A started tool call was cut off at the run's deadline: the run stops with ``timeout``."""
        if self._decision is not None:
            return self._decision
        self._pending = None
        self._record(
            "tool",
            {
                "tool": call.name,
                "call_id": call.id,
                "status": "error",
                "error_code": "TIMEOUT",
                "retries": 0,
            },
        )
        if self._observing:
            record = ToolRecord(
                call=call,
                status="error",
                content="",
                fingerprint=call_fingerprint(call),
                result_fingerprint="",
                error_code="TIMEOUT",
                error_fingerprint=error_fingerprint(call.name, "TIMEOUT"),
            )
            self._notify("tool_call_ended", record, self._snapshot())
        return self.timeout(f"{describe_call(call)}")

    def after_model(self, response: ModelResponse) -> Decision:
        """Record the response's usage and decide from its stop signal and tool calls."""
        if self._decision is not None:
            return self._decision
        step = self._step
        if step is None or step.response is not None:
            # A loop that skipped before_step (or made a second model call in one step): this
            # response starts a new step, so steps keep counting model calls and max_steps holds.
            started = self.before_step()
            if started.done:
                return started
            step = self._step
            assert step is not None
        step.response = response
        self.model_calls += 1
        u = response.usage
        self._input_tokens += u.input_tokens
        self._output_tokens += u.output_tokens
        self._cost_usd += u.cost_usd
        if self._ancestors:
            for a in self._ancestors:
                a.model_calls += 1
                a._checked = -1
                a._input_tokens += u.input_tokens
                a._output_tokens += u.output_tokens
                a._cost_usd += u.cost_usd
        msg = response.message
        calls = msg.tool_calls
        if msg.content:
            self._last_text = msg.content
        if not calls:
            # A model call that asked for tools is told by its tool records; one that did not
            # (an answer, a truncation, a refusal, a pause) gets its own record.
            self._log.append((self.steps, "model", response))
        if self._observing:
            if not self._model_started:
                self._notify("model_call_started", self.steps, response.model, self._snapshot())
            self._notify("model_call_ended", response, None, self._snapshot())
        self._model_started = False
        wa = self._warn_at
        if wa and ("model_calls" in wa or "tokens" in wa or "cost_usd" in wa):
            self._warn("model_calls", self.model_calls)
            self._warn("tokens", self._input_tokens + self._output_tokens)
            self._warn("cost_usd", self._cost_usd)

        signal = _SIGNALS.get(response.stop_reason) or _signal(response.stop_reason)
        n = self.steps
        if signal is ProviderSignal.CONTINUE:
            if calls:
                return RUN_TOOLS
            if (response.stop_reason or "").strip().lower() == "pause_turn":
                return RESEND
            return self._conclude(
                StopReason.ERROR,
                explain.stopped(n, explain.signal_without_call(response.stop_reason)),
            )
        if signal is ProviderSignal.COMPLETED or (
            signal is ProviderSignal.UNKNOWN and response.stop_reason is None
        ):
            # A tool call outranks a "stop" signal: dropping it would leave the call unanswered.
            if calls:
                return RUN_TOOLS
            return self._completion(msg.content or "")
        if signal is ProviderSignal.OUTPUT_TRUNCATED:
            return self._conclude(
                StopReason.OUTPUT_TRUNCATED,
                explain.stopped(n, explain.output_truncated(response.stop_reason)),
            )
        if signal is ProviderSignal.REFUSAL:
            return self._conclude(
                StopReason.REFUSAL, explain.stopped(n, explain.refused(response.stop_reason))
            )
        return self._conclude(
            StopReason.ERROR,
            explain.stopped(n, explain.unknown_signal(response.stop_reason)),
        )

    def before_tool(self, call: ToolCall) -> Decision:
        """Decide whether ``call`` may run: cancellation, budgets, caps, repeats, gates.

        ``COMPLETE``/``REJECTED`` answer a call of the done tool (which is not run; on
        ``REJECTED`` answer the call with ``feedback`` and go on).
        """
        if self._decision is not None:
            return self._decision
        if self._step is None:
            started = self.before_step()
            if started.done:
                return started
        n = self.steps
        name = call.name
        flags = self._flags.get(name)
        if flags is None:
            flags = self._tool_flags(name)
        if flags.done:
            # The answer is in: accepted even past a budget (budgets stop spending, not answers).
            parsed = _arguments_of(call)
            if isinstance(parsed, Mapping) and isinstance(parsed.get("answer"), str):
                final = parsed["answer"]
            elif isinstance(parsed, str):
                final = parsed
            else:
                final = stable_json(parsed)
            return self._completion(final)
        if self._cancels and self._cancelled():
            return self._conclude(
                StopReason.CANCELLED,
                explain.stopped(n, explain.CANCELLED, before=call),
            )
        if self._budgeted:
            stop = self._check_budgets(n, call, model=False)
            if stop is not None:
                return stop
        per_tool = self._per_tool
        if per_tool is not None:
            cap = per_tool if isinstance(per_tool, int) else per_tool.get(name)
            if cap is not None and self._calls_per_tool.get(name, 0) >= cap:
                return self._conclude(
                    StopReason.MAX_TOOL_CALLS,
                    explain.stopped(n, explain.tool_cap_reached(name, cap), before=call),
                )

        args = call.arguments if type(call.arguments) is dict else _arguments_of(call)
        exempt = flags.repeat_exempt
        if not exempt:
            # A,B,A then B: refused before it runs when the repeat of A brought nothing new.
            found = self._repeats.before_call(name, args, n)
            if found is not None:
                return self._conclude(found.reason, found.explanation)
        for rule in self._guardrails:
            try:
                verdict = rule(call)
            except Exception as exc:
                return self.fail(exc, where=f"guardrail {getattr(rule, '__name__', rule)!r}")
            if verdict:
                why = (
                    verdict
                    if isinstance(verdict, str)
                    else f"rule {getattr(rule, '__name__', 'guardrail')!r}"
                )
                return self._conclude(
                    StopReason.GUARDRAIL,
                    explain.stopped(n, explain.guardrail_vetoed(call, why)),
                )
        if flags.requires_approval:
            if self._approver is None:
                return self._conclude(
                    StopReason.PERMISSION_DENIED,
                    explain.stopped(n, explain.no_approver(call)),
                )
            try:
                approved = self._approver(call)
            except Exception as exc:
                return self.fail(exc, where="the approver")
            if not approved:
                return self._conclude(
                    StopReason.PERMISSION_DENIED,
                    explain.stopped(n, explain.approval_refused(call)),
                )

        self.tool_calls += 1
        self._calls_per_tool[name] = self._calls_per_tool.get(name, 0) + 1
        if self._ancestors:
            for a in self._ancestors:
                a.tool_calls += 1
                a._checked = -1
        self._pending = call
        self._pending_args = args
        self._pending_exempt = exempt
        if self._observing:
            self._fingerprint = call_fingerprint(call)
            self._notify("tool_call_started", call, self._fingerprint, self._snapshot())
        wa = self._warn_at
        if wa:
            if "tool_calls" in wa:
                self._warn("tool_calls", self.tool_calls)
            if self._timed and "wall_s" in wa:
                self._warn("wall_s", self.wall_s)
        return CONTINUE

    def after_tool(
        self,
        call: ToolCall,
        outcome: ToolOutcomeLike | str,
        *,
        error_code: str | None = None,
        retries: int = 0,
    ) -> Decision:
        """Record a tool result and run the result and error detectors.

        ``outcome`` is a ``ToolOutcome``, or the text returned to the model: then ``error_code``
        marks a failure; without it the text is classified as everywhere else
        (``outcomes.tool_error``: a ``{"error": ..., "code": ...}`` object, or the tool's
        ``error_prefix``).
        """
        if self._decision is not None:
            return self._decision
        was_pending = self._pending is call
        self._pending = None
        name = call.name
        if was_pending:
            args = self._pending_args
            exempt = self._pending_exempt
        else:
            args = _arguments_of(call)
            exempt = (self._flags.get(name) or self._tool_flags(name)).repeat_exempt
        message: str | None = None
        if isinstance(outcome, str):
            content = outcome
            if error_code is not None:
                code: str | None = error_code
                message = content
            else:
                flags = self._flags.get(name) or self._tool_flags(name)
                err = tool_error(content, error_prefix=flags.error_prefix)
                code = None if err is None else err.code
                message = None if err is None else err.message
            ok = code is None
        else:
            content = outcome.content
            ok = outcome.ok
            if not ok:
                code = outcome.error_code or UNKNOWN_ERROR
                message = getattr(outcome, "error_message", None) or content
            else:
                code = None
            attempts = outcome.attempts
            retries = attempts - 1 if attempts > 1 else 0
        n = self.steps
        step = self._step

        event = ToolEvent(n, name, args, content, ok, code, message, exempt)
        event.call_id = call.id
        event.retries = retries
        found = self.detectors.after_call(event)
        if step is not None:
            if event.new_result:
                step.new_results += 1
            if event.new_call:
                step.new_calls += 1
        self._last_call = call
        self._last_call_step = n
        self._log.append(event)

        record: ToolRecord | None = None
        if self._observing or (step is not None and self._progress is not None):
            fp = ""
            if self._observing:
                fp = self._fingerprint if was_pending else call_fingerprint(call)
            record = ToolRecord(
                call=call,
                status="ok" if ok else "error",
                content=content,
                fingerprint=fp,
                result_fingerprint=result_fingerprint(content, name) if self._observing else "",
                error_code=code,
                error_fingerprint=error_fingerprint(name, code, message or "")
                if (code and self._observing)
                else None,
                retries=retries,
            )
            if step is not None:
                step.tools.append(record)
            if self._observing:
                self._notify("tool_call_ended", record, self._snapshot())

        if code in _ERROR_CODES_CIRCUIT:
            self._circuit_event(name)
            return self._conclude(
                StopReason.CIRCUIT_OPEN,
                explain.stopped(n, explain.circuit_open(call)),
            )
        if not ok:
            self._check_breaker(name)
        if found is not None:
            return self._conclude(found.reason, found.explanation)
        return CONTINUE

    def record_retry(self, event: Any) -> None:
        """Hear of a tool retry (pass as ``on_retry`` to ``ToolRegistry.execute``)."""
        if self._observing:
            attrs: dict[str, Any] = {
                semconv.GEN_AI_TOOL_NAME: str(getattr(event, "tool", "")),
                "loopwatch.retry.attempt": int(getattr(event, "attempt", 0)),
                "loopwatch.retry.delay_s": float(getattr(event, "delay_s", 0.0)),
                semconv.ERROR_CODE: str(getattr(event, "error_code", "")),
            }
            self._notify("event", semconv.EVENT_RETRY, attrs)

    def end_step(self) -> Decision:
        """Close the step: the idle-turn detector runs, then whether another step may start
        (steps, budgets, cancellation). Returns the step's decision."""
        step = self._step
        if step is None:
            return self._decision or CONTINUE
        if self._decision is None:
            progressed: bool | None = None
            if self._progress is not None:
                report = StepReport(
                    step.index,
                    step.response,
                    tuple(step.tools),
                    step.new_results,
                    step.new_calls,
                )
                try:
                    progressed = bool(self._progress(report))
                except Exception as exc:
                    return self.fail(exc, where="the progress signal")
            found = self._idle.end_step(step.index, progressed)
            if found is not None:
                return self._conclude(found.reason, found.explanation)
            ms = self._max_steps
            if self._cancels or self._budgeted or (ms is not None and step.index >= ms):
                stop = self._may_not_step()
                if stop is not None:
                    return stop
            self._checked = step.index
        self._step = None
        if self._observing:
            self._notify("step_ended", step.index, "continue", self._snapshot())
        return self._decision or CONTINUE

    # --- stopping ---------------------------------------------------------------------------

    def stop(self, reason: StopReason | str, explanation: str = "") -> Decision:
        """Stop the run for ``reason`` (a decision the caller took). The first stop wins."""
        if self._decision is not None:
            return self._decision
        reason = StopReason(reason)
        return self._conclude(
            reason, explanation or explain.stopped(self.steps, f"{reason.value}.")
        )

    def complete(self, final: str | None = None) -> Decision:
        """The run ended by itself where the guard could not see the answer (a framework
        returned its output): stop with ``completed`` and keep ``final`` as the run's final text.
        Nothing is checked: a completion check belongs in :meth:`after_model`, which sees the
        answer. The first stop wins."""
        if self._decision is not None:
            return self._decision
        if final is not None:
            self._final = final
        return self._conclude(StopReason.COMPLETED, "", final=final)

    def fail(self, error: BaseException, *, where: str = "the loop") -> Decision:
        """Stop with ``error`` naming the exception (``timeout``: TimeoutError at the deadline).

        An exception that knows which stop it stands for says so with a ``stop_reason``
        attribute (a model client's open circuit breaker: ``circuit_open``); see
        :func:`stop_reason_of`."""
        if self._decision is not None:
            return self._decision
        n = self.steps
        if isinstance(error, TimeoutError) and self._deadline_passed():
            return self._conclude(
                StopReason.TIMEOUT,
                explain.stopped(n, explain.interrupted(where, self._deadline_text())),
            )
        reason = stop_reason_of(error)
        return self._conclude(reason, explain.stopped(n, explain.raised(where, error)))

    def timeout(self, where: str) -> Decision:
        """Stop with ``timeout``: ``where`` (e.g. "the model call") was cut off at the deadline."""
        if self._decision is not None:
            return self._decision
        return self._conclude(
            StopReason.TIMEOUT,
            explain.stopped(
                self.steps, explain.interrupted(where, self._deadline_text(), advise=True)
            ),
        )

    def _start_shadow(self, limits: LoopLimits) -> None:
        shadow = LoopGuard(
            limits,
            task_type=self.task_type,
            agent_name=self.agent_name,
            registry=self._registry,
            approver=_approve_all,  # the real guard asked already; the shadow must not ask again
            progress=self._progress,
            repeat_exempt=tuple(self._exempt_names),
            observer=NOOP_OBSERVER,
            clock=self.clock,
            run_id=self.run_id,
        )
        self._shadow = shadow
        self._event_depth = 0
        for name in _SHADOWED_EVENTS:
            setattr(self, name, self._forwarding(getattr(self, name), getattr(shadow, name)))

    def _forwarding(
        self, own: Callable[..., Any], theirs: Callable[..., Any]
    ) -> Callable[..., Any]:
        # The shadow hears each event the loop sends once: not the guard's calls to itself
        # (after_model opening a step), which the shadow makes on its own.
        def event(*args: Any, **kwargs: Any) -> Any:
            if self._event_depth == 0:
                try:
                    theirs(*args, **kwargs)
                except Exception:
                    record_drop("shadow_error")  # a candidate never breaks the run it watches
            self._event_depth += 1
            try:
                return own(*args, **kwargs)
            finally:
                self._event_depth -= 1

        return event

    def shadow_result(self) -> dict[str, Any]:
        """Where the shadow limits would have stopped the run (empty without shadow limits).

        ``stop_reason`` (a stop reason, or ``finish`` when they would have let the run end as
        it did), ``step``, ``explanation``, ``limits_version`` and, for a stop, ``saved``: the
        usage (steps, model and tool calls, tokens, cost) the run spent past that point.
        """
        shadow = self._shadow
        if shadow is None or self.shadow_limits is None:
            return {}
        d = shadow.decision
        out: dict[str, Any] = {"limits_version": self.shadow_limits.version}
        if d is None or d.reason is None or d.reason is StopReason.COMPLETED:
            out.update(stop_reason="finish", step=self.steps, explanation="")
            return out
        used, at = self.counters(), shadow.counters()
        out.update(
            stop_reason=d.reason.value,
            step=shadow.steps,
            explanation=d.explanation,
            saved={
                b: max(float(used[b]) - float(at[b]), 0.0)
                for b in ("steps", "model_calls", "tool_calls", "tokens", "cost_usd")
            },
        )
        return out

    def finish(self, messages: Sequence[Message] | None = None) -> RunResult:
        """The run's result (built once; the observer hears ``run_ended``).

        Without a decision yet, the run ends with ``error`` (the loop ended on its own).
        """
        if self._result is not None:
            return self._result
        if not self._started:
            self.start()
        if self._decision is None:
            self._conclude(
                StopReason.ERROR,
                explain.stopped(self.steps, explain.NO_DECISION),
            )
        if self._step is not None:
            self._close_step()
        d = self._decision
        assert d is not None
        reason = d.reason or StopReason.ERROR
        msgs = list(messages if messages is not None else (self._messages or []))
        self._ended_at = self.clock()
        result = RunResult(
            messages=msgs,
            steps=self.records,
            final=self._final if reason is StopReason.COMPLETED else self._last_text,
            stop_reason=reason,
            outcome=OUTCOME_OF[reason],
            usage=self.usage,
            explanation=d.explanation,
            run_id=self.run_id,
            task_type=self.task_type,
            limit=LIMIT_OF.get(reason),
            limits_version=self.limits.version,
            counters=self.counters(),
            progress=self.progress(),
            agent_name=self.agent_name,
            shadow=self.shadow_result(),
        )
        self._result = result
        if self._observing:
            self._notify("run_ended", result, self._snapshot())
        return result

    def progress(self) -> dict[str, int]:
        """Evidence for judging a stopped run (``semconv.PROGRESS_*``)."""
        since = self.steps - semconv.PROGRESS_WINDOW
        earlier: list[tuple[str, Any]] = []
        recent: list[tuple[str, Any]] = []
        for e in self._log:
            if type(e) is ToolEvent:
                call = (e.name, e.arguments)
                if e.step <= since:
                    earlier.append(call)
                elif call not in recent:
                    recent.append(call)
        d = self.detectors
        return {
            "recent_new_calls": sum(1 for c in recent if c not in earlier),
            "max_same_error": d.repeated_error.peak,
            "max_same_call": d.tally.max_count,
        }

    # --- internals --------------------------------------------------------------------------

    def _tool_flags(self, name: str) -> _ToolFlags:
        spec = self._registry.get(name) if self._registry is not None else None
        flags = _ToolFlags(
            done=bool(getattr(spec, "done", False)),
            requires_approval=bool(getattr(spec, "requires_approval", False)),
            repeat_exempt=bool(getattr(spec, "repeat_exempt", False)) or name in self._exempt_names,
            error_prefix=getattr(spec, "error_prefix", None),
        )
        self._flags[name] = flags
        return flags

    def _record(self, kind: str, detail: dict[str, Any]) -> None:
        self._log.append((self.steps, kind, detail))

    def _check_budgets(self, n: int, call: ToolCall | None, *, model: bool) -> Decision | None:
        stop = self._budget_stop(model=model)
        if stop is None:
            return None
        reason, text = stop
        if call is None:
            note = explain.last_call_note(self._last_call, self._last_call_step)
            return self._conclude(reason, explain.stopped(n, text + note, after=True))
        return self._conclude(reason, explain.stopped(n, text, before=call))

    def _budget_stop(self, *, model: bool) -> tuple[StopReason, str] | None:
        for g in self._budgeted:
            whose = "" if g is self else f" of the parent run {g.run_id[:8]}"
            if model and g._max_model_calls is not None and g.model_calls >= g._max_model_calls:
                return StopReason.MAX_MODEL_CALLS, explain.budget_used_up(
                    "model-call", whose, str(g.model_calls), "max_model_calls", g._max_model_calls
                )
            if not model and g._max_tool_calls is not None and g.tool_calls >= g._max_tool_calls:
                return StopReason.MAX_TOOL_CALLS, explain.budget_used_up(
                    "tool-call", whose, str(g.tool_calls), "max_tool_calls", g._max_tool_calls
                )
            if g._max_tokens is not None and g.tokens >= g._max_tokens:
                return StopReason.TOKEN_BUDGET, explain.budget_used_up(
                    "token", whose, str(g.tokens), "max_tokens", g._max_tokens
                )
            if g._max_cost is not None and g._cost_usd >= g._max_cost:
                return StopReason.COST_BUDGET, explain.budget_used_up(
                    "cost", whose, f"${g._cost_usd:.4f}", "max_cost_usd", g._max_cost
                )
            if g._max_wall is not None and g.started_at is not None:
                elapsed = self.clock() - g.started_at
                if elapsed >= g._max_wall:
                    return StopReason.TIMEOUT, explain.budget_used_up(
                        "wall-clock", whose, f"{elapsed:.1f} s", "max_wall_s", g._max_wall
                    )
        return None

    def _cancelled(self) -> bool:
        return any(_is_cancelled(c) for c in self._cancels)

    def _deadline_passed(self) -> bool:
        left = self.remaining_wall_s()
        return left is not None and left <= 0

    def _deadline_text(self) -> str:
        for g in (self, *self._ancestors):
            if g._max_wall is not None:
                whose = "" if g is self else " of the parent run"
                return f"max_wall_s={g._max_wall}{whose}"
        return "no deadline"

    def _warn(self, budget: str, used: float) -> None:
        at = self._warn_at.get(budget)
        if at is None or used < at:
            return
        del self._warn_at[budget]
        limit = self.limits.limit_of(budget)
        self._record("warning", {"budget": budget, "used": used, "limit": limit})
        if self._observing:
            self._notify(
                "event",
                semconv.EVENT_BUDGET_WARNING,
                {
                    "loopwatch.budget": budget,
                    "loopwatch.budget.used": float(used),
                    "loopwatch.budget.limit": float(limit or 0.0),
                    "loopwatch.budget.threshold": float(self.limits.soft_threshold or 0.0),
                },
            )

    def _check_breaker(self, name: str) -> None:
        breaker = getattr(self._registry, "breaker", None)
        if breaker is None:
            return
        try:
            state = str(breaker.state(name))
        except Exception:
            return
        if state == "open":
            self._circuit_event(name)

    def _circuit_event(self, name: str) -> None:
        if name in self._circuit_events:
            return
        self._circuit_events.add(name)
        self._record("warning", {"circuit_open": name})
        if self._observing:
            self._notify("event", semconv.EVENT_CIRCUIT_OPEN, {semconv.GEN_AI_TOOL_NAME: name})

    def _completion(self, final: str) -> Decision:
        n = self.steps
        if self._verify is not None:
            candidate = self._candidate(final)
            try:
                unmet = [str(u) for u in self._verify(candidate)]
            except Exception as exc:
                return self.fail(exc, where="the completion check")
            self._record("verify", {"unmet": unmet, "rejects": self._rejects + (1 if unmet else 0)})
            if unmet:
                self._rejects += 1
                if self._observing:
                    self._notify(
                        "event",
                        semconv.EVENT_COMPLETION_REJECTED,
                        {
                            "loopwatch.completion.unmet": unmet,
                            "loopwatch.completion.rejects": self._rejects,
                        },
                    )
                mx = self.limits.max_completion_rejects
                if mx is not None and self._rejects >= mx:
                    self._last_text = final or self._last_text
                    return self._conclude(
                        StopReason.COMPLETION_REJECTED,
                        explain.stopped(n, explain.completion_rejected(self._rejects, mx, unmet)),
                    )
                feedback = (
                    "The task is not complete yet. Still unmet:\n"
                    + "\n".join(f"- {u}" for u in unmet)
                    + "\nKeep working on these, then answer again."
                )
                return Decision(Action.REJECTED, feedback=feedback)
        self._final = final
        return self._conclude(StopReason.COMPLETED, "", final=final)

    def _candidate(self, final: str) -> RunResult:
        return RunResult(
            messages=list(self._messages or []),
            steps=self.records,
            final=final,
            stop_reason=StopReason.COMPLETED,
            outcome=OUTCOME_OF[StopReason.COMPLETED],
            usage=self.usage,
            explanation="",
            run_id=self.run_id,
            task_type=self.task_type,
            limits_version=self.limits.version,
            counters=self.counters(),
            progress=self.progress(),
            agent_name=self.agent_name,
        )

    def _conclude(
        self, reason: StopReason, explanation: str, *, final: str | None = None
    ) -> Decision:
        action = Action.COMPLETE if reason is StopReason.COMPLETED else Action.STOP
        d = Decision(action, reason, explanation, final=final)
        self._decision = d
        self._record("stop", {"reason": reason.value, "explanation": explanation})
        if self._step is not None:
            self._close_step()
        return d

    def _close_step(self) -> None:
        step = self._step
        self._step = None
        if step is not None and self._observing:
            d = self._decision
            decision = d.reason.value if d is not None and d.reason is not None else "continue"
            self._notify("step_ended", step.index, decision, self._snapshot())

    def _notify(self, method: str, *args: Any) -> None:
        try:
            getattr(self._observer, method)(*args)
        except Exception:
            record_drop("observer_error")
