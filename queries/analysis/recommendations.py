"""Limit analysis (docs/queries.md): recommendations, verdicts, what-if curves and detector replay.

Every number comes from a named query run through the gateway (``limit_stats``,
``what_if``, ``usage_distribution``, ``detector_replay``); this module only applies the
thresholds of :class:`AnalysisThresholds` and words the result.

Definitions (the docs, ``docs/queries.md``, repeat them):

* A run is *successful* when its task is labelled successful (``task_success``, set by
  ``loopwatch import`` or feedback), whatever ended its loop; without a label, when its loop
  completed (``gateway.SUCCESSFUL_RUN_SQL``, the one definition every query uses).
* A run *hit* a budget's limit when its outcome is ``limit`` and its ``limit_name`` (or,
  when missing, the budget its stop reason uses up) is that budget.
* The *current* limit of a (task type, budget) is the value the task type's latest run in the
  window ran under. Hit rates and progress evidence count only runs under that same value, so
  a limit that was just raised is judged on the runs that ran under it.
* A stopped run was *still making progress* when its last ``PROGRESS_WINDOW`` (3) steps brought
  at least ``progress_min_new_calls`` (1) call fingerprints not seen before in the run
  (``runs.recent_new_calls``) and no error fingerprint occurred more than
  ``progress_max_same_error`` (1) times in it (``runs.max_same_error``): i.e.
  ``recent_new_calls > 0 AND max_same_error < 2`` by default. Runs without that evidence
  (NULL) count neither way. Otherwise it was *looping*.
* Recommended value: the task type's limits file (limits that are on, detector thresholds the
  replay measured) fit together so that the whole file cuts at most ``cut_target`` of successful
  runs with ``confidence`` (:mod:`loopwatch.queries.analysis.guarantee`); with too few successful
  runs, no value and how many are needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from itertools import groupby
from typing import Any, Literal

from loopwatch.instrumentation.runtime.detectors import RecordedCall, RecordedStep, replay_peaks
from loopwatch.instrumentation.runtime.outcomes import UNKNOWN_ERROR
from loopwatch.instrumentation.runtime.semconv import BUDGETS

from .columnar import QueryColumns
from .gateway import run_query
from .guarantee import DEFAULT_CONFIDENCE, DEFAULT_CUT_TARGET
from .rates import rate_items_on
from .recommend import TaskFit, fit_limits

__all__ = [
    "BUDGET_FIELDS",
    "AnalysisThresholds",
    "DetectorReplay",
    "Evidence",
    "LimitAnalysis",
    "Verdict",
    "WhatIfPoint",
    "analyze_file",
    "analyze_limits",
    "default_candidates",
    "judge",
    "promise_text",
    "replay_detectors",
    "round_up",
    "what_if",
]

Verdict = Literal["too_tight", "too_loose", "stuck_not_tight", "ok", "insufficient_data"]

BUDGET_FIELDS: dict[str, str] = {
    "steps": "max_steps",
    "model_calls": "max_model_calls",
    "tool_calls": "max_tool_calls",
    "tokens": "max_tokens",
    "cost_usd": "max_cost_usd",
    "wall_s": "max_wall_s",
}
"""Budget name → the ``LoopLimits`` field that caps it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AnalysisThresholds:
    """Every threshold of the limit analysis. Defaults: docs/queries.md, "Thresholds"."""

    min_runs: int = 30
    """Fewest runs under the current limit to judge it."""
    cut_target: float = DEFAULT_CUT_TARGET
    """The share of successful runs the recommended limits file may cut, all limits and detector
    thresholds together (``--cut-target``)."""
    confidence: float = DEFAULT_CONFIDENCE
    """The confidence of that promise."""
    margin: float = 0.25
    """``too_tight`` where the data cannot tell how far cut runs needed to go: raise the limit to
    at least current × (1 + margin) (a floor, marked ``lower_bound``)."""
    quantile: float = 0.95
    """The success quantile shown as evidence (p95)."""
    tight_hit_rate: float = 0.05
    """A hit rate at or above this is high: ``too_tight`` or ``stuck_not_tight``."""
    progressing_share: float = 0.5
    """With a high hit rate: ``too_tight`` when at least this share of the stopped runs (with
    evidence) was still making progress, else ``stuck_not_tight``."""
    tight_p95_share: float = 0.80
    """``too_tight`` also when successful runs' p95 is at least this share of the limit."""
    loose_hit_rate: float = 0.005
    """``too_loose`` needs a hit rate at or below this ..."""
    loose_factor: float = 2.0
    """... and the limit at least this many times the recommendation."""
    progress_min_new_calls: int = 1
    """A stopped run progressed if its last steps brought at least this many new calls ..."""
    progress_max_same_error: int = 1
    """... and no error fingerprint occurred more than this many times in it."""
    cost_resolution_usd: float = 0.001
    """Recommended costs are rounded up to this many dollars."""
    false_stop_target: float = 0.01
    """Detector replay: the threshold suggested keeps false stops (successful runs stopped) at or
    under this share."""

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool]] = [
            ("min_runs", self.min_runs >= 1),
            ("margin", self.margin >= 0),
            ("quantile", 0 < self.quantile <= 1),
            ("tight_hit_rate", 0 <= self.tight_hit_rate <= 1),
            ("progressing_share", 0 <= self.progressing_share <= 1),
            ("tight_p95_share", self.tight_p95_share > 0),
            ("loose_hit_rate", 0 <= self.loose_hit_rate <= 1),
            ("loose_factor", self.loose_factor >= 1),
            ("progress_min_new_calls", self.progress_min_new_calls >= 0),
            ("progress_max_same_error", self.progress_max_same_error >= 0),
            ("cost_resolution_usd", self.cost_resolution_usd > 0),
            ("false_stop_target", 0 <= self.false_stop_target <= 1),
            ("cut_target", 0 < self.cut_target < 1),
            ("confidence", 0 < self.confidence < 1),
        ]
        for name, ok in checks:
            if not ok:
                raise ValueError(
                    f"AnalysisThresholds.{name} is out of range: {getattr(self, name)!r}"
                )

    def resolution(self, budget: str) -> float:
        """The step recommended values of ``budget`` are rounded up to."""
        return self.cost_resolution_usd if budget == "cost_usd" else 1.0


def round_up(value: float, resolution: float) -> float:
    """``value`` rounded up to a multiple of ``resolution`` (ignoring float noise)."""
    return round(math.ceil(value / resolution - 1e-9) * resolution, 10)


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """The numbers a verdict rests on."""

    runs: int
    """Runs in the window under the current limit value."""
    hits: int
    """Of those, runs this limit stopped."""
    hit_rate: float | None
    hits_progressing: int
    """Stopped runs that were still making progress."""
    hits_looping: int
    """Stopped runs that were looping."""
    progressing_share: float | None
    """hits_progressing / (hits_progressing + hits_looping)."""
    successes: int
    """Successful runs in the window (any limit value) with this usage recorded."""
    success_p50: float | None
    success_p95: float | None
    """The ``quantile`` of successful usage (p95 by default)."""
    success_max: float | None
    p95_share_of_limit: float | None
    """success_p95 / current limit."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitAnalysis:
    """The verdict and recommendation for one (task type, budget)."""

    task_type: str
    budget: str
    """``steps``, ``model_calls``, ``tool_calls``, ``tokens``, ``cost_usd`` or ``wall_s``."""
    field: str
    """The ``LoopLimits`` field: ``max_steps`` ..."""
    current_limit: float | None
    """``None`` when the limit is off."""
    recommended: float | None
    """The value the task type's limits file sets (see ``promise``); ``None`` with too few
    successful runs (``runs_needed``) or none that recorded this usage."""
    proposed: float | None
    """The value to set: the recommendation for ``too_loose``; for ``too_tight`` the recommendation
    but at least current × (1 + margin) (successes are censored by the limit); otherwise the
    current value."""
    verdict: Verdict | None
    """``None`` when the limit is off."""
    sentence: str
    evidence: Evidence
    lower_bound: bool = False
    """The runs this limit stopped hid how much they needed (live runs cut by it, and no
    successful run went further): for ``too_tight``, the value to set is a floor."""
    promise: str = ""
    """What the recommendation promises, in words a user can check (or why there is none)."""
    successful_runs: int = 0
    """Successful runs the recommendation was fit on (censored ones included)."""
    observed_cut_share: float | None = None
    """Share of those runs above the recommendation."""
    file_cut_share: float | None = None
    """Share of those runs the whole recommended file cuts."""
    runs_needed: int | None = None
    """Set when there is no recommendation for lack of runs."""
    backtest_cut_share: float | None = None
    """Fit on the older half of the successful runs: the share of the newest half it cuts."""
    backtest_file_cut_share: float | None = None
    backtest_runs: int = 0
    """Successful runs of the newest half the back-test was judged on."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Stats:
    task_type: str
    budget: str
    current_limit: float | None
    runs: int
    hits: int
    hits_progressing: int
    hits_looping: int
    successes: int
    success_q: float | None
    success_p50: float | None
    success_max: float | None


def _fmt(budget: str, value: float | None) -> str:
    if value is None:
        return "off"
    if budget in ("cost_usd", "cost_per_min"):
        return f"${value:.4g}"
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    return text + "s" if budget == "wall_s" else text


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def promise_text(field: str, budget: str, fit: TaskFit | None, t: AnalysisThresholds) -> str:
    """The promise of the item ``budget`` (a budget or a spend rate) of ``fit``, or why none."""
    target = _pct(t.cut_target).replace(".0%", "%")
    if fit is None:
        return f"no successful run in the window to size {field}"
    if budget in fit.unrecorded:
        return f"no successful run recorded {budget}, so no value is recommended for {field}"
    single = fit.singles.get(budget)
    ff = single if single is not None else fit.fit
    n = ff.runs
    runs = f"{n:,} successful run{'' if n == 1 else 's'} ({fit.labels()}"
    k = 1 if single is not None else len(fit.items)
    if ff.refused and ff.lower_bound:
        return (
            f"{ff.censored:,} of {runs}) were stopped by a limit while still progressing and went "
            "further than any that finished, so the data cannot tell how far they needed to go "
            f"and no value can be promised to cut at most {target}"
        )
    runs += f"; {ff.censored:,} of them cut by a limit)" if ff.censored else ")"
    if ff.refused:
        what = f"{field}" if k == 1 else f"{field} and the file's other {k - 1} limits together"
        return (
            f"only {runs}: too few to promise that {what} cut at most {target} of them "
            f"({ff.needed:,} needed at {_pct(t.confidence)} confidence; --cut-target sets the "
            "share)"
        )
    value = ff.values.get(budget)
    item = next((i for i in ff.items if i.name == budget), None)
    observed = _pct(item.cut_share if item else None)
    together = " together with the file's other limits" if k > 1 else ""
    text = (
        f"{field} = {_fmt(budget, value)}: cuts at most {target} of successful runs{together} "
        f"(from {runs}, {_pct(t.confidence)} confidence; {observed} observed"
    )
    if k > 1:
        text += f", {_pct(ff.cut_share)} by the whole file"
    bt = fit.backtest if single is None else None
    if bt is not None and not bt.fit.refused:
        text += f"; fit on the older half, it cuts {_pct(bt.item_share(budget))} of the newest"
        text += f" {bt.test_runs:,}"
    return text + ")"


def judge(
    stats: Mapping[str, Any],
    thresholds: AnalysisThresholds = AnalysisThresholds(),
    fit: TaskFit | None = None,
) -> LimitAnalysis:
    """The verdict for one ``limit_stats`` row (a mapping of its columns) and the task type's
    recommended file ``fit`` (:func:`loopwatch.queries.analysis.recommend.fit_limits`; ``None``: no
    recommendation). Pure: no database.

    Order: limit off → no verdict; fewer than ``min_runs`` runs → ``insufficient_data``; hit
    rate ≥ ``tight_hit_rate`` → ``too_tight`` if the stopped runs were mostly progressing,
    else ``stuck_not_tight`` (no evidence → ``insufficient_data``); no recommendation →
    ``insufficient_data``; success p95 ≥ ``tight_p95_share`` × limit, or the limit below the
    recommendation → ``too_tight``; hit rate ≤ ``loose_hit_rate`` and limit ≥ ``loose_factor``
    × recommendation → ``too_loose``; else ``ok``.
    """
    t = thresholds
    s = _Stats(
        task_type=str(stats["task_type"]),
        budget=str(stats["budget"]),
        current_limit=None if stats.get("current_limit") is None else float(stats["current_limit"]),
        runs=int(stats.get("runs") or 0),
        hits=int(stats.get("hits") or 0),
        hits_progressing=int(stats.get("hits_progressing") or 0),
        hits_looping=int(stats.get("hits_looping") or 0),
        successes=int(stats.get("successes") or 0),
        success_q=_opt_float(stats.get("success_q")),
        success_p50=_opt_float(stats.get("success_p50")),
        success_max=_opt_float(stats.get("success_max")),
    )
    b = s.budget
    field = BUDGET_FIELDS[b]
    limit = s.current_limit
    hit_rate = s.hits / s.runs if s.runs else None
    known = s.hits_progressing + s.hits_looping
    prog_share = s.hits_progressing / known if known else None
    recommended = fit.value(b) if fit is not None and b not in fit.unrecorded else None
    promise = promise_text(field, b, fit, t)
    p95_share = s.success_q / limit if limit and s.success_q is not None else None
    ev = Evidence(
        runs=s.runs,
        hits=s.hits,
        hit_rate=hit_rate,
        hits_progressing=s.hits_progressing,
        hits_looping=s.hits_looping,
        progressing_share=prog_share,
        successes=s.successes,
        success_p50=s.success_p50,
        success_p95=s.success_q,
        success_max=s.success_max,
        p95_share_of_limit=p95_share,
    )
    q = f"p{t.quantile * 100:g}"
    lim = f"{field}={_fmt(b, limit)}"
    p95_text = f"successful runs' {q} ({_fmt(b, s.success_q)}) is {_pct(p95_share)} of it"
    censored_floor = fit is not None and fit.fit.lower_bound

    verdict: Verdict | None
    if limit is None:
        verdict = None
        sentence = f"{field} is off; {promise}."
    elif s.runs < t.min_runs:
        verdict = "insufficient_data"
        sentence = (
            f"Only {s.runs} run{'' if s.runs == 1 else 's'} under {lim} in the window "
            f"(need {t.min_runs}); keep it for now."
        )
    elif hit_rate is not None and hit_rate >= t.tight_hit_rate:
        if prog_share is None:
            verdict = "insufficient_data"
            sentence = (
                f"{lim} stopped {_pct(hit_rate)} of runs, but they recorded no progress evidence, "
                "so tight and stuck cannot be told apart."
            )
        elif prog_share >= t.progressing_share:
            verdict = "too_tight"
            sentence = (
                f"{lim} stopped {_pct(hit_rate)} of runs and {_pct(prog_share)} of those "
                "were still making progress — raise it to "
                f"{_fmt(b, _proposed('too_tight', limit, recommended, t, b, censored_floor))}; "
                f"{promise}."
            )
        else:
            verdict = "stuck_not_tight"
            sentence = (
                f"{lim} stopped {_pct(hit_rate)} of runs but {_pct(1 - prog_share)} of those "
                "were looping (no new calls, or repeated errors); raising it would only burn "
                "more — fix the loop or tighten the stuck detectors."
            )
    elif recommended is None and not censored_floor:
        verdict = "insufficient_data"
        sentence = f"{promise[0].upper()}{promise[1:]}; keep {_fmt(b, limit)}."
    elif (p95_share is not None and p95_share >= t.tight_p95_share) or (
        recommended is not None and limit < recommended
    ):
        verdict = "too_tight"
        sentence = (
            f"{lim} leaves little headroom: {p95_text} — raise it to "
            f"{_fmt(b, _proposed('too_tight', limit, recommended, t, b, censored_floor))}; "
            f"{promise}."
        )
    elif (
        recommended is not None
        and hit_rate is not None
        and hit_rate <= t.loose_hit_rate
        and limit >= t.loose_factor * recommended
    ):
        verdict = "too_loose"
        sentence = (
            f"{lim} stopped {_pct(hit_rate)} of runs; lower it to {_fmt(b, recommended)} "
            f"to cap runaway spend: {promise}."
        )
    else:
        verdict = "ok"
        sentence = f"{lim} fits: it stopped {_pct(hit_rate)} of runs, and {p95_text}." + (
            f" No lower value can be promised: {promise}." if recommended is None else ""
        )
    lower_bound = verdict == "too_tight" and s.hits > 0 and censored_floor
    return LimitAnalysis(
        task_type=s.task_type,
        budget=b,
        field=field,
        current_limit=limit,
        recommended=recommended,
        proposed=_proposed(verdict, limit, recommended, t, b, censored_floor),
        verdict=verdict,
        sentence=sentence,
        evidence=ev,
        lower_bound=lower_bound,
        promise=promise,
        **_figures(b, fit),
    )


def _figures(budget: str, fit: TaskFit | None) -> dict[str, Any]:
    """The promise's numbers for :class:`LimitAnalysis`."""
    if fit is None:
        return {}
    single = fit.singles.get(budget)
    ff = single if single is not None else fit.fit
    item = next((i for i in ff.items if i.name == budget), None)
    bt = fit.backtest if single is None else None
    ok_bt = bt is not None and not bt.fit.refused
    return {
        "successful_runs": ff.runs,
        "observed_cut_share": item.cut_share if item else None,
        "file_cut_share": None if ff.refused else ff.cut_share,
        "runs_needed": ff.needed,
        "backtest_cut_share": bt.item_share(budget) if ok_bt and bt else None,
        "backtest_file_cut_share": bt.test_share if ok_bt and bt else None,
        "backtest_runs": bt.test_runs if bt else 0,
    }


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _proposed(
    verdict: Verdict | None,
    limit: float | None,
    recommended: float | None,
    t: AnalysisThresholds,
    budget: str,
    floor_needed: bool = False,
) -> float | None:
    if verdict is None or verdict == "too_loose":
        return recommended
    if verdict == "too_tight" and limit is not None:
        if recommended is not None and recommended > limit and not floor_needed:
            return recommended
        floor = round_up(limit * (1 + t.margin), t.resolution(budget))
        return max(floor, recommended) if recommended is not None else floor
    return limit


def analyze_file(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
    include_off: bool = False,
    timeout_s: float | None = None,
    spend_rate: bool = False,
    usage: QueryColumns | None = None,
) -> tuple[list[LimitAnalysis], dict[str, TaskFit]]:
    """:func:`analyze_limits` and the recommended file per task type it rests on (its promise,
    the whole file's cut share and its back-test), holding the spend-rate stop where serve's
    limits have it on, or with ``spend_rate`` (docs/queries.md, "Spend rate"). ``usage``: the
    window's successful runs when already read (``recommend.read_usage`` of the same window)."""
    res = run_query(
        con,
        "limit_stats",
        {
            "since": since,
            "until": until,
            "task_types": list(task_types) if task_types is not None else None,
            "quantile": thresholds.quantile,
            "progress_min_new_calls": thresholds.progress_min_new_calls,
            "progress_max_same_error": thresholds.progress_max_same_error,
        },
        max_rows=1_000_000,
        timeout_s=timeout_s,
    )
    rows = res.records()
    on: dict[str, list[str]] = {}
    for row in rows:
        if row["current_limit"] is not None:
            on.setdefault(str(row["task_type"]), []).append(str(row["budget"]))
    for task_type, rate in rate_items_on(con, {r["task_type"] for r in rows}, spend_rate).items():
        on.setdefault(task_type, []).extend(rate)
    fits = fit_limits(
        con,
        on,
        since=since,
        until=until,
        task_types=task_types,
        target=thresholds.cut_target,
        confidence=thresholds.confidence,
        cost_resolution_usd=thresholds.cost_resolution_usd,
        timeout_s=timeout_s,
        usage=usage,
    )
    out = [judge(row, thresholds, fits.get(str(row["task_type"]))) for row in rows]
    return [a for a in out if include_off or a.current_limit is not None], fits


def analyze_limits(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
    include_off: bool = False,
    timeout_s: float | None = None,
) -> list[LimitAnalysis]:
    """Verdicts and recommendations per (task type, budget) for the runs in the window.

    Budgets whose limit is off have no verdict; they are left out unless ``include_off``.
    """
    return analyze_file(con, since=since, until=until, task_types=task_types, thresholds=thresholds,
                        include_off=include_off, timeout_s=timeout_s)[0]  # fmt: skip


# --- what-if -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class WhatIfPoint:
    """What one candidate limit value would have done to the window's runs."""

    candidate: float
    successful_runs: int
    successful_cut: int
    """Successful runs whose usage was above the candidate."""
    cut_share: float | None
    failed_runs: int
    """Runs that did not succeed (with this usage recorded)."""
    stopped_earlier: int
    """Of those, runs whose usage was above the candidate."""
    failed_spend: float
    saved_spend: float
    """Sum over failed runs of spend × (1 − candidate / usage) where usage > candidate (spend
    assumed to grow in proportion to the budget's usage)."""
    saved_share: float | None
    spend_measure: str
    """``cost_usd``, or ``tokens`` when the failed runs recorded no cost."""


def default_candidates(
    con: Any,
    task_type: str,
    budget: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    points: int = 20,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
) -> list[float]:
    """``points`` evenly spaced values from one resolution step to 1.25 × the largest usage seen
    (or the current limit, if larger), rounded up to the budget's resolution."""
    (row,) = run_query(
        con,
        "usage_range",
        {"task_type": task_type, "budget": budget, "since": since, "until": until},
    ).records()
    hi = max(float(row["max_used"] or 0.0), float(row["current_limit"] or 0.0))
    res = thresholds.resolution(budget)
    if hi <= 0:
        return [res]
    top = hi * 1.25
    vals = {round_up(max(res, top * i / points), res) for i in range(1, points + 1)}
    return sorted(vals)


def what_if(
    con: Any,
    task_type: str,
    budget: str,
    candidates: Sequence[float] | None = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    points: int = 20,
) -> list[WhatIfPoint]:
    """For each candidate value of ``budget``: successful runs it would have cut and spend it
    would have saved on runs that did not succeed. Candidates default to
    :func:`default_candidates`."""
    if candidates is None:
        candidates = default_candidates(
            con, task_type, budget, since=since, until=until, points=points
        )
    res = run_query(
        con,
        "what_if",
        {
            "task_type": task_type,
            "budget": budget,
            "candidates": list(candidates),
            "since": since,
            "until": until,
        },
    )
    return [
        WhatIfPoint(
            candidate=float(r["candidate"]),
            successful_runs=int(r["successful_runs"]),
            successful_cut=int(r["successful_cut"]),
            cut_share=_opt_float(r["cut_share"]),
            failed_runs=int(r["failed_runs"]),
            stopped_earlier=int(r["stopped_earlier"]),
            failed_spend=float(r["failed_spend"]),
            saved_spend=float(r["saved_spend"]),
            saved_share=_opt_float(r["saved_share"]),
            spend_measure=str(r["spend_measure"]),
        )
        for r in res.records()
    ]


# --- detector replay ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class DetectorReplay:
    """How one detector threshold would have treated the window's runs of one task type."""

    task_type: str
    detector: str
    """``repeated_tool_call``, ``repeated_error``, ``repeated_action``, ``tool_failures`` or
    ``no_progress``."""
    threshold: int
    successful_runs: int
    false_stops: int
    """Successful runs it would have stopped."""
    false_stop_share: float | None
    failed_runs: int
    caught: int
    """Runs that did not succeed that it would have stopped (at or before their end)."""
    caught_share: float | None
    suggested: bool
    """True on the smallest threshold whose false-stop share is at most ``false_stop_target``."""


def replay_detectors(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    max_threshold: int = 10,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
    from_spans: bool = True,
    timeout_s: float | None = None,
    max_spans: int = 5_000_000,
) -> list[DetectorReplay]:
    """Replay the detectors on history for thresholds 2..max_threshold (docs/queries.md,
    "Detector replay").

    With ``from_spans`` (the default) every run's tool spans are fed, in order, to the guard's
    own detector objects (:func:`~loopwatch.instrumentation.runtime.detectors.replay_peaks`):
    all five
    detectors, judged by the rules that run live. A detector with threshold N stops a run whose
    peak evidence reached N; ``repeated_action`` has no threshold, its peak is the longest streak
    of one (call, result) in a row (the guard stops at 2). Reads every tool span in the window
    (query ``detector_replay_spans``); more than ``max_spans`` rows raise ``ValueError``.

    ``from_spans=False`` reads only the counts the guard recorded on each run (query
    ``detector_replay``): ``repeated_tool_call`` and ``repeated_error``, censored above the
    thresholds the runs ran with.
    """
    params: dict[str, Any] = {
        "since": since,
        "until": until,
        "task_types": list(task_types) if task_types is not None else None,
    }
    if from_spans:
        rows = _replay_spans(con, params, max_threshold, max_spans, timeout_s)
    else:
        params["max_threshold"] = max_threshold
        rows = run_query(
            con, "detector_replay", params, max_rows=1_000_000, timeout_s=timeout_s
        ).records()
    rows.sort(key=lambda r: (r["task_type"], r["detector"], r["threshold"]))
    suggested: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["task_type"], r["detector"])
        share = r["false_stop_share"]
        if key not in suggested and share is not None and share <= thresholds.false_stop_target:
            suggested[key] = int(r["threshold"])
    return [
        DetectorReplay(
            task_type=r["task_type"],
            detector=r["detector"],
            threshold=int(r["threshold"]),
            successful_runs=int(r["successful_runs"]),
            false_stops=int(r["false_stops"]),
            false_stop_share=_opt_float(r["false_stop_share"]),
            failed_runs=int(r["failed_runs"]),
            caught=int(r["caught"]),
            caught_share=_opt_float(r["caught_share"]),
            suggested=suggested.get((r["task_type"], r["detector"])) == int(r["threshold"]),
        )
        for r in rows
    ]


def _recorded_steps(events: Sequence[Mapping[str, Any]]) -> list[RecordedStep]:
    # Steps between the first and the last step with a tool call that have none are idle steps.
    by_step: dict[int, list[RecordedCall]] = {}
    for e in events:
        if e["step"] is None:
            continue
        err = bool(e["err"])
        by_step.setdefault(int(e["step"]), []).append(
            RecordedCall(
                e["tool"],
                e["fp"],
                e["res"],
                ok=not err,
                error_code=(e["error_code"] or UNKNOWN_ERROR) if err else None,
                error_message="",
                error_id=e["error_fingerprint"] if err else None,
            )
        )
    if not by_step:
        return []
    return [RecordedStep(i, by_step.get(i, ())) for i in range(min(by_step), max(by_step) + 1)]


def _replay_spans(
    con: Any,
    params: Mapping[str, Any],
    max_threshold: int,
    max_spans: int,
    timeout_s: float | None,
) -> list[dict[str, Any]]:
    if not 2 <= max_threshold <= 100:
        raise ValueError(f"max_threshold must be between 2 and 100, got {max_threshold!r}")
    res = run_query(con, "detector_replay_spans", params, max_rows=max_spans, timeout_s=timeout_s)
    if res.truncated:
        raise ValueError(
            f"more than {max_spans} tool spans in the window: narrow it (since/until, "
            "task_types) or raise max_spans"
        )
    # (task type, detector) -> [successful peaks, other peaks]
    peaks: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    for (_run, task_type, ok), events in groupby(
        res.records(), key=lambda r: (r["run_id"], r["task_type"], bool(r["ok"]))
    ):
        # fingerprints were normalized when recorded
        steps = _recorded_steps(list(events))
        for detector, peak in replay_peaks(steps, normalize=False).items():
            pair = peaks.setdefault((task_type, detector), ([], []))
            pair[0 if ok else 1].append(peak)
    rows: list[dict[str, Any]] = []
    for (task_type, detector), (good, bad) in peaks.items():
        for n in range(2, max_threshold + 1):
            false_stops = sum(1 for p in good if p >= n)
            caught = sum(1 for p in bad if p >= n)
            rows.append(
                {
                    "task_type": task_type,
                    "detector": detector,
                    "threshold": n,
                    "successful_runs": len(good),
                    "false_stops": false_stops,
                    "false_stop_share": false_stops / len(good) if good else None,
                    "failed_runs": len(bad),
                    "caught": caught,
                    "caught_share": caught / len(bad) if bad else None,
                }
            )
    return rows


assert set(BUDGET_FIELDS) == set(BUDGETS)
