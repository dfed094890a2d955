"""Runs with known ground truth, written straight into a store file through Arrow.

:func:`generate_fleet` writes five task types whose right verdicts are known by
construction (docs/queries.md, "Verdicts, in this order"):

========== ============================================================ ===================
task type  how its runs behave                                          expected verdict
========== ============================================================ ===================
tight      ``max_steps=10`` cuts ~30% of runs that were still making    ``too_tight``
           progress (new calls in their last steps, no repeated errors)
loose      ``max_steps=40``, ``max_tokens=200000``: ~5× what successes   ``too_loose`` (both)
           need; no run hits them
looping    ``max_steps=12``: ~40% of runs loop on one call until the    ``stuck_not_tight``
           limit; successes need at most 7 steps
healthy    ``max_steps=12``, ``max_tokens=12000``, ``max_wall_s=30``;   ``ok`` (all three)
           ~2% of runs hit ``max_steps``
sparse     a dozen runs                                                  ``insufficient_data``
========== ============================================================ ===================

The expected *recommended* values are computed here, in plain Python, from the successful
runs' usage the generator drew (linear-interpolated p95 × (1 + margin), rounded up), so a
test compares the SQL + analysis path against an independent computation.

Tests, benchmarks and demos also use the lower-level :class:`SyntheticRun`,
:func:`write_runs` and :func:`write_spans`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loopwatch.instrumentation.runtime.reasons import LIMIT_OF, OUTCOME_OF, StopReason
from loopwatch.instrumentation.runtime.semconv import (
    BUDGETS,
    OP_CHAT,
    OP_EXECUTE_TOOL,
    OP_INVOKE_AGENT,
)

from ..analysis.recommend import fit_rows
from ..store.columns import SpanBatch
from ..store.database import Store

__all__ = [
    "BudgetTruth",
    "FleetTruth",
    "SyntheticRun",
    "SyntheticSpan",
    "TaskTypeTruth",
    "connect_store",
    "generate_fleet",
    "percentile",
    "reference_fleet_limits",
    "run_reference_fleet",
    "write_runs",
    "write_spans",
]

TIGHT, LOOSE, LOOPING, HEALTHY, SPARSE = "tight", "loose", "looping", "healthy", "sparse"
KINDS: tuple[str, ...] = (TIGHT, LOOSE, LOOPING, HEALTHY, SPARSE)

_TOKENS_PER_STEP = (800, 1200)
USD_PER_TOKEN = 2e-6
_WALL_PER_STEP = (1.5, 3.0)


# --- rows --------------------------------------------------------------------------------------
@dataclass(kw_only=True, slots=True)
class SyntheticRun:
    """One row of the ``runs`` table. Field names are column names of
    :data:`~loopwatch.queries.store.columns.RUNS_SCHEMA` (which types them), but ``started_at``."""

    run_id: str
    task_type: str
    started_at: datetime
    """Naive UTC, or aware (converted to UTC)."""
    stop_reason: str
    outcome: str | None = None
    """Filled from the stop reason when left out."""
    limit_name: str | None = None
    """Filled from the stop reason (the budget it used up) when left out."""
    wall_s: float | None = None
    steps: float | None = None
    model_calls: float | None = None
    tool_calls: float | None = None
    tokens: float | None = None
    cost_usd: float | None = None
    limit_steps: float | None = None
    limit_model_calls: float | None = None
    limit_tool_calls: float | None = None
    limit_tokens: float | None = None
    limit_cost_usd: float | None = None
    limit_wall_s: float | None = None
    recent_new_calls: int | None = None
    max_same_error: int | None = None
    max_same_call: int | None = None
    task_success: bool | None = None
    limits_version: str | None = None
    explanation: str | None = None
    agent_name: str | None = "synthetic"
    service: str | None = "synthetic"
    trace_id: str | None = None
    span_id: str | None = None
    parent_run_id: str | None = None
    conversation_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    max_utilization: float | None = None
    nudges: int | None = None
    source: str = "synthetic"


@dataclass(kw_only=True, slots=True)
class SyntheticSpan:
    """One row of the ``spans`` table (the columns the queries read). Field names are column
    names of :data:`~loopwatch.queries.store.columns.SPANS_SCHEMA`, which types them."""

    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    parent_span_id: str | None = None
    kind: str = "INTERNAL"
    status_code: str = "UNSET"
    service: str | None = "synthetic"
    operation: str | None = None
    run_id: str | None = None
    task_type: str | None = None
    step: int | None = None
    model: str | None = None
    tool_name: str | None = None
    tool_status: str | None = None
    tool_fingerprint: str | None = None
    result_fingerprint: str | None = None
    error_code: str | None = None
    error_fingerprint: str | None = None
    guard_decision: str | None = None
    stop_reason: str | None = None
    outcome: str | None = None
    limit_name: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


_EPOCH = datetime(1970, 1, 1)


def _utc_naive(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts


def _run_row(r: SyntheticRun) -> dict[str, Any]:
    """One ``runs`` row in the store's column shape (``started_at`` becomes ``start_ns``)."""
    reason = StopReason(r.stop_reason)
    row = {f.name: getattr(r, f.name) for f in fields(SyntheticRun) if f.name != "started_at"}
    row["outcome"] = r.outcome or OUTCOME_OF[reason].value
    row["limit_name"] = r.limit_name if r.limit_name is not None else LIMIT_OF.get(reason)
    row["trace_id"] = r.trace_id or r.run_id.replace("-", "")[:32].ljust(32, "0")
    # Exact microseconds: the store derives started_at from start_ns.
    start_ns = (_utc_naive(r.started_at) - _EPOCH) // timedelta(microseconds=1) * 1000
    row["start_ns"] = start_ns
    row["end_ns"] = start_ns + int((r.wall_s or 0.0) * 1e9)
    return row


def connect_store(target: str | Path | Any) -> tuple[Any, Callable[[], None]]:
    """A writable connection to ``target`` (a store path, or an open DuckDB connection) and the
    function that closes what was opened. A new file or a bare connection gets the store schema
    (via :class:`loopwatch.queries.store.Store`)."""
    store = _store(target)
    return store.connection, store.close


def _store(target: str | Path | Any) -> Store:
    if isinstance(target, (str, Path)):
        return Store(target)
    return Store.from_connection(target)


def write_runs(target: str | Path | Any, runs: Sequence[SyntheticRun]) -> int:
    """Store ``runs`` as ``runs`` rows (no spans) in one batch; returns the row count."""
    if not runs:
        return 0
    store = _store(target)
    try:
        store.write(SpanBatch.from_rows(runs=[_run_row(r) for r in runs]))
    finally:
        store.close()
    return len(runs)


def write_spans(target: str | Path | Any, spans: Sequence[SyntheticSpan]) -> int:
    """Store ``spans`` as ``spans`` rows (their ``runs`` rows are not derived) in one batch;
    returns the row count."""
    if not spans:
        return 0
    store = _store(target)
    try:
        rows = [{f.name: getattr(s, f.name) for f in fields(SyntheticSpan)} for s in spans]
        store.write(SpanBatch.from_rows(spans=rows))
    finally:
        store.close()
    return len(spans)


# --- ground truth -------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default, DuckDB's ``quantile_cont``)."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _round_up(value: float, resolution: float) -> float:
    # the tolerance keeps float noise (12.000000001) from rounding a whole number up
    return round(math.ceil(value / resolution - 1e-9) * resolution, 10)


@dataclass(frozen=True, slots=True)
class BudgetTruth:
    """What the analysis must find for one (task type, budget)."""

    verdict: str | None
    """The verdict by construction; ``None`` where the limit is off (no verdict)."""
    recommended: float | None
    """p95 of successful usage × (1 + margin), rounded up; ``None`` with too few successes."""
    current_limit: float | None


@dataclass(frozen=True, slots=True)
class TaskTypeTruth:
    """One generated task type."""

    name: str
    kind: str
    runs: int
    successes: int
    limit_hits: int
    limits: dict[str, float | None]
    budgets: dict[str, BudgetTruth] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FleetTruth:
    """Everything :func:`generate_fleet` wrote and what the analysis must conclude."""

    task_types: dict[str, TaskTypeTruth]
    start: datetime
    end: datetime
    runs: int
    spans: int
    margin: float
    min_runs: int


_RESOLUTION = {b: (0.001 if b == "cost_usd" else 1.0) for b in BUDGETS}

_LIMITS: dict[str, dict[str, float | None]] = {
    TIGHT: {"steps": 10},
    LOOSE: {"steps": 40, "tokens": 200_000},
    LOOPING: {"steps": 12},
    HEALTHY: {"steps": 12, "tokens": 12_000, "wall_s": 30},
    SPARSE: {"steps": 10},
}
_VERDICTS: dict[str, dict[str, str]] = {
    TIGHT: {"steps": "too_tight"},
    LOOSE: {"steps": "too_loose", "tokens": "too_loose"},
    LOOPING: {"steps": "stuck_not_tight"},
    HEALTHY: {"steps": "ok", "tokens": "ok", "wall_s": "ok"},
    SPARSE: {"steps": "insufficient_data"},
}


def generate_fleet(
    target: str | Path | Any,
    *,
    runs_per_type: int = 600,
    sparse_runs: int = 12,
    seed: int = 0,
    end: datetime | None = None,
    span: timedelta = timedelta(hours=24),
    kinds: Iterable[str] = KINDS,
    names: dict[str, str] | None = None,
    spans: bool = False,
    margin: float = 0.25,
    min_runs: int = 30,
) -> FleetTruth:
    """Write the ground-truth fleet into ``target`` (a store path or a DuckDB connection).

    ``runs_per_type`` runs for each kind except ``sparse`` (``sparse_runs``), started
    uniformly over ``[end - span, end)``; ``names`` renames kinds to task types;
    ``spans=True`` also writes run, step, model and tool spans for every run.
    ``margin`` and ``min_runs`` only shape the expected values (keep them equal to the
    analysis thresholds the test uses).
    """
    if runs_per_type < 50:
        raise ValueError(
            f"runs_per_type must be at least 50 for the verdicts to hold, got {runs_per_type}"
        )
    rng = random.Random(seed)
    end = (
        _utc_naive(end)
        if end is not None
        else datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    )
    start = end - span
    names = names or {}
    all_runs: list[SyntheticRun] = []
    all_spans: list[SyntheticSpan] = []
    truths: dict[str, TaskTypeTruth] = {}
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
        name = names.get(kind, kind)
        n = sparse_runs if kind == SPARSE else runs_per_type
        limits = {b: _LIMITS[kind].get(b) for b in BUDGETS}
        runs = [_draw_run(rng, kind, name, limits, start, span) for _ in range(n)]
        all_runs.extend(runs)
        if spans:
            for r in runs:
                all_spans.extend(_spans_for(rng, r))
        truths[name] = _truth(kind, name, runs, limits, margin, min_runs)
    con, close = connect_store(target)
    try:
        write_runs(con, all_runs)
        write_spans(con, all_spans)
    finally:
        close()
    return FleetTruth(truths, start, end, len(all_runs), len(all_spans), margin, min_runs)


DETECTOR_PEAKS = (
    "repeated_action",
    "repeated_tool_call",
    "repeated_error",
    "tool_failures",
    "no_progress",
)


def usage_rows(runs: Sequence[SyntheticRun]) -> list[dict[str, Any]]:
    """The rows the ``success_usage`` query returns for ``runs``, computed in plain Python
    (successful, or censored: a live run a limit stopped while progressing), oldest first."""
    out = []
    for r in sorted(runs, key=lambda r: r.started_at):
        outcome = r.outcome or OUTCOME_OF[StopReason(r.stop_reason)].value
        ok = r.task_success if r.task_success is not None else outcome == "success"
        looping = (r.recent_new_calls is not None and r.recent_new_calls < 1) or (
            r.max_same_error or 0
        ) > 1
        censored = (
            r.source != "import" and outcome == "limit" and r.task_success is not False
        ) and not looping
        if not (ok or censored):
            continue
        reason = StopReason(r.stop_reason)
        hit = r.limit_name or LIMIT_OF.get(reason)
        row: dict[str, Any] = {
            "task_type": r.task_type,
            "censored": censored,
            "hit": hit if censored else None,
        }
        for b in BUDGETS:
            v = getattr(r, b)
            row[b] = None if v is None or (v == 0 and b in ("tokens", "cost_usd", "wall_s")) else v
        out.append(row | {f"peak_{d}": None for d in DETECTOR_PEAKS})
    return out


def _truth(
    kind: str,
    name: str,
    runs: list[SyntheticRun],
    limits: dict[str, float | None],
    margin: float,
    min_runs: int,
) -> TaskTypeTruth:
    ok = [
        r
        for r in runs
        if r.outcome == "success" or (r.outcome is None and r.stop_reason == "completed")
    ]
    budgets = budget_truths(kind, name, usage_rows(runs), limits)
    hits = sum(1 for r in runs if StopReason(r.stop_reason) in LIMIT_OF)
    return TaskTypeTruth(name, kind, len(runs), len(ok), hits, limits, budgets)


def budget_truths(
    kind: str, name: str, rows: Sequence[dict[str, Any]], limits: dict[str, float | None]
) -> dict[str, BudgetTruth]:
    fit = fit_rows(name, rows, [b for b in BUDGETS if limits[b] is not None])
    budgets: dict[str, BudgetTruth] = {}
    for b in BUDGETS:
        rec = None if b in fit.unrecorded else fit.value(b)
        verdict = _VERDICTS[kind].get(b) if limits[b] is not None else None
        if verdict in ("too_loose", "ok") and rec is None and not fit.fit.lower_bound:
            verdict = "insufficient_data"  # too few successful runs to promise a value
        budgets[b] = BudgetTruth(verdict, rec, limits[b])
    return budgets


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def _draw_run(
    rng: random.Random,
    kind: str,
    name: str,
    limits: dict[str, float | None],
    start: datetime,
    span: timedelta,
) -> SyntheticRun:
    started = start + timedelta(seconds=rng.random() * span.total_seconds())
    steps_cap = int(limits["steps"] or 10**6)
    recent_new, same_error, same_call = 2, 0, 1
    if kind == TIGHT:
        need = rng.randint(4, 13)
        reason = "completed" if need <= steps_cap else "max_steps"
        steps = min(need, steps_cap)
        recent_new, same_error = rng.randint(1, 3), rng.choice((0, 0, 1))
    elif kind == LOOSE:
        steps = rng.randint(2, 6)
        reason = "completed"
    elif kind == LOOPING:
        if rng.random() < 0.4:
            steps, reason = steps_cap, "max_steps"
            recent_new, same_call = 0, steps_cap - rng.randint(1, 3)
            same_error = rng.choice((0, 0, 2, 3))
        else:
            steps, reason = rng.randint(2, 7), "completed"
    elif kind == HEALTHY:
        u = rng.random()
        if u < 0.02:
            steps, reason = steps_cap, "max_steps"
            recent_new, same_error = rng.choice((0, 2)), 0
        elif u < 0.05:
            steps, reason = rng.randint(2, 5), "repeated_error"
            recent_new, same_error = 0, 3
        else:
            steps, reason = rng.randint(2, 7), "completed"
    else:  # sparse
        need = rng.randint(3, 12)
        reason = "completed" if need <= steps_cap else "max_steps"
        steps = min(need, steps_cap)
    tokens = sum(rng.randint(*_TOKENS_PER_STEP) for _ in range(steps))
    wall = round(sum(rng.uniform(*_WALL_PER_STEP) for _ in range(steps)), 3)
    tool_calls = steps - 1 if reason == "completed" else steps
    if kind == LOOSE and reason == "completed" and rng.random() < 0.02:
        reason = "repeated_error"
    return SyntheticRun(
        run_id=_hex(rng, 32),
        task_type=name,
        started_at=started,
        stop_reason=reason,
        steps=steps,
        model_calls=steps,
        tool_calls=tool_calls,
        tokens=tokens,
        cost_usd=round(tokens * USD_PER_TOKEN, 6),
        wall_s=wall,
        input_tokens=int(tokens * 0.8),
        output_tokens=tokens - int(tokens * 0.8),
        recent_new_calls=recent_new,
        max_same_error=same_error,
        max_same_call=same_call,
        limits_version=f"{kind}-v1",
        limit_steps=limits["steps"],
        limit_model_calls=limits["model_calls"],
        limit_tool_calls=limits["tool_calls"],
        limit_tokens=limits["tokens"],
        limit_cost_usd=limits["cost_usd"],
        limit_wall_s=limits["wall_s"],
        # healthy runs stopped on a repeated error were nudged first; long completed ones were
        # nudged and recovered (read from the drawn run: no new random draw, the rest unchanged)
        nudges=1 if kind == HEALTHY and (reason == "repeated_error" or steps >= 7) else None,
    )
    if reason == "repeated_error" or (reason == "completed" and steps >= 7):
        return 1
    return None


def _spans_for(rng: random.Random, run: SyntheticRun) -> list[SyntheticSpan]:
    trace = run.trace_id or run.run_id[:32].ljust(32, "0")
    start_ns = (_utc_naive(run.started_at) - _EPOCH) // timedelta(microseconds=1) * 1000
    total_ns = int((run.wall_s or 1.0) * 1e9)
    steps = int(run.steps or 0)
    reason = StopReason(run.stop_reason)
    root = SyntheticSpan(
        trace_id=trace,
        span_id=_hex(rng, 16),
        name=f"{OP_INVOKE_AGENT} synthetic",
        start_ns=start_ns,
        end_ns=start_ns + total_ns,
        operation=OP_INVOKE_AGENT,
        run_id=run.run_id,
        task_type=run.task_type,
        stop_reason=run.stop_reason,
        outcome=OUTCOME_OF[reason].value,
        limit_name=LIMIT_OF.get(reason),
        status_code="UNSET" if reason is StopReason.COMPLETED else "ERROR",
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        cost_usd=run.cost_usd,
    )
    out = [root]
    looping = run.recent_new_calls == 0
    per = total_ns // max(steps, 1)
    for i in range(1, steps + 1):
        s0 = start_ns + (i - 1) * per
        last = i == steps
        decision = run.stop_reason if last and reason is not StopReason.COMPLETED else "continue"
        step = SyntheticSpan(
            trace_id=trace,
            span_id=_hex(rng, 16),
            parent_span_id=root.span_id,
            name=f"step {i}",
            start_ns=s0,
            end_ns=s0 + per,
            run_id=run.run_id,
            task_type=run.task_type,
            step=i,
            guard_decision=decision,
        )
        chat = replace(
            step,
            span_id=_hex(rng, 16),
            parent_span_id=step.span_id,
            name=f"{OP_CHAT} fake-model",
            end_ns=s0 + per // 2,
            kind="CLIENT",
            operation=OP_CHAT,
            guard_decision=None,
            model="fake-model",
        )
        out += [step, chat]
        if not (last and reason is StopReason.COMPLETED):
            out.append(_tool_span(rng, run, step, looping))
    return out


def _tool_span(
    rng: random.Random, run: SyntheticRun, step: SyntheticSpan, looping: bool
) -> SyntheticSpan:
    """The tool call of ``step``: the same failing search when the run loops."""
    error = (looping and (run.max_same_error or 0) >= 2) or (
        run.stop_reason == StopReason.REPEATED_ERROR and (step.step or 0) > 1
    )
    tool = "search" if looping else rng.choice(("search", "read_file", "lookup"))
    args_fp = "fp-loop" if looping else _hex(rng, 8)
    return replace(  # the step's trace, run, task type, step number and end
        step,
        span_id=_hex(rng, 16),
        parent_span_id=step.span_id,
        name=f"{OP_EXECUTE_TOOL} {tool}",
        start_ns=(step.start_ns + step.end_ns) // 2,
        operation=OP_EXECUTE_TOOL,
        guard_decision=None,
        tool_name=tool,
        tool_status="error" if error else "ok",
        tool_fingerprint=args_fp,
        result_fingerprint="res-loop" if looping else _hex(rng, 8),
        error_code="NOT_FOUND" if error else None,
        error_fingerprint=f"{tool}:NOT_FOUND" if error else None,
    )


# The reference fleet lives in its own module; re-exported here, where users import it from.
from .reference_fleet import reference_fleet_limits, run_reference_fleet  # noqa: E402
