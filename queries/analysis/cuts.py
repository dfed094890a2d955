"""Runs column by column, and the runs a set of limits cuts (the arithmetic under
:mod:`~loopwatch.queries.analysis.guarantee`'s fits and back-tests; docs/queries.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

__all__ = [
    "Observation",
    "RunColumns",
    "above",
    "columns_cut",
    "grouped_cut",
    "picked",
    "usages",
]


class Observation(NamedTuple):
    """One run: its usage per item (``None``: not recorded, never cut by that item)."""

    usage: Sequence[float | None]
    censored_item: int | None = None
    """For a run a limit stopped live: the index of that item (-1: a limit not in the file)."""

    @property
    def censored(self) -> bool:
        return self.censored_item is not None


@dataclass(frozen=True, slots=True)
class RunColumns:
    """Runs column by column, as a query returns them: ``usage[i][r]`` is run r's usage of item
    i (``None``: not recorded), ``censored[r]`` what :attr:`Observation.censored_item` says.
    The fit reads a column at a time (a comparison per value, no object per run)."""

    usage: Sequence[Sequence[float | None]]
    censored: Sequence[int | None]

    def __len__(self) -> int:
        return len(self.censored)

    @classmethod
    def of(cls, runs: Sequence[Observation], k: int) -> RunColumns:
        """The columns of ``runs`` (each with ``k`` usages)."""
        usage = [tuple(r.usage[i] for r in runs) for i in range(k)]
        return cls(usage, tuple(r.censored_item for r in runs))

    def part(self, start: int, stop: int) -> RunColumns:
        """Runs ``start`` to ``stop`` (in order)."""
        return RunColumns([c[start:stop] for c in self.usage], self.censored[start:stop])

    def observation(self, r: int) -> Observation:
        return Observation(tuple(c[r] for c in self.usage), self.censored[r])

    def exact_columns(self) -> Sequence[Sequence[float | None]]:
        """The usage columns of the runs not censored."""
        if all(c is None for c in self.censored):
            return self.usage
        keep = [r for r, c in enumerate(self.censored) if c is None]
        return [picked(col, keep) for col in self.usage]


def picked(column: Sequence[float | None], rows: Sequence[int]) -> list[float | None]:
    """The values of ``column`` at ``rows``, in their order."""
    if len(rows) > 1:
        return list(itemgetter(*rows)(column))
    return [column[r] for r in rows]


def usages(
    columns: Sequence[Sequence[float | None]], rows: Sequence[int]
) -> Iterable[tuple[float | None, ...]]:
    """Each of ``rows``' usages across ``columns`` (one tuple per row, in their order)."""
    return zip(*(picked(c, rows) for c in columns), strict=True)


def above(column: Sequence[float | None], floor: float) -> list[int]:
    """Indexes of the values of ``column`` above ``floor``."""
    return [r for r, x in enumerate(column) if x is not None and x > floor]


def columns_cut(
    values: Sequence[float | None], columns: Sequence[Sequence[float | None]]
) -> tuple[int, list[int]]:
    """:func:`share_cut` of runs none of which is censored, given column by column."""
    cut: set[int] = set()
    per = []
    for v, col in zip(values, columns, strict=True):
        hit = [] if v is None else above(col, v + 1e-12)
        per.append(len(hit))
        cut.update(hit)
    return len(cut), per


def grouped_cut(
    values: Sequence[float | None], runs: Counter[tuple[float | None, ...]]
) -> tuple[int, list[int]]:
    """:func:`share_cut` of runs (none censored) given as usages → how many runs had them."""
    lims = [math.inf if v is None else v + 1e-12 for v in values]
    per = [0] * len(values)
    total = 0
    for usage, weight in runs.items():
        hit = False
        for i, lim in enumerate(lims):
            if (x := usage[i]) is not None and x > lim:
                per[i] += weight
                hit = True
        if hit:
            total += weight
    return total, per
