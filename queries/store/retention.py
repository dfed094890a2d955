"""Retention: rows older than each table's window are deleted in small batches.

``serve --keep-spans 7d --keep-runs 90d`` (docs/store.md, *Retention*). Each call of
:meth:`Retention.step` deletes at most ``batch_rows`` rows of one table in one short
transaction, so the writer's commits and the readers' queries go on between batches. DuckDB
marks the rows deleted; a checkpoint frees row groups left empty (and vacuums those mostly
deleted), and later writes reuse the freed blocks, so the file stops growing once the window is
full. It only shrinks when it is rewritten (:func:`compact`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the CLI reads the defaults here for --help, which loads no DuckDB
    import duckdb


__all__ = [
    "DEFAULT_KEEP_RUNS",
    "DEFAULT_KEEP_SPANS",
    "Retention",
    "RetentionPolicy",
    "compact",
    "parse_duration",
]

DEFAULT_KEEP_SPANS: Final = "7d"
"""Spans (one run's steps, drill-down) are kept a week by default."""
DEFAULT_KEEP_RUNS: Final = "90d"
"""Runs (what every chart reads) are kept ninety days by default."""
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
# table -> the time column its rows age by (Unix ns)
_AGE_COLUMN: Final = {"spans": "start_ns", "runs": "start_ns"}


def parse_duration(text: str) -> float | None:
    """``"7d"``, ``"12h"``, ``"90m"``, ``"30s"``, ``"2w"`` in seconds; ``"forever"``, ``"0"``
    and ``"off"`` as ``None`` (keep everything). Anything else is a ``ValueError``."""
    if text.strip().lower() in ("forever", "off", "0", "none"):
        return None
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(
            f"not a duration: {text!r}; use a number and a unit s, m, h, d or w (7d, 12h), "
            "or 'forever'"
        )
    seconds = float(match[1]) * _UNITS[match[2]]
    if seconds <= 0:
        raise ValueError(f"a retention window must be positive, got {text!r}; or 'forever'")
    return seconds


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long each table keeps its rows (seconds; ``None`` = forever)."""

    keep_spans_s: float | None = 7 * 86400.0
    keep_runs_s: float | None = 90 * 86400.0
    batch_rows: int = 20_000
    """Rows deleted per transaction: small enough that a batch takes milliseconds."""

    @classmethod
    def parse(cls, keep_spans: str, keep_runs: str, batch_rows: int = 20_000) -> RetentionPolicy:
        """From the command line's texts (``"7d"``, ``"forever"``)."""
        return cls(parse_duration(keep_spans), parse_duration(keep_runs), batch_rows)

    def windows(self) -> dict[str, float]:
        """The tables with a window, and the window in seconds."""
        pairs = {"spans": self.keep_spans_s, "runs": self.keep_runs_s}
        return {table: s for table, s in pairs.items() if s is not None}


@dataclass(slots=True)
class RetentionCounts:
    """Rows deleted so far, by table, and the batches that did it."""

    deleted: dict[str, int]
    batches: int = 0


class Retention:
    """Deletes expired rows one small batch at a time (call :meth:`step` repeatedly)."""

    def __init__(self, policy: RetentionPolicy) -> None:
        self.policy = policy
        self.counts = RetentionCounts(deleted={t: 0 for t in policy.windows()})

    def step(
        self,
        con: duckdb.DuckDBPyConnection,
        now_s: float | None = None,
        *,
        keep_after_ns: int | None = None,
    ) -> int:
        """Delete at most one batch of expired rows from the first table that has some;
        the number deleted (0: nothing is expired now). Rows at or after ``keep_after_ns``
        are kept whatever their age (serve: not archived yet)."""
        now = time.time() if now_s is None else now_s
        for table, window in self.policy.windows().items():
            cutoff_ns = int((now - window) * 1e9)
            if keep_after_ns is not None:
                cutoff_ns = min(cutoff_ns, keep_after_ns)
            deleted = delete_batch(con, table, cutoff_ns, self.policy.batch_rows)
            if deleted:
                self.counts.deleted[table] += deleted
                self.counts.batches += 1
                return deleted
        return 0

    def run_until_done(self, con: duckdb.DuckDBPyConnection, now_s: float | None = None) -> int:
        """Every batch due now, one after another (tests, `loopwatch` jobs); rows deleted."""
        total = 0
        while n := self.step(con, now_s):
            total += n
        return total


def delete_batch(con: duckdb.DuckDBPyConnection, table: str, cutoff_ns: int, limit: int) -> int:
    """Delete at most ``limit`` rows of ``table`` older than ``cutoff_ns``, in one transaction."""
    column = _AGE_COLUMN[table]  # a fixed name from this module, never user input
    row = con.execute(
        f"DELETE FROM {table} WHERE rowid IN "
        f"(SELECT rowid FROM {table} WHERE {column} < ? LIMIT ?)",
        [cutoff_ns, limit],
    ).fetchone()
    return int(row[0]) if row else 0


def compact(source: Path, target: Path) -> dict[str, Any]:
    """Rewrite ``source`` into a new file ``target`` (``COPY FROM DATABASE``): the way to give
    disk space back to the file system at once; (bytes before, bytes after)."""
    if target.exists():
        raise FileExistsError(f"{target} exists: name a new file")
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("ATTACH ? AS src (READ_ONLY)", [str(source)])
        con.execute("ATTACH ? AS dst", [str(target)])
        con.execute("COPY FROM DATABASE src TO dst")
    finally:
        con.close()
    return {"before": source.stat().st_size, "after": target.stat().st_size}
