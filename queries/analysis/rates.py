"""Each run's spend rate, as the guard's spend-rate stop sees it (docs/queries.md, "Spend rate").

The stop (``max_cost_per_min`` / ``max_tokens_per_min``, docs/runtime.md "Spend rate") compares,
before each model and tool call, the run's spend so far with its time so far, the time counted as
at least a minute. A run's rate here is the highest the guard could have seen: the spend at the end
of each model call over the time to that moment (from the run's model-call spans), and the spend
of the whole run over its whole wall time, each time floored at a minute. So a run shorter than a
minute has the rate of its whole spend in one minute, and a run that spent most of its money early
is measured by that early burst, not by its average. The peak over the calls is kept in ``runs``
when the run is written (queries/store/spend_peaks.py), so it outlives the spans (retention); runs
without model-call spans are measured by the whole-run average alone.

A window holds hundreds of thousands of runs: :class:`RunRates` keeps them column by column (the
query's Arrow columns as lists), not as an object per run (``loopwatch report``'s time,
docs/queries.md "Speed").
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple

from .columnar import run_query_columns

__all__ = [
    "RATE_FIELDS",
    "SPEND_RATE",
    "RunRate",
    "RunRates",
    "attach_rates",
    "rate_items",
    "rate_items_on",
    "run_rates",
    "served_policy",
]

RATE_FIELDS: Final[dict[str, str]] = {
    "cost_per_min": "max_cost_per_min",
    "tokens_per_min": "max_tokens_per_min",
}
"""The spend-rate items of a limits file (each run's spend a minute) → ``LoopLimits`` field."""
SPEND_RATE: Final = "spend_rate"
"""Asked for in a file's items: the spend-rate stop, as ``cost_per_min`` where successful runs
recorded a cost, else ``tokens_per_min``."""


class RunRate(NamedTuple):
    """One run's spend a minute (``None``: not recorded): a row of :class:`RunRates`."""

    task_type: str
    ok: bool
    """A successful run (``gateway.SUCCESSFUL_RUN_SQL``)."""
    rate_stopped: bool
    """The spend-rate stop ended it."""
    cost_per_min: float | None
    tokens_per_min: float | None

    def rate(self, item: str) -> float | None:
        """The rate of ``item`` (``cost_per_min`` or ``tokens_per_min``)."""
        return self.cost_per_min if item == "cost_per_min" else self.tokens_per_min


@dataclass(frozen=True, slots=True)
class RunRates:
    """The window's run rates, column by column, grouped by task type (the ``spend_rate`` query's
    order)."""

    run_id: list[str] = field(default_factory=list)
    task_type: list[str] = field(default_factory=list)
    ok: list[bool] = field(default_factory=list)
    rate_stopped: list[bool] = field(default_factory=list)
    cost_per_min: list[float | None] = field(default_factory=list)
    tokens_per_min: list[float | None] = field(default_factory=list)

    def rates(self, item: str) -> list[float | None]:
        """The column of ``item`` (``cost_per_min`` or ``tokens_per_min``)."""
        return self.cost_per_min if item == "cost_per_min" else self.tokens_per_min

    def task_rows(self) -> dict[str, range]:
        """Task type → its rows (the rows of a task type are adjacent)."""
        out: dict[str, range] = {}
        start = 0
        types = self.task_type
        for i in range(1, len(types) + 1):
            if i == len(types) or types[i] != types[start]:
                out[types[start]] = range(start, i)
                start = i
        return out

    def row(self, i: int) -> RunRate:
        return RunRate(self.task_type[i], self.ok[i], self.rate_stopped[i],
                       self.cost_per_min[i], self.tokens_per_min[i])  # fmt: skip

    @property
    def by_run(self) -> dict[str, RunRate]:
        """Run id → its row (one object per run: for a few runs, not a window's)."""
        return {r: self.row(i) for i, r in enumerate(self.run_id)}

    def for_task(self, task_type: str) -> list[RunRate]:
        return [self.row(i) for i in self.task_rows().get(task_type, range(0))]


def run_rates(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    max_runs: int = 10_000,
    timeout_s: float | None = None,
) -> RunRates:
    """The ``spend_rate`` query's rows, column by column."""
    res = run_query_columns(
        con,
        "spend_rate",
        {
            "since": since,
            "until": until,
            "task_types": task_types,
            "max_runs": max_runs,
        },
        max_rows=10_000_000,
        timeout_s=timeout_s,
    )
    c = res.columns
    if not res.rows:
        return RunRates()
    return RunRates(c["run_id"], c["task_type"], [x is True for x in c["ok"]],
                    [x is True for x in c["rate_stopped"]], c["cost_per_min"],
                    c["tokens_per_min"])  # fmt: skip


def served_policy(con: Any) -> Any:
    """The limits ``loopwatch serve`` holds in this store now (a ``LimitPolicy``), or ``None``
    (no version yet, or a store from before serve held limits)."""
    import duckdb  # the `store` extra, only when used
    from loopwatch.queries.store.limit_versions import current_version

    try:
        version = current_version(con)
    except duckdb.Error:
        return None
    return None if version is None else version.policy()


def rate_items_on(con: Any, task_types: Collection[str], asked: bool) -> dict[str, list[str]]:
    """Per task type, the spend-rate items its limits file holds: those the limits ``loopwatch
    serve`` holds have on, else, when ``asked``, :data:`SPEND_RATE`."""
    policy = served_policy(con)
    out: dict[str, list[str]] = {}
    for task_type in task_types:
        limits = policy.for_task(task_type) if policy is not None else None
        served = [i for i, f in RATE_FIELDS.items() if getattr(limits, f, None) is not None]
        out[task_type] = served or ([SPEND_RATE] if asked else [])
    return out


def rate_items(on: Collection[str], recorded: Collection[str]) -> list[str]:
    """The spend-rate items ``on`` asks for: :data:`SPEND_RATE` is the cost rate where successful
    runs recorded a cost (``recorded``), else the tokens rate."""
    wanted = [r for r in RATE_FIELDS if r in on]
    if SPEND_RATE in on and not wanted:
        wanted = ["cost_per_min" if "cost_per_min" in recorded else "tokens_per_min"]
    return wanted


def attach_rates(columns: dict[str, Any], rates: RunRates) -> None:
    """Each run's spend rates beside its usage (``columns`` of the ``success_usage`` query;
    ``None`` where the run is not in ``rates``)."""
    index = dict(zip(rates.run_id, range(len(rates.run_id)), strict=True))
    found = [index.get(i) for i in columns["run_id"]]
    for item in RATE_FIELDS:
        col = rates.rates(item)
        columns[item] = [None if r is None else col[r] for r in found]
