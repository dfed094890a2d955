"""Recommended limits files per task type, with their promise and their back-test (docs/queries.md).

:func:`fit_limits` reads every successful run of the window (query ``success_usage``: the one
meaning of successful, censored live runs included) and, per task type, fits the limits that are
on and the detector thresholds the replay measured together (:func:`~.guarantee.fit_file`), so
that the whole file cuts at most the target share of successful runs. It then fits the same
items on the older half of the task type's successful runs and counts what that file cuts of the
newest half: the back-test, shown beside the in-sample figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import accumulate
from typing import Any, Final

from .columnar import QueryColumns, run_query_columns
from .guarantee import (
    DEFAULT_CONFIDENCE,
    DEFAULT_CUT_TARGET,
    FileFit,
    Item,
    RunColumns,
    columns_cut,
    fit_file,
    fit_one,
)
from .history import DETECTOR_FIELDS, ERROR_DETECTORS
from .rates import RATE_FIELDS, SPEND_RATE, RunRates, attach_rates, rate_items, run_rates

__all__ = [
    "BUDGET_NAMES",
    "DETECTOR_NAMES",
    "MAX_RUNS",
    "RATE_FIELDS",
    "SPEND_RATE",
    "BackTest",
    "TaskFit",
    "file_dict",
    "file_summary",
    "fit_columns",
    "fit_limits",
    "fit_rows",
    "item_for",
    "read_usage",
    "written_values",
]

BUDGET_NAMES: Final[tuple[str, ...]] = (
    "steps",
    "model_calls",
    "tool_calls",
    "tokens",
    "cost_usd",
    "wall_s",
)
DETECTOR_NAMES: Final[tuple[str, ...]] = (
    "repeated_action",
    "repeated_tool_call",
    "repeated_error",
    "tool_failures",
    "no_progress",
)
"""Detectors, by stop reason. A detector's item value is threshold − 1 (a run whose peak
evidence exceeds it is stopped); ``repeated_action``'s rule is fixed at 2."""


def item_for(name: str, cost_resolution_usd: float = 0.001) -> Item:
    """The item of a budget or detector: its rounding and smallest value."""
    if name == "repeated_action":
        return Item(name, 1.0, 1.0, fixed=1.0)
    if name in DETECTOR_NAMES:
        return Item(name, 1.0, 1.0)
    if name in ("cost_usd", "cost_per_min"):
        return Item(name, cost_resolution_usd, cost_resolution_usd)
    return Item(name, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class BackTest:
    """The file fit on the older half of the successful runs, judged on the newest half."""

    fit: FileFit
    test_runs: int
    test_cut: int
    """Newest-half runs (not censored) the older half's file cuts."""
    per_item: Mapping[str, tuple[int, int]]
    """Item → (runs of the newest half it cuts, runs that recorded its usage)."""

    @property
    def test_share(self) -> float | None:
        return self.test_cut / self.test_runs if self.test_runs else None

    def item_share(self, name: str) -> float | None:
        cut, runs = self.per_item.get(name, (0, 0))
        return cut / runs if runs else None


@dataclass(frozen=True, slots=True)
class TaskFit:
    """One task type's recommended file."""

    task_type: str
    items: tuple[str, ...]
    fit: FileFit
    backtest: BackTest | None
    """``None`` when either half is empty."""
    singles: Mapping[str, FileFit]
    """Budgets whose limit is off: what one limit alone would be."""
    unrecorded: tuple[str, ...]
    """Budgets no successful run recorded (e.g. wall time of logs without timestamps)."""
    runs: RunColumns = field(default_factory=lambda: RunColumns((), ()))
    """The runs fit on (oldest first), column by column, for :meth:`check`."""
    item_defs: Sequence[Item] = ()
    labelled: int = 0
    """Successful runs fit on (not censored) that a task-success label made successful; the
    others completed without a label (``gateway.SUCCESSFUL_RUN_SQL``)."""

    def labels(self) -> str:
        """Which labels decided "successful" for the runs fit on, in words."""
        rest = sum(1 for c in self.runs.censored if c is None) - self.labelled
        if not self.labelled:
            return "successful = completed: no task-success labels"
        if rest <= 0:
            return "all labelled successful" if self.labelled > 1 else "labelled successful"
        return f"{self.labelled:,} labelled successful, {rest:,} completed unlabelled"

    def check(self, values: Mapping[str, float | None]) -> tuple[float | None, bool]:
        """The share of the runs fit on that the file ``values`` (item → value, ``None`` = off)
        cuts, and whether every value is at or above the fitted one (so the promise holds)."""
        exact = self.runs.exact_columns()
        n = len(exact[0]) if exact else sum(1 for c in self.runs.censored if c is None)
        if not n or self.fit.refused:
            return None, False
        cut, _ = columns_cut([values.get(it.name) for it in self.item_defs], exact)
        holds = all(
            v is None or (f is not None and v >= f - 1e-9)
            for v, f in ((values.get(k), self.fit.values.get(k)) for k in self.items)
        )
        return cut / n, holds

    def value(self, name: str) -> float | None:
        single = self.singles.get(name)
        if single is not None:
            return single.values.get(name)
        return self.fit.values.get(name)

    def threshold(self, detector: str) -> int | None:
        v = self.fit.values.get(detector)
        return None if v is None else int(v) + 1


MAX_RUNS: Final = 10_000
"""Recommendations are fit on at most the newest this many successful runs of a task type: at
10,000 runs the value the binomial bound allows is within a few tenths of a percent of the
target share, and the fit stays a fraction of a second on a dashboard page."""

_COLUMNS: Final = {
    **{b: b for b in BUDGET_NAMES},
    **{r: r for r in RATE_FIELDS},
    **{d: f"peak_{d}" for d in DETECTOR_NAMES},
}


def _run_columns(columns: Mapping[str, Sequence[Any]], names: Sequence[str]) -> RunColumns:
    index = {n: i for i, n in enumerate(names)}
    hits = tuple(
        index.get(str(h), -1) if c else None
        for c, h in zip(columns["censored"], columns["hit"], strict=True)
    )
    return RunColumns([columns[_COLUMNS[n]] for n in names], hits)


def _backtest(
    items: Sequence[Item], runs: RunColumns, target: float, confidence: float
) -> BackTest | None:
    half = len(runs) // 2
    older, newest = runs.part(0, half), runs.part(half, len(runs))
    if not len(older) or not len(newest):
        return None
    fit = fit_file(items, older, target=target, confidence=confidence)
    test = newest.exact_columns()
    test_runs = sum(1 for c in newest.censored if c is None)
    if fit.refused:
        return BackTest(fit, len(newest), 0, {})
    cut, per = columns_cut([fit.values[it.name] for it in items], test)
    per_item = {
        it.name: (c, len(col) - col.count(None))
        for it, c, col in zip(items, per, test, strict=True)
    }
    return BackTest(fit, test_runs, cut, per_item)


def fit_limits(
    con: Any,
    on: Mapping[str, Sequence[str]],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    target: float = DEFAULT_CUT_TARGET,
    confidence: float = DEFAULT_CONFIDENCE,
    cost_resolution_usd: float = 0.001,
    timeout_s: float | None = None,
    rates: RunRates | None = None,
    usage: QueryColumns | None = None,
) -> dict[str, TaskFit]:
    """Per task type, the recommended file for the budgets ``on[task_type]`` (limits that are on,
    and spend-rate items: :data:`RATE_FIELDS` names or :data:`SPEND_RATE`) and every detector whose
    peaks the replay recorded, with its back-test. ``rates``: the window's run rates, read (query
    ``spend_rate``) when ``on`` names a spend-rate item and they are not given. ``usage``: the
    window's successful runs (:func:`read_usage` of the same window), read when not given."""
    window: dict[str, Any] = {"since": since, "until": until, "task_types": task_types}
    res = usage if usage is not None else read_usage(con, **window, timeout_s=timeout_s)
    columns = dict(res.columns) if res.rows else {}  # a copy: the rates are added to it
    if columns and any(n == SPEND_RATE or n in RATE_FIELDS for v in on.values() for n in v):
        if rates is None:
            rates = run_rates(con, **window, timeout_s=timeout_s)
        attach_rates(columns, rates)
    counts = Counter(columns.get("task_type", ()))  # rows ordered by task type: a slice each
    spans = {
        t: (e - n, e) for (t, n), e in zip(counts.items(), accumulate(counts.values()), strict=True)
    }
    out: dict[str, TaskFit] = {}
    for task_type in sorted(set(spans) | set(on)):
        a, b = spans.get(task_type, (0, 0))
        group = {k: v[a:b] for k, v in columns.items()} if columns else _empty()
        out[task_type] = fit_columns(
            task_type, group, on.get(task_type, ()), target, confidence, cost_resolution_usd
        )
    return out


def read_usage(con: Any, *, timeout_s: float | None = None, **window: Any) -> QueryColumns:
    """The successful runs of a window (``since``, ``until``, ``task_types``) column by column, as
    :func:`fit_limits` reads them (``success_usage``): read once, they serve several fits."""
    types = window.get("task_types")
    params = {**window, "task_types": None if types is None else list(types), "max_runs": MAX_RUNS}
    return run_query_columns(con, "success_usage", params, max_rows=10_000_000, timeout_s=timeout_s)


def _empty() -> dict[str, Sequence[Any]]:
    return {name: () for name in (*_COLUMNS.values(), "censored", "hit")}


def fit_rows(
    task_type: str,
    group: Sequence[Mapping[str, Any]],
    on: Sequence[str],
    target: float = DEFAULT_CUT_TARGET,
    confidence: float = DEFAULT_CONFIDENCE,
    cost_resolution_usd: float = 0.001,
) -> TaskFit:
    """One task type's file from rows shaped like the ``success_usage`` query's, oldest first."""
    names = (*_COLUMNS.values(), "censored", "hit", "labelled")
    columns = {k: [r.get(k) for r in group] for k in names}
    return fit_columns(task_type, columns, on, target, confidence, cost_resolution_usd)


def fit_columns(
    task_type: str,
    columns: Mapping[str, Sequence[Any]],
    on: Sequence[str],
    target: float = DEFAULT_CUT_TARGET,
    confidence: float = DEFAULT_CONFIDENCE,
    cost_resolution_usd: float = 0.001,
) -> TaskFit:
    """:func:`fit_rows` from the ``success_usage`` columns of one task type, oldest first."""
    recorded = {
        n for n, c in _COLUMNS.items() if c in columns and columns[c].count(None) < len(columns[c])
    }
    # error detectors see only results classified as errors: none at all measures nothing
    recorded -= {
        d for d in ERROR_DETECTORS if max(filter(None, columns[_COLUMNS[d]]), default=0) <= 0
    }
    unrecorded = tuple(b for b in BUDGET_NAMES if b not in recorded)
    names = [b for b in BUDGET_NAMES if b in on and b in recorded]
    names += [r for r in rate_items(on, recorded) if r in recorded]
    names += [d for d in DETECTOR_NAMES if d in recorded]
    items = [item_for(n, cost_resolution_usd) for n in names]
    runs = _run_columns(columns, names)
    fit = fit_file(items, runs, target=target, confidence=confidence)
    singles = {}
    censored = any(columns["censored"])
    for b in BUDGET_NAMES:
        if b in recorded and b not in on:
            one = [item_for(b, cost_resolution_usd)]
            if not censored:  # a limit cut some runs: an off budget's alone value is not told
                singles[b] = fit_one(
                    one[0], columns[_COLUMNS[b]], target=target, confidence=confidence
                )
    marks = zip(columns.get("labelled") or (), columns["censored"], strict=False)
    return TaskFit(
        task_type=task_type,
        items=tuple(names),
        fit=fit,
        backtest=_backtest(items, runs, target, confidence),
        singles=singles,
        unrecorded=unrecorded,
        runs=runs,
        item_defs=items,
        labelled=sum(1 for x, c in marks if x and not c),
    )


# --- the file as data and in words (report, TOML header, dashboard) ------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def written_values(limits: Sequence[dict[str, Any]], fit: TaskFit) -> dict[str, float | None]:
    """The values the limits file writes: each budget's proposed value, the fitted thresholds and
    spend rates."""
    values: dict[str, float | None] = {d["budget"]: d["proposed"] for d in limits}
    for name in fit.items:
        if name in DETECTOR_FIELDS or name in RATE_FIELDS:
            values[name] = fit.fit.values.get(name)
    return values


def file_dict(fit: TaskFit, written: dict[str, float | None] | None = None) -> dict[str, Any]:
    """The task type's recommended file as data: what it holds, what it promises, what it cut
    in the window and in the back-test (fit on the older half, judged on the newest), and what
    the file as written (``written``: item → value) cuts of the runs fit on."""
    f = fit.fit
    bt = fit.backtest
    written_share, holds = fit.check(written) if written is not None else (None, False)
    return {
        "written_cut_share": written_share,
        "written_keeps_promise": holds,
        "items": list(fit.items),
        "values": dict(f.values),
        "thresholds": {d: fit.threshold(d) for d in fit.items if d in DETECTOR_FIELDS},
        "target": f.target,
        "confidence": f.confidence,
        "successful_runs": f.runs,
        "labels": fit.labels(),
        "censored_runs": f.censored,
        "cut_share": None if f.refused else f.cut_share,
        "runs_needed": f.needed,
        "lower_bound": f.lower_bound,
        "backtest": None
        if bt is None
        else {
            "fit_runs": bt.fit.runs,
            "test_runs": bt.test_runs,
            "refused": bt.fit.refused,
            "cut_share": None if bt.fit.refused else bt.test_share,
            "per_item": {k: bt.item_share(k) for k in bt.per_item},
        },
        "unrecorded": list(fit.unrecorded),
    }


def file_summary(d: Mapping[str, Any] | None) -> str:
    """One sentence on a task type's recommended file (``file_dict``)."""
    if d is None or not d["items"]:
        return "no limit is on and no detector was replayed: nothing to judge"
    target = _pct(d["target"]).replace(".0%", "%")
    n = d["successful_runs"]
    if d["runs_needed"] is not None:
        if d["lower_bound"]:
            return (
                f"no file can promise to cut at most {target}: {d['censored_runs']:,} of the "
                f"{n:,} successful runs were cut by a limit while progressing and went further "
                "than any that finished (the data cannot tell how far they needed to go)"
            )
        return (
            f"{n:,} successful run{' is' if n == 1 else 's are'} too few to promise that "
            f"{_these(len(d['items']))} at most {target} of them ({d['runs_needed']:,} needed)"
        )
    text = (
        f"{_these(len(d['items']))} at most {target} of successful runs "
        f"({_pct(d['confidence'])} confidence): {_pct(d['cut_share'])} of the {n:,} fit on"
        + (f" ({d['labels']})" if d.get("labels") else "")
    )
    if d.get("written_cut_share") is not None:
        text += f", {_pct(d['written_cut_share'])} as written" + (
            ""
            if d.get("written_keeps_promise")
            else " (some values kept below the recommendation: the promise does not cover them)"
        )
    bt = d["backtest"]
    if bt is None:
        return text + "; no back-test (too few runs to split)"
    if bt["refused"]:
        return text + f"; back-test: the older {bt['fit_runs']:,} runs alone are too few to fit"
    return (
        text + f"; back-test: fit on the older {bt['fit_runs']:,}, it cuts "
        f"{_pct(bt['cut_share'])} of the newest {bt['test_runs']:,}"
    )


def _these(k: int, verb: str = "cut") -> str:
    return f"its one limit {verb}s" if k == 1 else f"its {k} limits and thresholds together {verb}"
