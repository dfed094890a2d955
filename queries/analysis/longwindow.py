"""Long windows: whole days from the rollups, today from runs (docs/queries.md, *Long windows*).

``serve`` rolls runs up per minute, hour and day (``loopwatch.queries.store.rollups``); charts
over weeks and months read the day rollups for every whole day rolled up and the ``runs`` table
only after that, so a 90-day chart reads ~90 rows per task type and outcome instead of every
run. A store without rollups (file mode, never served) is read from ``runs`` alone, with the
same answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from loopwatch.queries.store.rollups import SKETCH_MEASURES, ZERO_BIN, sketch_quantile

from .gateway import QueryParameterError, QueryResult, run_query

__all__ = ["has_rollups", "runs_daily", "usage_quantiles"]

_LN_GAMMA = 0.020000666706669435  # log((1 + 0.01) / (1 - 0.01)), as the rollups bin


def has_rollups(con: Any) -> bool:
    """Whether the store behind ``con`` has the rollup tables."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name IN ('rollup_runs', 'rollup_sketches', "
        "'rollup_state')"
    ).fetchone()
    return bool(row and row[0] == 3)


def runs_daily(
    con: Any,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    task_types: list[str] | None = None,
) -> QueryResult:
    """``runs_daily`` (rollups for whole days, runs after), or ``runs_daily_raw`` on a store
    without rollups: runs, successes and usage sums per day, task type, outcome, stop reason."""
    params = {"since": since, "until": until, "task_types": task_types}
    name = "runs_daily" if has_rollups(con) else "runs_daily_raw"
    return run_query(con, name, params, max_rows=1_000_000)


def usage_quantiles(
    con: Any,
    measure: str,
    qs: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99),
    *,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    task_types: list[str] | None = None,
) -> dict[str, dict[float, float | None]]:
    """Quantiles of a run measure per task type over a long window, each within 1% of the true
    value at its rank (nearest rank, ``ceil(q * n)``), from the merged sketches."""
    if measure not in SKETCH_MEASURES:
        raise QueryParameterError(f"measure must be one of {', '.join(SKETCH_MEASURES)}")
    bins: dict[str, dict[int, int]] = {}
    if has_rollups(con):
        params: Mapping[str, Any] = {
            "measure": measure,
            "since": since,
            "until": until,
            "task_types": task_types,
            "ln_gamma": _LN_GAMMA,
        }
        rows = run_query(con, "usage_sketch", params, max_rows=10_000_000).rows
    else:
        rows = _raw_bins(con, measure, since, until, task_types)
    for task_type, b, n in rows:
        bins.setdefault(task_type, {})[int(b)] = int(n)
    return {t: {q: sketch_quantile(b, q) for q in qs} for t, b in sorted(bins.items())}


def _raw_bins(
    con: Any,
    measure: str,
    since: datetime | str | None,
    until: datetime | str | None,
    task_types: list[str] | None,
) -> list[tuple[Any, ...]]:
    """The sketch of a store without rollups, binned the same way from ``runs``."""
    column = SKETCH_MEASURES[SKETCH_MEASURES.index(measure)]  # one of four fixed names
    cur = con.cursor()
    try:
        rows: list[tuple[Any, ...]] = cur.execute(
            f"""SELECT task_type,
                   CASE WHEN x > 0 THEN ceil(ln(x) / $g)::INTEGER ELSE {ZERO_BIN} END AS bin,
                   count(*) AS n
            FROM (SELECT task_type, {column}::DOUBLE AS x FROM runs
                  WHERE ($since::TIMESTAMP IS NULL
                         OR started_at >= time_bucket(INTERVAL 1 DAY, $since::TIMESTAMP))
                    AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
                    AND ($tt::VARCHAR[] IS NULL OR list_contains($tt::VARCHAR[], task_type)))
            WHERE x IS NOT NULL GROUP BY ALL""",
            {"g": _LN_GAMMA, "since": since, "until": until, "tt": task_types},
        ).fetchall()
    finally:
        cur.close()
    return rows
