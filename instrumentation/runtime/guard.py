"""LoopGuard: the one place where every stop decision of an agent loop is made.

A loop asks the guard at four points and does what the returned :class:`Decision` says
(``before_step``, ``after_model``, ``before_tool`` / ``after_tool`` per call, ``end_step``),
then calls ``finish()``; :func:`loopwatch.instrumentation.runtime.loop.run` is that loop, and
docs/runtime.md shows it written out. Once the guard has stopped, every further question
returns the same stop decision.

The guard is put together from parts (docs/runtime.md, "The guard's parts"): a
:class:`RunConfig`, a ``RunUsage``, the budget table (``budgets``), the gates (``gates``), the
detectors and the escalation of their findings into nudges (``escalation``), the tool-call
recorder (``toolcalls``), the run log and a shadow guard; what can be read of it is
``runstate.RunState``, how a run ends ``ending.RunEnding``.
"""

from __future__ import annotations

import time
from typing import Any, Unpack

from . import explain
from .budgets import BudgetAccount, SoftWarnings
from .completion import SIGNALS, CompletionCheck, done_answer
from .completion import stop_reason_of as stop_reason_of
from .config import ResolvedLimits, RunConfig, RunOptions, new_run_id, run_config
from .decisions import (
    CONTINUE,
    LAST_STEP_NOTICE,
    RUN_TOOLS,
    Action,
    Approver,
    Cancel,
    Decision,
    Guardrail,
    ProgressSignal,
    StepReport,
    ToolOutcomeLike,
    Verifier,
)
from .detectors import Detectors, comparable_arguments
from .ending import RunEnding
from .escalation import Escalation
from .explain import describe_call
from .gates import (
    BudgetGate,
    CancelGate,
    Gate,
    GateFailed,
    ToolFlags,
    ToolTable,
    build_gates,
    gates_for_tool,
)
from .limits import LoopLimits
from .observer import NOOP_OBSERVER
from .reasons import ProviderSignal, StopReason
from .runlog import RunLog
from .shadow import ShadowGuard
from .toolcalls import CIRCUIT_OPEN, ToolCallRecorder
from .types import Message, ModelResponse, ToolCall
from .usage import RunUsage

__all__ = [
    "LAST_STEP_NOTICE",
    "Action",
    "Approver",
    "Cancel",
    "Decision",
    "Guardrail",
    "LoopGuard",
    "ProgressSignal",
    "RunConfig",
    "StepReport",
    "ToolOutcomeLike",
    "Verifier",
    "describe_call",
    "stop_reason_of",
]


def _approve_all(call: ToolCall) -> bool:
    return True  # the real guard asked already; the shadow must not ask again


class LoopGuard(RunEnding):
    """Counts what a run spends and decides, at every point, whether it goes on and why it stops.

    Takes a :class:`RunConfig` (``config=``), its fields as keywords (a keyword wins over the
    config's field), or both; ``limits`` may also come first. See :class:`RunConfig` for each
    field; ``docs/runtime.md`` for what the guard checks where.
    """

    def __init__(
        self,
        limits: Any = None,
        /,
        *,
        config: RunConfig | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        if limits is not None:
            options["limits"] = limits
        cfg = run_config(config, **options)
        self._setup(cfg, cfg.resolve())

    def _setup(self, cfg: RunConfig, resolved: ResolvedLimits) -> None:
        self.config = cfg
        lim = self.limits = resolved.limits
        self.task_type, self.agent_name = cfg.task_type, cfg.agent_name
        self.conversation_id, self.provider = cfg.conversation_id, cfg.provider
        self.run_id: str = cfg.run_id or new_run_id()
        parent = self.parent = cfg.parent
        self.clock = cfg.clock or (parent.clock if parent else time.monotonic)
        self.run_usage = RunUsage(parent=parent.run_usage if parent else None)
        """What the run spent (and, through it, each ancestor)."""
        self.account = BudgetAccount(lim, self.run_usage)
        chain: list[LoopGuard] = []
        while parent is not None:
            chain.append(parent)
            parent = parent.parent
        self._ancestors = tuple(chain)  # nearest first
        self._max_steps = lim.max_steps
        self._timed = any(g.limits.max_wall_s is not None for g in (self, *chain))
        cancels = [c for c in (cfg.cancel, *(a.config.cancel for a in chain)) if c is not None]
        self._cancel = CancelGate(cancels) if cancels else None
        accounts = [
            (g.account, "" if g is self else f" of the parent run {g.run_id[:8]}")
            for g in (self, *chain)
            if g.account.any_on
        ]
        self._budgets = BudgetGate(accounts, self.clock) if accounts else None
        self._limit_map = lim.budget_limits
        self._limits_on = tuple((b, v) for b, v in self._limit_map.items() if v)
        self._warnings = SoftWarnings(lim.warning_thresholds)
        self._parts(cfg, lim)
        self._fresh_state()
        self.shadow_limits = resolved.shadow
        self._shadow = None if resolved.shadow is None else self._shadow_for(resolved.shadow)

    def _parts(self, cfg: RunConfig, lim: LoopLimits) -> None:
        self.tools = ToolTable(cfg.registry, frozenset(cfg.repeat_exempt))
        self.detectors = Detectors.for_limits(lim)
        """The run's detectors (read their state; the guard feeds them)."""
        self._idle = self.detectors.no_progress
        self.escalation = Escalation(lim)
        self.gates = build_gates(
            cancel=self._cancel,
            budgets=self._budgets,
            caps=lim.max_calls_per_tool,
            cycle=self.detectors.repeated_action,
            guardrails=cfg.guardrails,
            approver=cfg.approver,
        )
        """The checks a tool call passes before it runs, in order."""
        self._tool_gates: dict[str, tuple[ToolFlags, tuple[Gate, ...]]] = {}
        self._progress = cfg.progress
        self.log = RunLog()
        self._calls = ToolCallRecorder(self.tools, self.detectors, self.log)
        self._completion = CompletionCheck(cfg.verify, lim.max_completion_rejects)

    def _gates_of(self, name: str) -> tuple[ToolFlags, tuple[Gate, ...]]:
        tool = self.tools[name]
        self._tool_gates[name] = entry = (tool, gates_for_tool(self.gates, tool))
        return entry

    def _shadow_for(self, limits: Any) -> ShadowGuard:
        cfg = self.config.with_options(
            limits=limits, shadow=None, approver=_approve_all, observer=NOOP_OBSERVER,
            observer_factory=None, verify=None, cancel=None, guardrails=(), parent=None,
            clock=self.clock, run_id=self.run_id, on_stuck=None, max_nudges=None,
        )  # fmt: skip
        return ShadowGuard(LoopGuard(config=cfg), limits)

    # --- the loop's events (each also fed to the shadow guard) -------------------------------

    def start(self, messages: list[Message] | None = None) -> None:
        """Start the run's clock and tell the observer. ``messages`` is kept for ``finish()``.
        Called by ``before_step`` if the loop does not call it."""
        if self._shadow is not None:
            self._shadow.start(messages)
        self._start(messages)

    def before_step(self) -> Decision:
        """Decide whether the next step may start (cancellation and every budget). A nudge
        waiting for the model comes as the decision's ``feedback``."""
        if self._shadow is not None:
            self._shadow.before_step()
        d = self._begin_step()
        if self._nudge is None or d.done:
            return d
        text = self.take_nudge()
        feedback = text if d.feedback is None else f"{text}\n\n{d.feedback}"
        return Decision(d.action, feedback=feedback, tools_allowed=d.tools_allowed)

    def after_model(self, response: ModelResponse) -> Decision:
        """Record the response's usage and decide from its stop signal and tool calls."""
        if self._shadow is not None:
            self._shadow.after_model(response)
        if self._decision is not None:
            return self._decision
        step = self._step
        if step is None or step.response is not None:
            # A loop that skipped before_step (or made a second model call in one step): this
            # response starts a new step, so steps keep counting model calls and max_steps holds.
            started = self._begin_step()
            if started.done:
                return started
            step = self._step
            assert step is not None
        step.response = response
        u = self.run_usage
        u.add_model_call(response.usage)
        msg = response.message
        if msg.content:
            self._last_text = msg.content
        if not msg.tool_calls:
            # A model call that asked for tools is told by its tool records; one that did not
            # (an answer, a truncation, a refusal, a pause) gets its own record.
            self.log.add(self.steps, "model", response)
        if self._observing:
            if not self._model_started:
                self._notify("model_call_started", self.steps, response.model, self._snapshot())
            self._notify("model_call_ended", response, None, self._snapshot())
        self._model_started = False
        if self._warnings.after_model:
            self._warn("model_calls", u.model_calls)
            self._warn("tokens", u.tokens)
            self._warn("cost_usd", u.cost_usd)
        if msg.tool_calls and SIGNALS.get(response.stop_reason) is ProviderSignal.CONTINUE:
            return RUN_TOOLS  # the common case, decided here
        return self._signal_decision(response)

    def before_tool(self, call: ToolCall) -> Decision:
        """Decide whether ``call`` may run: the gates, in order. ``COMPLETE``/``REJECTED``
        answer a call of the done tool (which is not run; on ``REJECTED`` answer the call with
        ``feedback`` and go on)."""
        if self._shadow is not None:
            self._shadow.before_tool(call)
        if self._decision is not None:
            return self._decision
        if self._step is None:
            started = self._begin_step()
            if started.done:
                return started
        entry = self._tool_gates.get(call.name)
        tool, gates = entry if entry is not None else self._gates_of(call.name)
        if tool.done:  # the answer is in: accepted even past a budget
            return self._complete_with(done_answer(call))
        args = (
            call.arguments if type(call.arguments) is dict else comparable_arguments(call.arguments)
        )
        n = self.steps
        try:
            for gate in gates:
                refusal = gate.check(call, args, tool, n)
                if refusal is not None and self._refused(refusal):
                    assert self._decision is not None
                    return self._decision
        except GateFailed as failed:
            return self.fail(failed.error, where=failed.where)
        self.run_usage.add_tool_call()
        self._calls.admit(call, args, tool.repeat_exempt, fingerprint=self._observing)
        if self._observing:
            self._notify("tool_call_started", call, self._calls.fingerprint, self._snapshot())
        if self._warnings.before_tool:
            pending = self._warnings.pending
            if "tool_calls" in pending:
                self._warn("tool_calls", self.run_usage.tool_calls)
            if self._timed and "wall_s" in pending:
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
        if self._shadow is not None:
            self._shadow.after_tool(call, outcome, error_code=error_code, retries=retries)
        if self._decision is not None:
            return self._decision
        step = self._step
        # the step's counts of new results and calls are for a progress signal's report
        counted = step if self._progress is not None else None
        ran, found = self._calls.ran(call, outcome, error_code, retries, self.steps, counted)
        if self._observing or (step is not None and self._progress is not None):
            record = self._calls.record(call, outcome, ran, observed=self._observing)
            if step is not None:
                step.tools.append(record)
            if self._observing:
                self._notify("tool_call_ended", record, self._snapshot())
        if ran.error_code == CIRCUIT_OPEN:
            self._circuit_event(call.name)
            return self._conclude(
                StopReason.CIRCUIT_OPEN, explain.stopped(self.steps, explain.circuit_open(call))
            )
        if not ran.ok and self.tools.breaker_open(call.name):
            self._circuit_event(call.name)
        return CONTINUE if found is None else self._on_finding(found)

    def end_step(self) -> Decision:
        """Close the step: the idle-turn detector runs, then whether another step may start
        (steps, budgets, cancellation). Returns the step's decision."""
        if self._shadow is not None:
            self._shadow.end_step()
        return self._end_step()

    # --- how the events are handled -----------------------------------------------------------

    def _begin_step(self) -> Decision:
        if self._decision is not None:
            return self._decision
        if not self._started:
            self._start()
        if self._step is not None:
            d = self._end_step()
            if d.done:
                return d
        # end_step already asked; only time, cancellation and a sub-run's spending can have
        # changed since.
        if (
            self._checked != self.steps
            or self._checked_spent != self.run_usage.spent
            or self._cancel is not None
            or self._timed
        ):
            stop = self._may_not_step()
            if stop is not None:
                return stop
        self.steps = n = self.steps + 1
        step = self._step = self._spare_step  # reused: one step is open at a time
        step.index, step.response, step.new_results, step.new_calls = n, None, 0, 0
        if step.tools:
            step.tools = []
        if self._observing:
            self._notify("step_started", n, self._snapshot())
        pending = self._warnings.pending
        if pending:
            at = pending.get("steps")
            if at is not None and n >= at:
                self._warn("steps", n)
            if self._timed and "wall_s" in pending:
                self._warn("wall_s", self.wall_s)
        last = self._max_steps if self.limits.answer_on_last_step else None
        if last is not None and n == last > 1:
            return Decision(Action.CONTINUE, feedback=LAST_STEP_NOTICE, tools_allowed=False)
        return CONTINUE

    def _end_step(self) -> Decision:
        step = self._step
        if step is None:
            return self._decision or CONTINUE
        if self._decision is None:
            progressed: bool | None = None
            signal = self._progress
            if signal is not None:
                report = StepReport(
                    step.index, step.response, tuple(step.tools), step.new_results, step.new_calls
                )
                try:
                    progressed = bool(signal(report))
                except Exception as exc:
                    return self.fail(exc, where="the progress signal")
            idle = self._idle
            if signal is None and not idle.streak and (idle.new_results or idle.new_calls):
                idle.new_results = idle.new_calls = 0  # NoProgress.end_step's usual case
            else:
                found = idle.end_step(step.index, progressed)
                if found is not None:
                    d = self._on_finding(found)
                    if d.done:
                        return d
            ms = self._max_steps
            if (
                self._cancel is not None
                or self._budgets is not None
                or (ms is not None and step.index >= ms)
            ):
                stop = self._may_not_step()
                if stop is not None:
                    return stop
            self._checked, self._checked_spent = step.index, self.run_usage.spent
        self._step = None
        if self._observing:
            self._notify("step_ended", step.index, "continue", self._snapshot())
        return self._decision or CONTINUE
