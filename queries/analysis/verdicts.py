"""Verdicts on limits (docs/queries.md): the thresholds, the evidence a verdict rests on, and
:func:`judge`, which words one ``limit_stats`` row and the task type's fit as a verdict, a
proposed value and the promise behind it. Pure: no database."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .recommend import TaskFit
from .verdict_types import (
    BUDGET_FIELDS,
    AnalysisThresholds,
    Evidence,
    LimitAnalysis,
    Verdict,
    opt_float,
    round_up,
)

__all__ = [
    "BUDGET_FIELDS",
    "AnalysisThresholds",
    "Evidence",
    "LimitAnalysis",
    "Verdict",
    "judge",
    "opt_float",
    "promise_text",
    "round_up",
]


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
    case = _Case.of(_stats_row(stats), thresholds, fit)
    verdict, sentence = case.decide()
    s, b, limit, recommended = case.stats, case.budget, case.limit, case.recommended
    return LimitAnalysis(
        task_type=s.task_type,
        budget=b,
        field=case.field,
        current_limit=limit,
        recommended=recommended,
        proposed=_proposed(verdict, limit, recommended, thresholds, b, case.censored_floor),
        verdict=verdict,
        sentence=sentence,
        evidence=case.evidence(),
        lower_bound=verdict == "too_tight" and s.hits > 0 and case.censored_floor,
        promise=case.promise,
        **_figures(b, fit),
    )


def _stats_row(stats: Mapping[str, Any]) -> _Stats:
    return _Stats(
        task_type=str(stats["task_type"]),
        budget=str(stats["budget"]),
        current_limit=None if stats.get("current_limit") is None else float(stats["current_limit"]),
        runs=int(stats.get("runs") or 0),
        hits=int(stats.get("hits") or 0),
        hits_progressing=int(stats.get("hits_progressing") or 0),
        hits_looping=int(stats.get("hits_looping") or 0),
        successes=int(stats.get("successes") or 0),
        success_q=opt_float(stats.get("success_q")),
        success_p50=opt_float(stats.get("success_p50")),
        success_max=opt_float(stats.get("success_max")),
    )


@dataclass(frozen=True)
class _Case:
    """One limit being judged: its row, the thresholds, and the figures the verdict reads."""

    stats: _Stats
    t: AnalysisThresholds
    budget: str
    field: str
    limit: float | None
    hit_rate: float | None
    prog_share: float | None
    recommended: float | None
    promise: str
    p95_share: float | None
    censored_floor: bool

    @classmethod
    def of(cls, s: _Stats, t: AnalysisThresholds, fit: TaskFit | None) -> _Case:
        b = s.budget
        field = BUDGET_FIELDS[b]
        limit = s.current_limit
        known = s.hits_progressing + s.hits_looping
        return cls(
            stats=s,
            t=t,
            budget=b,
            field=field,
            limit=limit,
            hit_rate=s.hits / s.runs if s.runs else None,
            prog_share=s.hits_progressing / known if known else None,
            recommended=fit.value(b) if fit is not None and b not in fit.unrecorded else None,
            promise=promise_text(field, b, fit, t),
            p95_share=s.success_q / limit if limit and s.success_q is not None else None,
            censored_floor=fit is not None and fit.fit.lower_bound,
        )

    def evidence(self) -> Evidence:
        s = self.stats
        return Evidence(
            runs=s.runs,
            hits=s.hits,
            hit_rate=self.hit_rate,
            hits_progressing=s.hits_progressing,
            hits_looping=s.hits_looping,
            progressing_share=self.prog_share,
            successes=s.successes,
            success_p50=s.success_p50,
            success_p95=s.success_q,
            success_max=s.success_max,
            p95_share_of_limit=self.p95_share,
        )

    def decide(self) -> tuple[Verdict | None, str]:
        """The verdict and its sentence, in the order :func:`judge` documents."""
        t, s, limit, recommended = self.t, self.stats, self.limit, self.recommended
        if limit is None:
            return None, f"{self.field} is off; {self.promise}."
        if s.runs < t.min_runs:
            return "insufficient_data", (
                f"Only {s.runs} run{'' if s.runs == 1 else 's'} under {self.lim} in the window "
                f"(need {t.min_runs}); keep it for now."
            )
        if self.hit_rate is not None and self.hit_rate >= t.tight_hit_rate:
            return self._hit_often(self.hit_rate, limit)
        if recommended is None and not self.censored_floor:
            promise = self.promise
            return (
                "insufficient_data",
                f"{promise[0].upper()}{promise[1:]}; keep {self.fmt(limit)}.",
            )
        if (self.p95_share is not None and self.p95_share >= t.tight_p95_share) or (
            recommended is not None and limit < recommended
        ):
            return "too_tight", (
                f"{self.lim} leaves little headroom: {self.p95_text} — raise it to "
                f"{self.fmt(self.raised(limit))}; {self.promise}."
            )
        if (
            recommended is not None
            and self.hit_rate is not None
            and self.hit_rate <= t.loose_hit_rate
            and limit >= t.loose_factor * recommended
        ):
            return "too_loose", (
                f"{self.lim} stopped {_pct(self.hit_rate)} of runs; lower it to "
                f"{self.fmt(recommended)} to cap runaway spend: {self.promise}."
            )
        return (
            "ok",
            f"{self.lim} fits: it stopped {_pct(self.hit_rate)} of runs, and {self.p95_text}."
            + (f" No lower value can be promised: {self.promise}." if recommended is None else ""),
        )

    def _hit_often(self, hit_rate: float, limit: float) -> tuple[Verdict, str]:
        """A limit that stops many runs: too tight if they were progressing, else stuck."""
        share = self.prog_share
        if share is None:
            return "insufficient_data", (
                f"{self.lim} stopped {_pct(hit_rate)} of runs, but they recorded no progress "
                "evidence, so tight and stuck cannot be told apart."
            )
        if share >= self.t.progressing_share:
            return "too_tight", (
                f"{self.lim} stopped {_pct(hit_rate)} of runs and {_pct(share)} of those "
                f"were still making progress — raise it to {self.fmt(self.raised(limit))}; "
                f"{self.promise}."
            )
        return "stuck_not_tight", (
            f"{self.lim} stopped {_pct(hit_rate)} of runs but {_pct(1 - share)} of those "
            "were looping (no new calls, or repeated errors); raising it would only burn "
            "more — fix the loop or tighten the stuck detectors."
        )

    def raised(self, limit: float) -> float | None:
        return _proposed(
            "too_tight", limit, self.recommended, self.t, self.budget, self.censored_floor
        )

    def fmt(self, value: float | None) -> str:
        return _fmt(self.budget, value)

    @property
    def lim(self) -> str:
        return f"{self.field}={self.fmt(self.limit)}"

    @property
    def p95_text(self) -> str:
        q = f"p{self.t.quantile * 100:g}"
        return (
            f"successful runs' {q} ({self.fmt(self.stats.success_q)}) is "
            f"{_pct(self.p95_share)} of it"
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
