"""When a foreign trace is complete: live mode's bookkeeping of traces still arriving.

Spans of one trace arrive in several requests and out of order. :class:`TraceAssembler` keeps
the foreign spans of each recent trace (as :class:`~.conventions.SpanView` objects) and decides
when the trace is final (docs/foreign.md, "When a trace is final"):

* its run span has arrived (an agent span, or the trace's root: a span without a parent) and no
  span of the trace arrived for :attr:`ForeignOptions.grace_s` seconds; or
* no run span came, and :attr:`ForeignOptions.max_wait_s` passed since its last span.

A final trace is rebuilt into runs (:mod:`.reconstruct`) and written over what the store held
for it. Its spans stay in memory for :attr:`ForeignOptions.keep_s`: a late span re-opens the
trace, which is rebuilt whole after another grace period. After that a late span of the trace is
counted (``late_dropped``) and left as stored.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits, resolve_limits

from .conventions import AGENT, SpanView
from .reconstruct import ForeignRun, runs_of_trace
from .rows import derived_table

__all__ = ["DEFAULT_TASK_TYPE_KEYS", "AssemblerCounts", "ForeignOptions", "TraceAssembler"]

DEFAULT_TASK_TYPE_KEYS: Final = ("gen_ai.agent.name", "agent.name", "traceloop.workflow.name",
                                 "service.name")  # fmt: skip
"""Where a foreign run's task type comes from, first found wins."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ForeignOptions:
    """How foreign traces become runs (``loopwatch serve --foreign-*``)."""

    task_type_keys: tuple[str, ...] = DEFAULT_TASK_TYPE_KEYS
    """Span attributes (``service.name``: the resource's) giving the task type, first found."""
    grace_s: float = 5.0
    """A trace is final once its run span arrived and no span came for this long."""
    max_wait_s: float = 60.0
    """A trace whose run span never arrives is built this long after its last span."""
    keep_s: float = 600.0
    """A final trace's spans are kept this long, to rebuild it when a late span comes."""
    max_spans: int = 500_000
    """Spans held at most; past it the oldest final traces are forgotten, then the oldest
    pending ones are built early."""
    limits: LimitPolicy | LoopLimits | None = None
    """The limits the runs are replayed under (default: ``$LOOPWATCH_LIMITS``, else built-in)."""

    @property
    def build_interval_s(self) -> float:
        """Serve builds the traces final by then at most this often (the grace period, at
        most a second): each build writes its runs in one transaction, whose fixed cost is
        then paid once for many runs (docs/foreign.md, "When a trace is final")."""
        return min(1.0, self.grace_s)

    def __post_init__(self) -> None:
        for name in ("grace_s", "max_wait_s", "keep_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)!r}")
        if not self.task_type_keys:
            raise ValueError("task_type_keys must name at least one attribute")


@dataclass(slots=True)
class _Trace:
    spans: dict[str, SpanView] = field(default_factory=dict)
    last_seen: float = 0.0
    has_run_span: bool = False
    final: bool = False
    built_at: float = 0.0


@dataclass(slots=True)
class AssemblerCounts:
    """What the assembler did since start-up."""

    traces_built: int = 0
    runs_built: int = 0
    rebuilt: int = 0
    """Traces built again because late spans came."""
    late_dropped: int = 0
    """Spans of traces already forgotten: stored as received, not joined to their run."""


class TraceAssembler:
    """Foreign spans by trace until each trace is final; see the module docstring. Not
    thread-safe: live mode calls it from its writer thread only."""

    def __init__(
        self,
        options: ForeignOptions = ForeignOptions(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.counts = AssemblerCounts()
        self._clock = clock
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        # The traces not final, in order of their last span: what due() looks at. Final ones
        # wait in _traces for late spans (keep_s) and are never walked again per commit.
        self._pending: OrderedDict[str, _Trace] = OrderedDict()
        self._forgotten: OrderedDict[str, float] = OrderedDict()
        self._held = 0
        self._limits: dict[str, LoopLimits] = {}
        self._next_build = float("-inf")  # tables(paced=True) builds from then on

    @property
    def held(self) -> int:
        """Spans held in memory."""
        return self._held

    def limits_for(self, task_type: str) -> LoopLimits:
        """The limits a run of ``task_type`` is replayed under (resolved once per task type)."""
        limits = self._limits.get(task_type)
        if limits is None:
            limits = self._limits[task_type] = resolve_limits(self.options.limits, task_type)
        return limits

    def add(self, views: Sequence[SpanView]) -> None:
        """Take the foreign spans of a committed batch."""
        now = self._clock()
        touched: dict[str, _Trace] = {}  # each trace looked up and reordered once per batch
        for view in views:
            trace = touched.get(view.trace_id)
            if trace is None:
                trace = self._traces.get(view.trace_id)
                if trace is None:
                    if view.trace_id in self._forgotten:
                        self.counts.late_dropped += 1
                        continue
                    trace = self._traces[view.trace_id] = _Trace()
                elif trace.final:
                    trace.final = False
                    self.counts.rebuilt += 1
                touched[view.trace_id] = trace
            if view.span_id not in trace.spans:
                self._held += 1
            trace.spans[view.span_id] = view
            if view.role == AGENT or view.parent_id is None:
                trace.has_run_span = True
        for trace_id, trace in touched.items():
            trace.last_seen = now
            self._traces.move_to_end(trace_id)
            self._pending[trace_id] = trace
            self._pending.move_to_end(trace_id)

    def due(self, *, everything: bool = False) -> list[str]:
        """Trace ids that are final now and not built yet (all pending ones if ``everything``)."""
        now, o = self._clock(), self.options
        soonest = min(o.grace_s, o.max_wait_s)
        out = []
        # Traces are kept in order of their last span (add moves a trace to the end): once one
        # is too recent to be final, so are all after it.
        for trace_id, trace in self._pending.items():
            quiet = now - trace.last_seen
            if not everything and quiet < soonest:
                break
            if everything or quiet >= (o.grace_s if trace.has_run_span else o.max_wait_s):
                out.append(trace_id)
        if self._held > o.max_spans:
            chosen = set(out)
            out += [t for t in self._pending if t not in chosen][:64]
        return out

    def build(self, trace_ids: Sequence[str]) -> list[ForeignRun]:
        """The runs of ``trace_ids``, which are marked final (and kept for late spans)."""
        now = self._clock()
        runs: list[ForeignRun] = []
        keys = self.options.task_type_keys
        for trace_id in trace_ids:
            trace = self._traces[trace_id]
            built = runs_of_trace(list(trace.spans.values()), keys, self.limits_for)
            trace.final, trace.built_at = True, now
            self._pending.pop(trace_id, None)
            runs += built
            self.counts.traces_built += 1
            self.counts.runs_built += len(built)
        self._forget(now)
        return runs

    def tables(
        self, *, everything: bool = False, paced: bool = False
    ) -> tuple[pa.Table, pa.Table | None] | None:
        """The store rows of the traces final now (:meth:`due` then :meth:`build`): the derived
        span columns and the runs rows; ``None`` when no trace is due or none held a run.
        ``paced`` (serve's writer): ``None`` when the last paced call was less than
        :attr:`ForeignOptions.build_interval_s` ago, so that one write covers many runs."""
        if paced and not everything:
            now = self._clock()
            if now < self._next_build:
                return None
            self._next_build = now + self.options.build_interval_s
        due = self.due(everything=everything)
        if not due:
            self._forget(self._clock())
            return None
        runs = self.build(due)
        if not runs:
            return None
        return derived_table(runs)

    def _forget(self, now: float) -> None:
        o = self.options
        while self._traces:
            trace_id, trace = next(iter(self._traces.items()))
            old = trace.final and now - trace.built_at >= o.keep_s
            if not (old or (trace.final and self._held > o.max_spans)):
                break
            self._traces.popitem(last=False)
            self._held -= len(trace.spans)
            self._forgotten[trace_id] = now
        while self._forgotten and now - next(iter(self._forgotten.values())) > 3600.0:
            self._forgotten.popitem(last=False)
