"""How a run ends: the provider's stop signal, the completion check, the caller's and the
exceptions' stops, and the :class:`RunResult` (docs/runtime.md, "Completion").

:class:`RunEnding` is the ending side of :class:`~loopwatch.instrumentation.LoopGuard`.
The first stop wins and is sticky.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from . import explain, semconv
from .budgets import limit_name
from .completion import SIGNALS, provider_signal, rejection_event, stop_reason_of
from .decisions import RESEND, RUN_TOOLS, Action, Decision
from .detectors import Finding
from .explain import describe_call
from .gates import Refusal
from .reasons import OUTCOME_OF, ProviderSignal, StopReason
from .runstate import RunState
from .types import Message, ModelResponse, RunResult, ToolCall

__all__ = ["RunEnding"]


class RunEnding(RunState):
    """Stopping and completing a run, and its result."""

    def _signal_decision(self, response: ModelResponse) -> Decision:
        signal = SIGNALS.get(response.stop_reason) or provider_signal(response.stop_reason)
        calls = response.message.tool_calls
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
            return self._complete_with(response.message.content or "")
        if signal is ProviderSignal.OUTPUT_TRUNCATED:
            text = explain.output_truncated(response.stop_reason)
            return self._conclude(StopReason.OUTPUT_TRUNCATED, explain.stopped(n, text))
        if signal is ProviderSignal.REFUSAL:
            text = explain.refused(response.stop_reason)
            return self._conclude(StopReason.REFUSAL, explain.stopped(n, text))
        text = explain.unknown_signal(response.stop_reason)
        return self._conclude(StopReason.ERROR, explain.stopped(n, text))

    def model_call_failed(self, error: BaseException, *, deadline: bool = False) -> Decision:
        """The model call raised: the run stops with ``error``; ``deadline=True``: it was
        interrupted at the run's deadline, the run stops with ``timeout``."""
        self.run_usage.incr(model_calls=1)
        if self._observing:
            if not self._model_started:
                self._notify("model_call_started", self.steps, None, self._snapshot())
            self._notify("model_call_ended", None, error, self._snapshot())
        self._model_started = False
        self.log.add(self.steps, "model", {"error": type(error).__name__})
        if deadline:
            return self.timeout("the model call")
        return self.fail(error, where="the model call")

    def tool_interrupted(self, call: ToolCall) -> Decision:
        """A started tool call was cut off at the run's deadline: the run stops with ``timeout``."""
        if self._decision is not None:
            return self._decision
        record = self._calls.interrupted(call, self.steps)
        if self._observing:
            self._notify("tool_call_ended", record, self._snapshot())
        return self.timeout(f"{describe_call(call)}")

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
        attribute (see :func:`stop_reason_of`)."""
        if self._decision is not None:
            return self._decision
        n = self.steps
        if isinstance(error, TimeoutError) and self._deadline_passed():
            text = explain.interrupted(where, self._deadline_text())
            return self._conclude(StopReason.TIMEOUT, explain.stopped(n, text))
        text = explain.raised(where, error)
        return self._conclude(stop_reason_of(error), explain.stopped(n, text))

    def timeout(self, where: str) -> Decision:
        """Stop with ``timeout``: ``where`` (e.g. "the model call") was cut off at the deadline."""
        if self._decision is not None:
            return self._decision
        text = explain.interrupted(where, self._deadline_text(), advise=True)
        return self._conclude(StopReason.TIMEOUT, explain.stopped(self.steps, text))

    def shadow_result(self) -> dict[str, Any]:
        """Where the shadow limits would have stopped the run (empty without shadow limits):
        ``stop_reason`` (or ``finish``), ``step``, ``explanation``, ``limits_version`` and, for
        a stop, ``saved``: the usage the run spent past that point."""
        if self._shadow is None:
            return {}
        return self._shadow.result(self.counters(), self.steps)

    def finish(self, messages: Sequence[Message] | None = None) -> RunResult:
        """The run's result (built once; the observer hears ``run_ended``).

        Without a decision yet, the run ends with ``error`` (the loop ended on its own).
        """
        if self._result is not None:
            return self._result
        if not self._started:
            self._start()
        if self._decision is None:
            self._conclude(StopReason.ERROR, explain.stopped(self.steps, explain.NO_DECISION))
        if self._step is not None:
            self._close_step()
        d = self._decision
        assert d is not None
        reason = d.reason or StopReason.ERROR
        msgs = list(messages if messages is not None else (self._messages or []))
        self._ended_at = self.clock()
        final = self._final if reason is StopReason.COMPLETED else self._last_text
        result = self._run_result(reason, d.explanation, final, msgs, self.shadow_result())
        self._result = result
        if self._observing:
            self._notify("run_ended", result, self._snapshot())
        return result

    # A hand-written loop whose own code raises never reaches finish(): the run span would stay
    # current in the thread and adopt every later span. `with guard:` ends the run on the way out.
    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)

    def close(self, error: BaseException | None = None) -> RunResult:
        """End the run if nothing has yet, and return its result (what ``with guard:`` does).

        ``error`` is the exception leaving the loop, if any: an ``Exception`` stops the run with
        ``error`` naming it (or the stop it stands for), anything else (``KeyboardInterrupt``,
        task cancellation) with ``cancelled``. Without one, an undecided run ends as
        :meth:`finish` ends it. The exception itself is not swallowed.
        """
        if self._result is None and error is not None:
            if isinstance(error, Exception):
                self.fail(error)
            else:
                self.stop(StopReason.CANCELLED, explain.stopped(self.steps, explain.INTERRUPTED))
        return self.finish()

    def progress(self) -> dict[str, int]:
        """Evidence for judging a stopped run (``semconv.PROGRESS_*``)."""
        return self.log.progress(self.steps, self.detectors)

    def _complete_with(self, final: str) -> Decision:
        check = self._completion
        if check.verify is not None:
            try:
                unmet = check.unmet(self._candidate(final))
            except Exception as exc:
                return self.fail(exc, where="the completion check")
            self.log.add(self.steps, "verify", {"unmet": unmet, "rejects": check.rejects})
            if unmet:
                if self._observing:
                    attrs = rejection_event(unmet, check.rejects)
                    self._notify("event", semconv.EVENT_COMPLETION_REJECTED, attrs)
                if check.exhausted():
                    self._last_text = final or self._last_text
                    text = check.stop_text(self.steps, unmet)
                    return self._conclude(StopReason.COMPLETION_REJECTED, text)
                return Decision(Action.REJECTED, feedback=check.feedback(unmet))
        self._final = final
        return self._conclude(StopReason.COMPLETED, "", final=final)

    def _candidate(self, final: str) -> RunResult:
        return self._run_result(StopReason.COMPLETED, "", final, list(self._messages or []), {})

    def _run_result(
        self,
        reason: StopReason,
        explanation: str,
        final: str | None,
        messages: list[Message],
        shadow: dict[str, Any],
    ) -> RunResult:
        # Positional, in RunResult's field order (binding 16 keywords costs four times as
        # much; a result per run): steps and progress are left to the trace builder.
        budgets = [a for a, _ in self._budgets.accounts] if self._budgets else ()
        return RunResult(
            messages,
            [],
            final,
            reason,
            OUTCOME_OF[reason],
            self.usage,
            explanation,
            self.run_id,
            self.task_type,
            limit_name(reason, budgets),
            self.limits.version,
            self.counters(),
            {},
            self.agent_name,
            shadow,
            [
                {"detector": n.detector, "step": n.step, "message": n.message}
                for n in self.escalation.given
            ],
        ).defer(self._trace_builder())

    def _trace_builder(self) -> Callable[[str], Any]:
        # RunResult.steps and .progress as the run stands now, built when first read (most
        # callers never read them; docs/runtime.md, "Cost").
        log, entries, steps, detectors = self.log, len(self.log.entries), self.steps, self.detectors
        max_same_error, max_same_call = detectors.repeated_error.peak, detectors.tally.max_count

        def build(name: str) -> Any:
            if name == "steps":
                return log.records(entries)
            return {
                "recent_new_calls": log.recent_new_calls(steps, detectors.tally, entries),
                "max_same_error": max_same_error,
                "max_same_call": max_same_call,
            }

        return build

    def _conclude(
        self, reason: StopReason, explanation: str, *, final: str | None = None
    ) -> Decision:
        action = Action.COMPLETE if reason is StopReason.COMPLETED else Action.STOP
        d = Decision(action, reason, explanation, final=final)
        self._decision = d
        self.log.add(self.steps, "stop", {"reason": reason.value, "explanation": explanation})
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

    def _may_not_step(self) -> Decision | None:
        # Whether another step may start: checked when a step ends (so the last step's span
        # carries the stop) and again before the next one starts (time passes in between).
        n = self.steps
        if self._cancel is not None and self._cancel.cancelled():
            return self._conclude(
                StopReason.CANCELLED, explain.stopped(n, explain.CANCELLED, after=True)
            )
        if self._max_steps is not None and n >= self._max_steps:
            text = explain.max_steps_used(self._max_steps, self._last_call_note())
            return self._conclude(StopReason.MAX_STEPS, explain.stopped(n, text, after=True))
        found = self._budgets.exhausted(model=True) if self._budgets is not None else None
        if found is None:
            return None
        text = found[1] + self._last_call_note()
        return self._conclude(found[0], explain.stopped(n, text, after=True))

    def _last_call_note(self) -> str:
        return explain.last_call_note(self._calls.last_call, self._calls.last_call_step)

    def _refused(self, refusal: Refusal) -> bool:
        # A gate said no: the run stops, unless a detector's finding becomes a nudge.
        if refusal.finding is not None:
            return self._on_finding(refusal.finding).done
        self._conclude(refusal.reason, refusal.explanation)
        return True

    def _on_finding(self, found: Finding) -> Decision:
        nudge = self.escalation.nudge(found)
        if nudge is None:
            note = self.escalation.after_nudges(found)
            return self._conclude(found.reason, found.explanation + note)
        self._nudge = nudge.message if self._nudge is None else f"{self._nudge}\n{nudge.message}"
        self.log.add(self.steps, "nudge", {"detector": nudge.detector, "message": nudge.message})
        if self._observing:
            attrs = {semconv.NUDGE_DETECTOR: nudge.detector, semconv.STEP_INDEX: nudge.step}
            self._notify("event", semconv.EVENT_NUDGE, attrs)
        return Decision(Action.CONTINUE, feedback=nudge.message)
