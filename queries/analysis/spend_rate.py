"""The spend-rate stop's recommendation per task type (docs/queries.md, "Spend rate").

The stop (``max_cost_per_min``, or ``max_tokens_per_min`` where runs record no cost) is for runs
that burn money faster than successful runs do. It is recommended like every other limit: as an
item of the task type's limits file, fit together with the file's other limits and detector
thresholds so that the whole file cuts at most ``cut_target`` of successful runs with 95%
confidence (:mod:`~loopwatch.queries.analysis.guarantee`), with the back-test (fit on the older
half, judged on the newest), and "needs N successful runs" when there are too few. Each run's rate
is the highest the guard could have seen (:mod:`~loopwatch.queries.analysis.rates`); a run the
spend rate stopped is a censored observation of it.

Off by default: where it is off, the advice is what the file *with* the stop would set (the other
limits of that file move a little to make room in the shared share); ``loopwatch report
--spend-rate`` writes that file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final

from .columnar import QueryColumns
from .rates import RATE_FIELDS, SPEND_RATE, RunRates, run_rates, served_policy
from .recommend import TaskFit, file_dict, fit_limits
from .recommendations import AnalysisThresholds, promise_text

__all__ = ["RATE_FIELDS", "SpendRateAdvice", "rate_on", "spend_rate_advice"]

_UNIT: Final = {"cost_per_min": "USD a minute", "tokens_per_min": "tokens a minute"}


@dataclass(frozen=True, kw_only=True, slots=True)
class SpendRateAdvice:
    """The spend-rate recommendation for one task type."""

    task_type: str
    field: str | None
    """``max_cost_per_min`` or ``max_tokens_per_min``; ``None`` when no successful run recorded
    its spend and its time."""
    unit: str
    current: float | None
    """The value in the limits ``loopwatch serve`` holds (``None``: off, or not served)."""
    recommended: float | None
    """``None``: too few successful runs (``runs_needed``), or none recorded the rate."""
    promise: str
    """What the recommendation promises, in words a user can check (or why there is none)."""
    in_file: bool
    """The task type's recommended limits file holds it (it is on, or was asked for)."""
    successful_runs: int = 0
    observed_cut_share: float | None = None
    """Share of the successful runs (with a rate) above the recommendation."""
    file_cut_share: float | None = None
    runs_needed: int | None = None
    backtest_cut_share: float | None = None
    """Fit on the older half of the successful runs: the share of the newest half it cuts."""
    backtest_runs: int = 0
    failed_runs: int = 0
    """Runs that did not succeed and recorded a rate."""
    failed_faster: int = 0
    """Of those, runs faster than the recommendation: what the stop would have cut short."""
    rate_stops: int = 0
    """Runs the spend-rate stop ended in the window."""
    file: dict[str, Any] | None = None
    """The file holding it (``recommend.file_dict``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rate_on(fit: TaskFit) -> str | None:
    """The spend-rate item of a task type's file (``None``: the file holds none)."""
    return next((i for i in fit.items if i in RATE_FIELDS), None)


def spend_rate_advice(
    con: Any,
    on: Mapping[str, Sequence[str]] | None = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AnalysisThresholds | None = None,
    fits: Mapping[str, TaskFit] | None = None,
    timeout_s: float | None = None,
    usage: QueryColumns | None = None,
    rates: RunRates | None = None,
) -> list[SpendRateAdvice]:
    """One recommendation per task type with runs in the window. ``con``: a DuckDB connection (or
    a ``QueryGateway``); ``on``: the budgets on per task type (as ``analyze_file`` found them;
    none by default); ``fits``: files already fit (``analyze_file``'s); those that do not hold
    the spend rate are refit with it, on ``usage`` when given (``recommend.read_usage`` of the
    same window, as ``analyze_file`` read it); ``rates``: :func:`~.rates.run_rates` of the same
    window, read when not given."""
    con = getattr(con, "con", con)  # a QueryGateway, as before, or its connection
    on = on or {}
    t = thresholds or AnalysisThresholds()
    window: dict[str, Any] = {"since": since, "until": until, "task_types": task_types}
    if rates is None:
        rates = run_rates(con, **window, timeout_s=timeout_s)
    rows = rates.task_rows()
    fits = dict(fits or {})
    tasks = set(on) | set(fits) | set(rows)
    missing = {t: [*on.get(t, ()), SPEND_RATE] for t in tasks
               if t not in fits or rate_on(fits[t]) is None}  # fmt: skip
    if missing or not fits:
        refit = fit_limits(con, missing, **window, target=t.cut_target,
                           confidence=t.confidence,
                           cost_resolution_usd=t.cost_resolution_usd,
                           timeout_s=timeout_s, rates=rates, usage=usage)  # fmt: skip
        fits.update({t: refit[t] for t in missing if t in refit})
    policy = served_policy(con)
    return [
        _advice(task, fit, task not in missing, rates, rows.get(task, range(0)), policy, t)
        for task, fit in sorted(fits.items())
        if task in on or task in rows
    ]


def _advice(
    task_type: str,
    fit: TaskFit,
    in_file: bool,
    rates: RunRates,
    rows: range,
    policy: Any,
    t: AnalysisThresholds,
) -> SpendRateAdvice:
    """The advice for ``task_type``, whose runs are ``rows`` of ``rates``."""
    item = rate_on(fit)
    stops = sum(1 for i in rows if rates.rate_stopped[i])
    limits = policy.for_task(task_type) if policy is not None else None
    values = {f: getattr(limits, f, None) for f in RATE_FIELDS.values()}
    served = {f: v for f, v in values.items() if v is not None}
    if item is None:  # a rate that is on stays named, with its value
        field, current = next(iter(served.items()), (None, None))
        return SpendRateAdvice(
            task_type=task_type, field=field, unit="", current=current, recommended=None,
            promise="no successful run recorded its spend and its time, so no spend rate is "
            "recommended", in_file=False, rate_stops=stops, successful_runs=fit.fit.runs,
        )  # fmt: skip
    field = RATE_FIELDS[item]
    current = served.get(field)
    value = None if fit.fit.refused else fit.fit.values.get(item)
    ok, col = rates.ok, rates.rates(item)
    failed = [x for i in rows if not ok[i] and (x := col[i]) is not None]
    d = file_dict(fit)
    bt = d["backtest"]
    fitted = next((i for i in fit.fit.items if i.name == item), None)
    return SpendRateAdvice(
        task_type=task_type,
        field=field,
        unit=_UNIT[item],
        current=current,
        recommended=value,
        promise=promise_text(field, item, fit, t),
        in_file=in_file,
        successful_runs=fit.fit.runs,
        observed_cut_share=fitted.cut_share if fitted else None,
        file_cut_share=d["cut_share"],
        runs_needed=fit.fit.needed,
        backtest_cut_share=None if bt is None or bt["refused"] else bt["per_item"].get(item),
        backtest_runs=0 if bt is None else bt["test_runs"],
        failed_runs=len(failed),
        failed_faster=0 if value is None else sum(1 for x in failed if x > value + 1e-12),
        rate_stops=stops,
        file=d,
    )
