"""The binomial bound behind a recommended limit's promise (docs/queries.md, "What a
recommendation promises"; the reasoning is in :mod:`loopwatch.queries.analysis.guarantee`)."""

from __future__ import annotations

import math
from functools import cache

__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_CUT_TARGET", "allowed_cuts", "runs_needed"]

DEFAULT_CUT_TARGET = 0.02
"""The share of successful runs a recommended limits file may cut (``--cut-target``)."""
DEFAULT_CONFIDENCE = 0.95
"""The confidence of the promise (δ = 0.05)."""


def _log_binom_cdf_le(n: int, p: float, m: int) -> float:
    """log P(Binomial(n, p) ≤ m), summed in log space (n may be millions)."""
    if m >= n:
        return 0.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return -math.inf
    log_q = math.log1p(-p)
    ratio = math.log(p) - log_q
    term = n * log_q  # log P(X = 0)
    total = term
    for k in range(m):
        term += math.log((n - k) / (k + 1)) + ratio
        hi = max(total, term)
        total = hi + math.log(math.exp(total - hi) + math.exp(term - hi))
    return total


@cache  # a pure function of its arguments, asked by every fit (the same n many times)
def allowed_cuts(n: int, target: float, confidence: float = DEFAULT_CONFIDENCE) -> int | None:
    """The most runs of ``n`` a value may leave above it and still promise to cut at most
    ``target`` of new runs with ``confidence``: the largest m with P(Bin(n, target) ≤ m) ≤ δ;
    ``None`` when even m = 0 fails (too few runs)."""
    if not 0 < target < 1 or not 0 < confidence < 1:
        raise ValueError(f"target and confidence must be in (0, 1), got {target}, {confidence}")
    log_delta = math.log(1 - confidence)
    if n <= 0 or n * math.log1p(-target) > log_delta:
        return None
    lo, hi = 0, max(0, min(n - 1, int(n * target)))
    while lo < hi:  # the CDF grows with m: the largest m with log CDF ≤ log δ
        mid = (lo + hi + 1) // 2
        if _log_binom_cdf_le(n, target, mid) <= log_delta:
            lo = mid
        else:
            hi = mid - 1
    return lo


def runs_needed(target: float, confidence: float = DEFAULT_CONFIDENCE, items: int = 1) -> int:
    """The fewest successful runs for which ``items`` limits can be promised together."""

    def enough(n: int) -> bool:
        m = allowed_cuts(n, target, confidence)
        return m is not None and m >= items - 1

    lo = max(1, math.ceil(math.log(1 - confidence) / math.log1p(-target)))
    hi = lo
    while not enough(hi):
        lo, hi = hi + 1, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi
