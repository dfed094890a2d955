"""Rows that arrive late, recorded as they are written so rollups and the archive catch up
(docs/store.md, *Late rows*).

serve's housekeeping tells the store two kinds of instants (:class:`LateRows`): runs that started
before ``rollup_before_ns`` fall in minutes already rolled up, and rows that started before
``archive_before_ns[table]`` fall in days this node has archived. A batch holding such rows
records, in its own transaction: the hours of its late runs in ``rollup_dirty``, and the keys of
its late rows in ``archive_late``. The rollups then roll those hours again; the archive writes
the marked rows as one more file of their day (``part-1``, ``part-2``, ...). A batch without a
late row costs one ``min()`` per table. The instants change only under the store's write lock
(:meth:`~.database.Store.run_write`), so a batch either sees the new instant or was committed
before the pass that reads the store began.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import duckdb
import pyarrow as pa

__all__ = ["LATE_DDL", "LateRows", "ensure_late_tables"]

LATE_DDL: Final = """
CREATE TABLE IF NOT EXISTS rollup_dirty (hour TIMESTAMP NOT NULL);
CREATE TABLE IF NOT EXISTS archive_late (
    tbl VARCHAR NOT NULL, day DATE NOT NULL,
    run_id VARCHAR, trace_id VARCHAR, span_id VARCHAR
);
"""
_DAY: Final = "make_timestamp(start_ns // 1000)::DATE"
# The batch tables of write_sql.insert_batch, found by DuckDB among its local variables.
_MARKS: Final = {
    "runs": f"SELECT 'runs', {_DAY}, run_id, NULL, NULL FROM _lw_runs_batch",
    "spans": f"SELECT 'spans', {_DAY}, NULL, trace_id, span_id FROM _lw_spans_batch",
}


def ensure_late_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``rollup_dirty`` and ``archive_late`` when missing (idempotent, additive)."""
    con.execute(LATE_DDL)


@dataclass(slots=True)
class LateRows:
    """The instants before which a written row is late (Unix ns; ``None``: nothing is)."""

    rollup_before_ns: int | None = None
    """Runs starting before this were already rolled up without the batch."""
    archive_before_ns: dict[str, int] = field(default_factory=dict)
    """Per table (``runs``, ``spans``): rows starting before this are in an archived day."""

    def statements(self, spans: pa.Table | None, runs: pa.Table | None) -> list[str]:
        """The SQL recording the late rows of a batch (none for a batch of recent rows)."""
        found: list[str] = []
        run_min = _min_start(runs)
        roll = self.rollup_before_ns
        if run_min is not None and roll is not None and run_min < roll:
            found.append(
                "INSERT INTO rollup_dirty SELECT DISTINCT time_bucket(INTERVAL 1 HOUR, "
                f"make_timestamp(start_ns // 1000)) FROM _lw_runs_batch WHERE start_ns < {roll:d}"
            )
        for table, lo in (("runs", run_min), ("spans", _min_start(spans))):
            before = self.archive_before_ns.get(table)
            if lo is not None and before is not None and lo < before:
                found.append(
                    f"INSERT INTO archive_late {_MARKS[table]} WHERE start_ns < {before:d}"
                )
        return found


def _min_start(table: pa.Table | None) -> int | None:
    if table is None or not table.num_rows:
        return None
    import pyarrow.compute as pc  # on first use: readers of a store (report) never need it

    value = pc.min(table.column("start_ns")).as_py()
    return None if value is None else int(value)
