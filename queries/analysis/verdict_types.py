"""What a verdict on a limit is made of (docs/queries.md): the thresholds it applies, the
evidence it rests on and the :class:`LimitAnalysis` it returns; :mod:`.verdicts` makes them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .guarantee import DEFAULT_CONFIDENCE, DEFAULT_CUT_TARGET

__all__ = [
    "BUDGET_FIELDS",
    "AnalysisThresholds",
    "Evidence",
    "LimitAnalysis",
    "Verdict",
    "opt_float",
    "round_up",
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


def opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
