"""Rollups: runs summed per task type and period (minute -> hour -> day), for long windows.

Two tables (docs/store.md, *Rollups*), made by :func:`ensure_rollup_tables` when serve first
rolls up (additive, like ``deliveries``: no schema version of their own):

- ``rollup_runs``: per ``(period, bucket, task_type, stop_reason, outcome, limit_name)``: runs,
  successful runs and the sums of steps, model calls, tool calls, tokens (input, output), cost
  and wall time;
- ``rollup_sketches``: per ``(period, bucket, task_type, measure)`` a DDSketch-style histogram
  of ``wall_s``, ``tokens``, ``steps`` and ``cost_usd``: a value ``x > 0`` counts in bin
  ``ceil(log(x) / log(GAMMA))``, 0 and less in :data:`ZERO_BIN`. Bins of any buckets, nodes or
  periods merge by adding their counts, and a quantile read from them is within
  :data:`RELATIVE_ERROR` (1%) of the true value at that rank.

Minutes are rolled from ``runs`` by start time, up to ``now - lag``; each pass rolls again the
last ``late_s`` (an hour) so runs that end and arrive late are counted; hours are rolled from
minutes and days from hours once they are whole. Runs that arrive later than that are marked by
the write that stores them (``rollup_dirty``, :mod:`.late`): each pass rolls up to
:data:`DIRTY_HOURS_PER_PASS` marked hours again (their minutes from ``runs``, the hour from its
minutes, the day from its hours). Every pass deletes and inserts the buckets it covers, so
running it twice changes nothing.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final

import duckdb

__all__ = [
    "DIRTY_HOURS_PER_PASS",
    "GAMMA",
    "MINUTES_KEPT_S",
    "PERIODS",
    "RELATIVE_ERROR",
    "SKETCH_MEASURES",
    "ZERO_BIN",
    "bin_value",
    "ensure_rollup_tables",
    "late_before",
    "roll_up",
    "rolled_until",
    "sketch_quantile",
]

RELATIVE_ERROR: Final = 0.01
GAMMA: Final = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
ZERO_BIN: Final = -(2**31)
"""The bin of values <= 0 (and of no value)."""
PERIODS: Final = {"minute": 60, "hour": 3600, "day": 86400}
MINUTES_KEPT_S: Final = 2 * 86400
"""Minute rows are kept two days (they feed the hours); hours and days are kept."""
SKETCH_MEASURES: Final = ("wall_s", "tokens", "steps", "cost_usd")
DIRTY_HOURS_PER_PASS: Final = 48
"""Marked hours rolled again per pass, oldest first: a flood of late runs costs a bounded pass."""
LAG_S: Final = 120.0
LATE_S: Final = 3600.0
_SUMS: Final = (
    "steps",
    "model_calls",
    "tool_calls",
    "tokens",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "wall_s",
)

_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS rollup_runs (
    period VARCHAR NOT NULL, bucket TIMESTAMP NOT NULL, task_type VARCHAR NOT NULL,
    stop_reason VARCHAR NOT NULL, outcome VARCHAR NOT NULL, limit_name VARCHAR,
    runs BIGINT NOT NULL, successes BIGINT NOT NULL,
    {", ".join(f"{c} DOUBLE" for c in _SUMS)}
);
CREATE TABLE IF NOT EXISTS rollup_sketches (
    period VARCHAR NOT NULL, bucket TIMESTAMP NOT NULL, task_type VARCHAR NOT NULL,
    measure VARCHAR NOT NULL, bin INTEGER NOT NULL, n BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS rollup_state (
    period VARCHAR PRIMARY KEY, rolled_until TIMESTAMP NOT NULL
);
"""
_SUCCESS: Final = "coalesce(task_success, outcome = 'success')"
_LN_GAMMA: Final = math.log(GAMMA)


def ensure_rollup_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the rollup tables when missing (idempotent)."""
    con.execute(_DDL)


def bin_value(x: float) -> int:
    """The sketch bin of ``x`` (the SQL of :func:`roll_up` computes the same)."""
    return math.ceil(math.log(x) / _LN_GAMMA) if x > 0 else ZERO_BIN


def sketch_quantile(bins: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile (nearest rank, ``ceil(q * n)``) of a merged sketch: the bin's
    midpoint ``2 * GAMMA**i / (GAMMA + 1)``, within :data:`RELATIVE_ERROR` of the true value."""
    total = sum(bins.values())
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for i in sorted(bins):
        seen += bins[i]
        if seen >= rank:
            return 0.0 if i == ZERO_BIN else 2 * GAMMA**i / (GAMMA + 1)
    return None  # pragma: no cover - seen reaches total


def rolled_until(con: duckdb.DuckDBPyConnection, period: str) -> datetime | None:
    """The end of the last whole ``period`` rolled up (UTC, naive), or ``None``."""
    row = con.execute("SELECT rolled_until FROM rollup_state WHERE period = ?", [period]).fetchone()
    return None if row is None else row[0]


def late_before(now: datetime, *, lag_s: float = LAG_S, late_s: float = LATE_S) -> datetime:
    """Runs starting before this instant are late for the pass at ``now`` and after: no normal
    pass from then on covers them, so their writes must mark their hours."""
    return _floor(now - timedelta(seconds=lag_s), 60) - timedelta(seconds=late_s)


def roll_up(
    con: duckdb.DuckDBPyConnection,
    now: datetime | None = None,
    *,
    lag_s: float = LAG_S,
    late_s: float = LATE_S,
    runs_kept_s: float | None = None,
) -> dict[str, int]:
    """Roll minutes up to ``now - lag_s``, then whole hours and days; buckets written per
    period. Idempotent; one transaction. ``runs_kept_s``: the runs table's retention window;
    minutes whose runs retention may have deleted are never rolled again (they would come out
    empty)."""
    ensure_rollup_tables(con)
    now = now or datetime.now(UTC).replace(tzinfo=None)
    end = _floor(now - timedelta(seconds=lag_s), 60)
    written: dict[str, int] = {}
    con.begin()
    try:
        before = rolled_until(con, "minute")
        start = _first_run(con) if before is None else before - timedelta(seconds=late_s)
        if start is None:
            con.rollback()
            return {}
        start = _floor(start, 60)
        if runs_kept_s is not None:  # the oldest whole minute retention has not touched
            start = max(
                start, _floor(now - timedelta(seconds=runs_kept_s), 60) + timedelta(minutes=1)
            )
        written["minute"] = _roll_minutes(con, start, end)
        for period, below in (("hour", "minute"), ("day", "hour")):
            size = PERIODS[period]
            lo, hi = _floor(start, size), _floor(end, size)
            written[period] = _roll_from(con, period, below, lo, hi) if hi > lo else 0
        written["dirty"] = _roll_dirty(con, start, end, runs_kept_s, now)
        _set_state(con, {"minute": end, "hour": _floor(end, 3600), "day": _floor(end, 86400)})
        for table in ("rollup_runs", "rollup_sketches"):  # minutes only feed hours: keep two days
            con.execute(
                f"DELETE FROM {table} WHERE period = 'minute' AND bucket < ?",
                [end - timedelta(seconds=MINUTES_KEPT_S)],
            )
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return written


def _roll_dirty(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    end: datetime,
    runs_kept_s: float | None,
    now: datetime,
) -> int:
    """Roll the oldest marked hours before ``start`` again (hours from ``start`` on were just
    rolled); their marks go in the same transaction. Hours whose runs retention may have
    deleted are dropped unrolled (they would come out short). The hours rolled again."""
    if not _has_table(con, "rollup_dirty"):
        return 0
    hours = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT hour FROM rollup_dirty ORDER BY hour LIMIT ?", [DIRTY_HOURS_PER_PASS]
        ).fetchall()
    ]
    kept_from = None if runs_kept_s is None else now - timedelta(seconds=runs_kept_s)
    rolled = 0
    for hour in hours:
        top = hour + timedelta(hours=1)
        if hour < _floor(start, 3600) and top <= end and (kept_from is None or hour >= kept_from):
            _roll_minutes(con, hour, top)
            _roll_from(con, "hour", "minute", hour, top)
            day = _floor(hour, 86400)
            if day + timedelta(days=1) <= _floor(end, 86400):
                _roll_from(con, "day", "hour", day, day + timedelta(days=1))
            rolled += 1
        con.execute("DELETE FROM rollup_dirty WHERE hour = ?", [hour])
    return rolled


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ?",
        [name],
    ).fetchone()
    return bool(row and row[0])


def _roll_minutes(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> int:
    """Minute buckets in ``[start, end)`` from ``runs``."""
    if end <= start:
        return 0
    con.execute(
        "DELETE FROM rollup_runs WHERE period = 'minute' AND bucket >= ? AND bucket < ?",
        [start, end],
    )
    con.execute(
        "DELETE FROM rollup_sketches WHERE period = 'minute' AND bucket >= ? AND bucket < ?",
        [start, end],
    )
    sums = ", ".join(f"sum({c})" for c in _SUMS)
    con.execute(
        f"""INSERT INTO rollup_runs SELECT 'minute', time_bucket(INTERVAL 1 MINUTE, started_at),
        task_type, stop_reason, outcome, limit_name, count(*), count(*) FILTER ({_SUCCESS}),
        {sums} FROM runs WHERE started_at >= ? AND started_at < ? GROUP BY ALL""",
        [start, end],
    )
    columns = ", ".join(f"{m}::DOUBLE AS {m}" for m in SKETCH_MEASURES)
    con.execute(
        f"""INSERT INTO rollup_sketches
        SELECT 'minute', bucket, task_type, measure,
               CASE WHEN x > 0 THEN ceil(ln(x) / {_LN_GAMMA!r})::INTEGER ELSE {ZERO_BIN} END,
               count(*)
        FROM (UNPIVOT (SELECT time_bucket(INTERVAL 1 MINUTE, started_at) AS bucket, task_type,
                              {columns}
                       FROM runs WHERE started_at >= ? AND started_at < ?)
              ON {", ".join(SKETCH_MEASURES)} INTO NAME measure VALUE x)
        GROUP BY ALL""",
        [start, end],
    )
    row = con.execute(
        "SELECT count(*) FROM rollup_runs WHERE period = 'minute' AND bucket >= ? AND bucket < ?",
        [start, end],
    ).fetchone()
    return int(row[0]) if row else 0


def _roll_from(
    con: duckdb.DuckDBPyConnection, period: str, below: str, lo: datetime, hi: datetime
) -> int:
    """``period`` buckets in ``[lo, hi)`` from the ``below`` period's rows (merged: sums and
    sketch bins added)."""
    width = f"INTERVAL 1 {period.upper()}"
    for table in ("rollup_runs", "rollup_sketches"):
        con.execute(
            f"DELETE FROM {table} WHERE period = ? AND bucket >= ? AND bucket < ?",
            [period, lo, hi],
        )
    sums = ", ".join(f"sum({c})" for c in ("runs", "successes", *_SUMS))
    con.execute(
        f"""INSERT INTO rollup_runs SELECT ?, time_bucket({width}, bucket), task_type,
        stop_reason, outcome, limit_name, {sums} FROM rollup_runs
        WHERE period = ? AND bucket >= ? AND bucket < ? GROUP BY ALL""",
        [period, below, lo, hi],
    )
    con.execute(
        f"""INSERT INTO rollup_sketches SELECT ?, time_bucket({width}, bucket), task_type,
        measure, bin, sum(n) FROM rollup_sketches
        WHERE period = ? AND bucket >= ? AND bucket < ? GROUP BY ALL""",
        [period, below, lo, hi],
    )
    row = con.execute(
        "SELECT count(*) FROM rollup_runs WHERE period = ? AND bucket >= ? AND bucket < ?",
        [period, lo, hi],
    ).fetchone()
    return int(row[0]) if row else 0


def _first_run(con: duckdb.DuckDBPyConnection) -> datetime | None:
    row = con.execute("SELECT min(started_at) FROM runs").fetchone()
    return None if row is None else row[0]


def _set_state(con: duckdb.DuckDBPyConnection, until: dict[str, datetime]) -> None:
    for period, ts in until.items():
        con.execute(
            "INSERT OR REPLACE INTO rollup_state (period, rolled_until) VALUES (?, ?)",
            [period, ts],
        )


def _floor(ts: datetime, seconds: int) -> datetime:
    epoch = datetime(1970, 1, 1)
    n = int((ts - epoch).total_seconds() // seconds)
    return epoch + timedelta(seconds=n * seconds)
