"""Limits with a stated guarantee: order statistics and a binomial bound (docs/queries.md).

A limits file is a set of *items* (each budget limit that is on, each detector threshold). A
successful run is *cut* by the file when any item's usage exceeds its limit. The promise, for a
target share α and a confidence 1 − δ::

    with probability at least 1 − δ over the runs it was fit on, the file cuts at most α of
    new successful runs (drawn like them).

How (distribution-free; nothing is assumed about the shape of the usage, so heavy-tailed token
and cost budgets are treated like step counts):

* One limit. Its value is an order statistic of the n successful runs' usage: the smallest one
  whose count of runs above it, m, satisfies P(Binomial(n, α) ≤ m) ≤ δ. If the share of new
  runs above it were more than α, seeing at most m of n above it would have that probability or
  less (Clopper–Pearson; ties and integer budgets only make it safer). With fewer than
  ln δ / ln(1 − α) runs no value qualifies: the answer is how many runs are needed.
* Several limits, judged together. Each item is set at its own j-th largest value for one common
  j, and j is the largest for which the runs the file cuts, c, plus one per further item, stay
  within m: c + (K − 1) ≤ m. For one item this is the rule above. For K items, each item's
  share of new runs above its j-th largest value is Beta(j + 1, n − j); their sum, which bounds
  the file's share, is (for independent usages, the worst case for a union) Gamma(c + K), the
  distribution the single-limit rule bounds with c + K = m + 1. The property tests
  (``tests/test_guarantee.py``) check the rate on independent, comonotone and heavy-tailed data.
* Censored runs. A live run a limit stopped (its task not labelled failed, not looping) hid how
  far it needed to go: it counts as cut by any value below its usage, and by a value above it
  with the Kaplan–Meier share of successful runs that went from its usage past that value
  (runs that exceeded it and then kept going). Where no successful run went as far as the cut
  run, the data cannot tell: it counts as cut and the result is marked ``lower_bound``.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .binomial import DEFAULT_CONFIDENCE, DEFAULT_CUT_TARGET, allowed_cuts, runs_needed
from .cuts import (
    Observation,
    RunColumns,
    above,
    columns_cut,
    grouped_cut,
    usages,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_CUT_TARGET",
    "FileFit",
    "Item",
    "ItemFit",
    "Observation",
    "RunColumns",
    "above",
    "allowed_cuts",
    "columns_cut",
    "fit_file",
    "fit_one",
    "runs_needed",
    "share_cut",
]


@dataclass(frozen=True, slots=True)
class Item:
    """One limit of a file: its name, how its values are rounded and its smallest value."""

    name: str
    resolution: float = 1.0
    minimum: float = 0.0
    """The smallest value the limit may take (a detector threshold of 2 is the value 1)."""
    fixed: float | None = None
    """A value that is not tuned (it still cuts, and counts in the file's total)."""


@dataclass(frozen=True, slots=True)
class ItemFit:
    name: str
    value: float | None
    """The limit (``None``: no run recorded this usage)."""
    runs: int
    """Runs that recorded this usage."""
    cut: int
    """Of those, runs above ``value`` (the observed cut)."""

    @property
    def cut_share(self) -> float | None:
        return self.cut / self.runs if self.runs else None


@dataclass(frozen=True, slots=True)
class FileFit:
    """The limits of one file with the promise they carry."""

    target: float
    confidence: float
    runs: int
    """Successful runs fit on (censored ones included)."""
    censored: int
    items: tuple[ItemFit, ...] = ()
    """Empty when refused."""
    cut: float = 0.0
    """Runs the whole file cuts (censored runs counted by their Kaplan–Meier share)."""
    needed: int | None = None
    """Set when refused: the successful runs needed for this many limits at this target."""
    lower_bound: bool = False
    """Some runs a limit cut went further than any successful run: the values are floors."""
    values: dict[str, float | None] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return self.needed is not None

    @property
    def cut_share(self) -> float | None:
        return self.cut / self.runs if self.runs else None


def _round_up(value: float, resolution: float) -> float:
    return round(math.ceil(value / resolution - 1e-9) * resolution, 10)


def share_cut(
    items: Sequence[Item], values: Sequence[float | None], runs: Sequence[Observation]
) -> tuple[int, list[int]]:
    """Runs (not censored) the limits ``values`` cut, in all and per item."""
    return grouped_cut(values, Counter(tuple(r.usage) for r in runs if not r.censored))


class _Fitter:
    """The search over the common rank j (one sort per item, then a binary search).

    Only the runs above some item's value at rank ``max_j`` can be cut by any j the search
    tries: they are picked out column by column once, so the search works on the tail.
    """

    def __init__(self, items: Sequence[Item], runs: RunColumns, max_j: int) -> None:
        self.items = items
        exact = runs.exact_columns()
        self.asc: list[list[float]] = [sorted([x for x in col if x is not None]) for col in exact]
        floor = [
            a[-1 - max_j] if it.fixed is None and max_j < len(a) else -math.inf
            for it, a in zip(items, self.asc, strict=True)
        ]
        for i, it in enumerate(items):
            if it.fixed is not None:
                floor[i] = min(floor[i], it.fixed) if floor[i] != -math.inf else it.fixed
        tail: set[int] = set()
        for col, f in zip(exact, floor, strict=True):
            tail.update(above(col, f))
        # runs with the same usages weigh as one (count budgets repeat a lot)
        self.tail: Counter[tuple[float | None, ...]] = Counter(usages(exact, sorted(tail)))
        cens = [r for r, c in enumerate(runs.censored) if c is not None]
        self.censored = len(cens)
        # censored runs below every floor are cut only by their Kaplan–Meier share: grouped by
        # (item that stopped them, usage there), the few groups are weighed once per try
        cens_above: set[int] = set()
        for col, f in zip(runs.usage, floor, strict=True):
            cens_above.update(r for r in cens if (x := col[r]) is not None and x > f)
        self.cens_tail: Counter[tuple[tuple[float | None, ...], int]] = Counter(
            (tuple(c[r] for c in runs.usage), runs.censored[r] or 0) for r in sorted(cens_above)
        )
        self.cens_groups: Counter[tuple[int | None, float | None]] = Counter(
            (c, None if c is None or c < 0 else runs.usage[c][r])
            for r in cens
            if r not in cens_above
            for c in (runs.censored[r],)
        )
        self.reached = {g: self.reached_past(*g) for g in self.cens_groups}
        """Per censored group, the successful runs that went past its usage (every try asks)."""

    def reached_past(self, i: int | None, c: float | None) -> int:
        """Runs (not censored) that went past usage ``c`` of item ``i`` (0: none can tell)."""
        return self.above(i, c) if i is not None and i >= 0 and c is not None else 0

    def values(self, j: int) -> list[float | None]:
        out: list[float | None] = []
        for it, a in zip(self.items, self.asc, strict=True):
            if it.fixed is not None:
                out.append(it.fixed)
            elif not a:
                out.append(None)
            else:
                raw = a[-1 - j] if j < len(a) else it.minimum
                out.append(max(it.minimum, _round_up(raw, it.resolution)))
        return out

    def above(self, i: int, value: float) -> int:
        """Runs (not censored) whose usage of item ``i`` is above ``value``."""
        a = self.asc[i]
        return len(a) - bisect.bisect_right(a, value + 1e-12)

    def cut(self, values: Sequence[float | None]) -> tuple[float, bool]:
        """Runs cut (censored ones by their Kaplan–Meier share) and whether some could not be
        told."""
        total = float(grouped_cut(values, self.tail)[0])
        unknown = False
        groups: Counter[tuple[int | None, float | None]] = Counter(self.cens_groups)
        lims = [math.inf if v is None else v + 1e-12 for v in values]
        for (usage, ci), weight in self.cens_tail.items():
            for x, lim in zip(usage, lims, strict=True):
                if x is not None and x > lim:
                    total += weight
                    break
            else:
                groups[(ci, None if ci < 0 else usage[ci])] += weight
        past_value: dict[int, int] = {}  # item -> runs above its value in this try
        for (i, c), count in groups.items():
            v = None if i is None or i < 0 else values[i]
            # it needed more than c: only runs that went past c tell how much more
            reached = self.reached.get((i, c))
            if reached is None:
                reached = self.reached_past(i, c)
            if v is None or reached == 0 or i is None:
                total += count
                unknown = True
            else:
                if (past := past_value.get(i)) is None:
                    past = past_value[i] = self.above(i, v)
                total += count * past / reached
        return total, unknown


def fit_file(
    items: Sequence[Item],
    runs: Sequence[Observation] | RunColumns,
    *,
    target: float = DEFAULT_CUT_TARGET,
    confidence: float = DEFAULT_CONFIDENCE,
) -> FileFit:
    """The tightest limits for ``items`` that promise, together, to cut at most ``target`` of new
    successful runs with ``confidence`` (see the module docstring), or how many runs are needed.
    ``runs``: one :class:`Observation` per run, or the same as :class:`RunColumns`."""
    n = len(runs)
    k = len(items)
    m = allowed_cuts(n, target, confidence)
    columns = runs if isinstance(runs, RunColumns) else RunColumns.of(runs, k)
    fitter = _Fitter(items, columns, max(m or 0, 0))
    censored = fitter.censored
    if m is None or m < k - 1:
        return FileFit(
            target=target,
            confidence=confidence,
            runs=n,
            censored=censored,
            needed=runs_needed(target, confidence, max(1, k)),
        )
    budget = m - (k - 1)
    lo, hi = 0, max(0, m)
    best: tuple[list[float | None], float, bool] | None = None
    while lo <= hi:  # the largest j whose cut stays within budget (cut grows with j)
        mid = (lo + hi) // 2
        vals = fitter.values(mid)
        cut, unknown = fitter.cut(vals)
        if math.ceil(cut - 1e-9) <= budget:
            best = (vals, cut, unknown)
            lo = mid + 1
        else:
            hi = mid - 1
    if best is None:
        # Even the largest values seen cut too many: runs a limit stopped went further than any
        # successful run (the data cannot tell), or ties at the top.
        top = fitter.values(0)
        exact_cut = grouped_cut(top, fitter.tail)[0]
        unknown = fitter.censored > 0 and exact_cut <= budget
        needed = runs_needed(target, confidence, max(1, k))
        return FileFit(
            target=target,
            confidence=confidence,
            runs=n,
            censored=censored,
            needed=max(needed, n + 1),
            lower_bound=unknown,
        )
    vals, cut, unknown = best
    _, per = grouped_cut(vals, fitter.tail)
    fits = tuple(
        ItemFit(it.name, v, len(a), c)
        for it, v, a, c in zip(items, vals, fitter.asc, per, strict=True)
    )
    return FileFit(
        target=target,
        confidence=confidence,
        runs=n,
        censored=censored,
        items=fits,
        cut=cut,
        lower_bound=unknown,
        values={it.name: v for it, v in zip(items, vals, strict=True)},
    )


def fit_one(
    item: Item,
    usage: Sequence[float | None],
    *,
    target: float = DEFAULT_CUT_TARGET,
    confidence: float = DEFAULT_CONFIDENCE,
) -> FileFit:
    """:func:`fit_file` for one limit and runs none of which were censored, without the search:
    the value is the order statistic with at most m runs above it."""
    n = len(usage)
    m = allowed_cuts(n, target, confidence)
    if m is None:
        return FileFit(
            target=target,
            confidence=confidence,
            runs=n,
            censored=0,
            needed=runs_needed(target, confidence),
        )
    asc = sorted(x for x in usage if x is not None)
    value: float | None = None
    if asc:
        raw = asc[-1 - m] if m < len(asc) else item.minimum
        value = max(item.minimum, _round_up(raw, item.resolution))
    cut = 0 if value is None else len(asc) - bisect.bisect_right(asc, value + 1e-12)
    return FileFit(
        target=target,
        confidence=confidence,
        runs=n,
        censored=0,
        items=(ItemFit(item.name, value, len(asc), cut),),
        cut=cut,
        values={item.name: value},
    )
