"""Foreign traces → runs: the run span, its steps, tool calls, usage, derived stop, replay.

:func:`runs_of_trace` takes the :class:`~.conventions.SpanView` objects of one trace (in any
order) and gives one :class:`ForeignRun` per run found in it (docs/foreign.md):

* the run span is each outermost agent span (GenAI ``invoke_agent``, OpenInference ``AGENT``,
  OpenLLMetry ``agent``) when every model and tool span is inside one; otherwise (no agent span,
  or calls outside them, as LangGraph's nodes are) the trace is one run, whose run span is its
  root (else its earliest span whose parent was not received);
* each model-call span is a step, in start order; each tool span belongs to the step whose model
  call started last before it; a span belongs to the run of its nearest agent ancestor;
* the recorded run is replayed through the same guard and detector objects as
  ``loopwatch import`` (:func:`~loopwatch.queries.ingest.importer.replay_run`); a run that
  provably finishes as recorded is answered by the detectors alone (:mod:`.replaying`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.reasons import ProviderSignal, classify_provider_stop
from loopwatch.instrumentation.runtime.types import ToolCall

from ..chatlogs import RecordedRun, RecordedTool, RecordedTurn
from ..importer import RunReplay
from .conventions import AGENT, MODEL, TOOL, SpanView
from .reasons import DerivedStop, derive_stop
from .replaying import replay_foreign_run

__all__ = ["SERVICE_LABEL", "ForeignRun", "runs_of_trace", "tool_error"]

_ASKED: Final = (ProviderSignal.CONTINUE,)
SERVICE_LABEL: Final = "service.name"
"""The task-type key that reads the run's resource ``service.name``."""


@dataclass(slots=True)
class ForeignRun:
    """One run reconstructed from a foreign trace."""

    run: SpanView
    """The run span (an agent span, or the trace's root)."""
    spans: list[SpanView]
    """Every span of the run, the run span included."""
    steps: list[tuple[SpanView | None, list[SpanView]]]
    """Per step: its model-call span (``None`` for tool calls before any) and its tool spans."""
    task_type: str
    agent_name: str
    stop: DerivedStop
    recorded: RecordedRun
    replay: RunReplay
    limits: LoopLimits
    parent_run_id: str | None = None
    conversation_id: str | None = None
    costs: list[float] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        """The run span's id: the run id of a foreign run (as before reconstruction)."""
        return self.run.span_id


def _is_top(view: SpanView, by_id: dict[str, SpanView]) -> bool:
    parent = view.parent_id
    seen = 0
    while parent is not None and seen < 256:
        p = by_id.get(parent)
        if p is None:
            return True
        if p.role == AGENT:
            return False
        parent, seen = p.parent_id, seen + 1
    return True


def _run_of(view: SpanView, by_id: dict[str, SpanView], runs: dict[str, SpanView]) -> str | None:
    """The run span id of ``view``'s nearest run ancestor (``None`` when the chain breaks)."""
    current: SpanView | None = view
    seen = 0
    while current is not None and seen < 256:
        if current.span_id in runs:
            return current.span_id
        parent = current.parent_id
        current = by_id.get(parent) if parent is not None else None
        seen += 1
    return None


def _run_spans(views: Sequence[SpanView], by_id: dict[str, SpanView]) -> list[SpanView]:
    agents = [v for v in views if v.role == AGENT and _is_top(v, by_id)]
    calls = [v for v in views if v.role in (MODEL, TOOL)]
    if agents and not any(_is_top(v, by_id) for v in calls):
        return agents
    if not calls:
        return agents
    # Calls outside every agent span (LangGraph: the graph is the loop, its nodes the agent
    # spans): the whole trace is one run.
    roots = [v for v in views if v.parent_id is None] or [
        v for v in views if v.parent_id not in by_id
    ]
    return [min(roots, key=lambda v: (v.start_ns, v.span_id))]


def tool_error(view: SpanView) -> tuple[str, str] | None:
    """A failed tool span's (code, message): an ERROR status or a recorded exception."""
    if not (view.error or view.exceptions):
        return None
    kind, message = view.exceptions[-1] if view.exceptions else ("", "")
    code = kind.rsplit(".", 1)[-1] or "ERROR"
    return code, message or view.status_message or view.result or ""


# Hex digits as letters: a fingerprint passed as text must survive every volatile-text
# normalization (docs/runtime.md), which turns hex runs and digits into placeholders.
_LETTERS: Final = str.maketrans("0123456789abcdef", "ghijklmnopqrstuv")


def _token(fingerprint: str | None) -> str | None:
    return fingerprint.translate(_LETTERS) if fingerprint is not None else None


def _recorded_tool(view: SpanView, k: int) -> RecordedTool:
    # The fingerprints stand for the arguments and the result: equal texts, equal fingerprints,
    # which is all the detectors compare.
    name = view.tool_name or "unknown"
    call = ToolCall(view.tool_call_id or f"call_{k}", name, _token(view.call_fp) or {})
    error = tool_error(view)
    if error is not None:
        return RecordedTool(call, _token(view.result_fp) or error[1], error[0], error[1])
    # Without a captured result a repeat cannot be told from progress: leave it unanswered.
    return RecordedTool(call, _token(view.result_fp))


def _steps(spans: Sequence[SpanView]) -> list[tuple[SpanView | None, list[SpanView]]]:
    models = sorted((s for s in spans if s.role == MODEL), key=lambda s: (s.start_ns, s.span_id))
    tools = sorted((s for s in spans if s.role == TOOL), key=lambda s: (s.start_ns, s.span_id))
    steps: list[tuple[SpanView | None, list[SpanView]]] = [(m, []) for m in models]
    if not steps:
        return [(None, tools)] if tools else []
    early: list[SpanView] = []
    k = 0
    for tool in tools:
        while k + 1 < len(models) and models[k + 1].start_ns <= tool.start_ns:
            k += 1
        if tool.start_ns < models[0].start_ns:
            early.append(tool)
        else:
            steps[k][1].append(tool)
    if early:
        steps.insert(0, (None, early))
    return steps


def _recorded(
    run_index: int, steps: Sequence[tuple[SpanView | None, list[SpanView]]]
) -> RecordedRun:
    turns = []
    k = 0
    for model, tools in steps:
        recorded = []
        for tool in tools:
            k += 1
            recorded.append(_recorded_tool(tool, k))
        finish = model.finish_reasons[0] if model is not None and model.finish_reasons else None
        if finish is not None and not recorded and classify_provider_stop(finish) in _ASKED:
            finish = None  # asked for tools no span shows ran: the replay sees an answer
        turns.append(
            RecordedTurn(
                None,
                tuple(recorded),
                finish,
                model.input_tokens if model is not None else None,
                model.output_tokens if model is not None else None,
                model.model if model is not None else None,
            )
        )
    return RecordedRun(run_index, tuple(turns), len(turns))


def _name_of(span_name: str) -> str:
    """``invoke_agent support`` → ``support``; any other span name as it is."""
    return span_name.split(" ", 1)[1] if span_name.startswith("invoke_agent ") else span_name


def _task_type(run: SpanView, spans: Sequence[SpanView], keys: Sequence[str]) -> str:
    ordered = [run, *(s for s in spans if s is not run)]
    for key in keys:
        if key == SERVICE_LABEL:
            if run.service:
                return run.service
            continue
        for view in ordered:
            for k, value in view.labels:
                if k == key:
                    return value
    return "unknown"


def runs_of_trace(
    views: Sequence[SpanView],
    task_type_keys: Sequence[str],
    limits_for: Callable[[str], LoopLimits],
) -> list[ForeignRun]:
    """The runs of one trace's foreign spans (see the module docstring)."""
    by_id = {v.span_id: v for v in views}
    run_spans = _run_spans(views, by_id)
    if not run_spans:
        return []
    runs = {r.span_id: r for r in run_spans}
    members: dict[str, list[SpanView]] = {r.span_id: [] for r in run_spans}
    only = run_spans[0].span_id if len(run_spans) == 1 else None
    for view in views:
        owner = _run_of(view, by_id, runs) or only
        if owner is not None:
            members[owner].append(view)
    out = []
    for index, run in enumerate(sorted(run_spans, key=lambda r: r.start_ns), 1):
        spans = members[run.span_id]
        steps = _steps(spans)
        task_type = _task_type(run, spans, task_type_keys)
        limits = limits_for(task_type)
        recorded = _recorded(index, steps)
        replay = replay_foreign_run(recorded, limits, task_type=task_type, run_id=run.span_id)
        nested = (s.agent_name for s in spans if s.role == AGENT and s.agent_name)
        name = run.agent_name or next(nested, None) or _name_of(run.name)
        conversation = next((s.conversation_id for s in spans if s.conversation_id), None)
        out.append(
            ForeignRun(
                run, spans, steps, task_type, name, derive_stop(run, spans), recorded,
                replay, limits, conversation_id=conversation,
                costs=[s.cost_usd for s in spans if s.role == MODEL and s.cost_usd is not None],
            )
        )  # fmt: skip
    return out
