"""A foreign run replayed: the guard's answer, read from its detectors alone when that is
provably the same answer (docs/foreign.md, "Detectors replayed").

Most reconstructed runs end as recorded: no detector fires, no budget is reached. For those the
full :class:`~loopwatch.instrumentation.runtime.guard.LoopGuard` of
:func:`~loopwatch.queries.ingest.importer.replay_run` (its budgets, gates, escalation, run log
and observer wiring, built per run) decides nothing the detectors alone do not: the answer is
"finish", at the run's last step, with the detectors' peaks. :func:`replay_foreign_run` feeds a
run's calls to the guard's own parts (:class:`Detectors` and the
:class:`ToolCallRecorder` that classifies each result for them) in the guard's order, and
answers from them only while everything the guard could stop for is ruled out:

* no budget besides steps, no per-tool cap (``max_calls_per_tool``), and no last-step notice
  that could fall on a recorded step;
* every step's recorded finish reason lets its tool calls run, and a step without calls ends
  the run as completed (a truncation, a refusal, a pause or an unknown signal is the guard's);
* no detector finding (a stop or a nudge), no open circuit, and no step past ``max_steps``.

Anything else is replayed by the full guard, so the answer is the guard's in every case.
"""

from __future__ import annotations

from typing import Final

from loopwatch.instrumentation.runtime.budgets import BudgetAccount
from loopwatch.instrumentation.runtime.completion import provider_signal
from loopwatch.instrumentation.runtime.detectors import Detectors, comparable_arguments
from loopwatch.instrumentation.runtime.gates import ToolTable
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.reasons import ProviderSignal
from loopwatch.instrumentation.runtime.runlog import RunLog
from loopwatch.instrumentation.runtime.toolcalls import CIRCUIT_OPEN, ToolCallRecorder
from loopwatch.instrumentation.runtime.usage import RunUsage

from ..chatlogs import RecordedRun
from ..importer import RunReplay, replay_run

__all__ = ["finish_peaks", "replay_foreign_run"]

_RUNS_TOOLS: Final = (ProviderSignal.CONTINUE, ProviderSignal.COMPLETED)
"""Signals with which a model call's tool calls run (``LoopGuard.after_model``)."""


_PEAK_NAMES: Final = tuple(d.reason.value for d in Detectors().all)
"""The detectors' stop reasons in ``Detectors.all`` order: ``Detectors.peaks()``'s keys."""


def _peaks(detectors: Detectors) -> dict[str, int]:
    # Detectors.peaks() without reading each detector's enum value again per run
    return dict(zip(_PEAK_NAMES, [d.peak for d in detectors.all], strict=True))


_BUDGETS_ON: dict[int, tuple[LoopLimits, bool]] = {}
"""Per limits object (by identity, kept alive here): some budget besides steps, or a per-tool
cap, is on. A serve process resolves a handful of limits, once per task type."""


def _budgets_on(limits: LoopLimits) -> bool:
    known = _BUDGETS_ON.get(id(limits))
    if known is not None and known[0] is limits:
        return known[1]
    on = limits.max_calls_per_tool is not None or BudgetAccount(limits, RunUsage()).any_on
    if len(_BUDGETS_ON) >= 256:
        _BUDGETS_ON.clear()
    _BUDGETS_ON[id(limits)] = (limits, on)
    return on


def _plain_limits(limits: LoopLimits, steps: int) -> bool:
    """Whether only steps and the detectors can stop a run of ``steps`` steps."""
    if _budgets_on(limits):
        return False
    last = limits.max_steps
    return not (limits.answer_on_last_step and last is not None and steps >= last)


def finish_peaks(run: RecordedRun, limits: LoopLimits) -> dict[str, int] | None:
    """The detectors' peaks when the guard under ``limits`` provably lets ``run`` finish as
    recorded; ``None`` when it may stop it (or anything is not plain: the guard decides)."""
    if not _plain_limits(limits, len(run.turns)):
        return None
    max_steps = limits.max_steps
    if (
        max_steps is not None
        and 1 <= max_steps <= len(run.turns)
        and all(turn.calls for turn in run.turns[:max_steps])
    ):
        # no answer up to step max_steps: the loop below can only end in None (at that step
        # or before), so the guard decides, without the detectors replayed here first
        return None
    detectors = Detectors.for_limits(limits)
    recorder = ToolCallRecorder(ToolTable(None, frozenset()), detectors, RunLog())
    for n, turn in enumerate(run.turns, 1):
        if not turn.calls:
            # no calls: the guard completes here (and skips the step's idle check), or stops
            signal = provider_signal(turn.finish_reason)
            if signal is ProviderSignal.COMPLETED or (
                signal is ProviderSignal.UNKNOWN and turn.finish_reason is None
            ):
                return _peaks(detectors)
            return None
        if provider_signal(turn.finish_reason or "tool_calls") not in _RUNS_TOOLS:
            return None
        for call, outcome in turn.answered():
            raw = call.arguments
            args = raw if type(raw) is dict else comparable_arguments(raw)
            if detectors.before_call(call.name, args, n) is not None:
                return None  # the cycle gate refuses (a stop or a nudge)
            recorder.admit(call, args, False, fingerprint=False)
            if outcome is None:
                continue  # let through, never answered (as replay_run)
            event, found = recorder.ran(call, outcome, None, 0, n, None)
            if found is not None or event.error_code == CIRCUIT_OPEN:
                return None
        if detectors.end_step(n, None) is not None:
            return None
        if max_steps is not None and n >= max_steps:
            return None  # another step may not start: the guard stops with max_steps
    return _peaks(detectors)


def replay_foreign_run(
    run: RecordedRun, limits: LoopLimits, *, task_type: str, run_id: str
) -> RunReplay:
    """What the guard would have done to ``run``: the same :class:`RunReplay` as
    :func:`~loopwatch.queries.ingest.importer.replay_run`, without building a guard for the
    runs that provably finish (:func:`finish_peaks`)."""
    peaks = finish_peaks(run, limits)
    if peaks is None:
        return replay_run(run, limits, task_type=task_type, run_id=run_id)
    saved = {"steps": 0.0, "model_calls": 0.0, "tool_calls": 0.0}
    if run.tokens is not None:
        saved["tokens"] = 0.0
    return RunReplay(None, len(run.turns), "", saved, peaks)
