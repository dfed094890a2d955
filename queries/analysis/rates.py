"""Each run's spend rate, as the guard's spend-rate stop sees it (docs/queries.md, "Spend rate").

The stop (``max_cost_per_min`` / ``max_tokens_per_min``, docs/runtime.md "Spend rate") compares,
before each model and tool call, the run's spend so far with its time so far, the time counted as
at least a minute. A run's rate here is the highest the guard could have seen: the spend at the end
of each model call over the time to that moment (from the run's model-call spans), and the spend
of the whole run over its whole wall time, each time floored at a minute. So a run shorter than a
minute has the rate of its whole spend in one minute, and a run that spent most of its money early
is measured by that early burst, not by its average. Runs whose spans are gone (retention) or that
never had them are measured by the whole-run average alone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple

from .gateway import run_query

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
    """One run's spend a minute (``None``: not recorded). A named tuple, not a dataclass: a
    window holds hundreds of thousands of them, and a tuple is several times cheaper to make
    (``loopwatch report``'s time, docs/queries.md "Speed")."""

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
    """The window's run rates by run id."""

    by_run: dict[str, RunRate] = field(default_factory=dict)

    def for_task(self, task_type: str) -> list[RunRate]:
        return [r for r in self.by_run.values() if r.task_type == task_type]


def run_rates(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    max_runs: int = 10_000,
    timeout_s: float | None = None,
) -> RunRates:
    """The ``spend_rate`` query's rows by run id."""
    res = run_query(
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
    return RunRates(
        {
            str(run_id): RunRate(str(task), bool(ok), bool(stopped), cost, tokens)
            for run_id, task, ok, stopped, cost, tokens in res.rows
        }
    )


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
    found = [rates.by_run.get(str(i)) for i in columns["run_id"]]
    for item in RATE_FIELDS:
        columns[item] = [None if r is None else r.rate(item) for r in found]
