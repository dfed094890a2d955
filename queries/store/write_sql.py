"""The SQL of a store write (docs/store.md), run by :class:`~.database.Store` under its lock.

:func:`insert_batch` stores one :class:`~.columns.SpanBatch`'s tables in one transaction,
joining task-success feedback that arrived before its runs; :func:`apply_derived` sets the
derived columns of foreign spans and replaces their traces' runs (docs/foreign.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Final

import duckdb
import pyarrow as pa

from .spend_peaks import fill_peaks_sql

__all__ = [
    "DERIVED_WINDOW",
    "DROP_REPLACED",
    "INSERT_DELIVERIES",
    "INSERT_RUNS",
    "INSERT_SPANS",
    "JOIN_FEEDBACK",
    "REPLACE_RUNS",
    "UPSERT_RUNS",
    "apply_derived",
    "insert_batch",
]

# BY NAME rather than two column lists: DuckDB binds it ~0.2 ms faster per statement. The
# Arrow tables hold exactly SPAN_COLUMNS / RUN_COLUMNS.
INSERT_SPANS: Final = "INSERT INTO spans BY NAME SELECT * FROM _lw_spans_batch"
INSERT_RUNS: Final = (
    "INSERT INTO runs BY NAME "
    "SELECT *, make_timestamp(start_ns // 1000) AS started_at FROM _lw_runs_batch"
)
# A run stored again (a retried export) replaces its row: delete the rows of the batch's run ids
# that started within the batch's start times. The time window lets DuckDB skip every row group
# of other times by its min/max, so the cost stays ~2 ms per batch at millions of stored runs
# instead of a scan of them all; that pruning is the optimizer's work, which the writer's
# connection otherwise goes without (see Store.__init__), so it is on for this statement only.
REPLACE_RUNS: Final = (
    "PRAGMA enable_optimizer; "
    "DELETE FROM runs WHERE start_ns BETWEEN (SELECT min(start_ns) FROM _lw_runs_batch) "
    "AND (SELECT max(start_ns) FROM _lw_runs_batch) "
    "AND run_id IN (SELECT run_id FROM _lw_runs_batch); "
    "PRAGMA disable_optimizer"
)
# The start times of a derived batch (Store.write_derived): other times' row groups are skipped.
DERIVED_WINDOW: Final = (
    "(SELECT min(start_ns) FROM _lw_derived) AND (SELECT max(start_ns) FROM _lw_derived)"
)
# An import again: the runs it imported before go, with their spans (Store.write's replacing).
DROP_REPLACED: Final = (
    "PRAGMA enable_optimizer; "
    "DELETE FROM spans WHERE run_id IN (SELECT run_id FROM _lw_replaced); "
    "DELETE FROM runs WHERE run_id IN (SELECT run_id FROM _lw_replaced); "
    "PRAGMA disable_optimizer"
)
# Files made before runs lost its primary key refuse a run id stored with another start time:
# for them, the upsert (which the key makes possible) replaces it.
UPSERT_RUNS: Final = INSERT_RUNS.replace("INSERT INTO", "INSERT OR REPLACE INTO", 1)
INSERT_DELIVERIES: Final = "INSERT INTO deliveries BY NAME SELECT * FROM _lw_deliveries_batch"
# Task-success labels that arrived before their run (or a run stored again, whose row the span's
# empty label replaced): copied onto the batch's runs in the same transaction (docs/store.md,
# "Task-success feedback"). Only once the store holds a label: until then it costs nothing.
JOIN_FEEDBACK: Final = (
    "PRAGMA enable_optimizer; "
    "UPDATE runs SET task_success = f.success FROM run_feedback f "
    "WHERE runs.start_ns BETWEEN (SELECT min(start_ns) FROM _lw_runs_batch) "
    "AND (SELECT max(start_ns) FROM _lw_runs_batch) "
    "AND runs.run_id IN (SELECT run_id FROM _lw_runs_batch) AND f.run_id = runs.run_id "
    "AND runs.task_success IS DISTINCT FROM f.success; "
    "PRAGMA disable_optimizer"
)

# Runs rebuilt from foreign spans get their peak spend rate in their own transaction (runs that
# Store.write stores get it in a later batch's: spend_peaks.PendingPeaks). The batch's time
# window lets DuckDB skip other times' row groups.
_BATCH_WINDOW: Final = (
    "(SELECT min(start_ns) FROM _lw_runs_batch) AND (SELECT max(start_ns) FROM _lw_runs_batch)"
)


def insert_batch(
    con: duckdb.DuckDBPyConnection,
    spans: pa.Table | None,
    runs: pa.Table | None,
    deliveries: pa.Table | None,
    *,
    replace: bool,
    replaced: pa.Table | None = None,
    upsert: bool = False,
    feedback: bool = False,
    end: str = "COMMIT",
    extra: Sequence[str] = (),
) -> None:
    """Insert one batch in one transaction ended by ``end`` (rolled back on any error).

    ``replace``: first delete the stored rows of the batch's runs; ``replaced``: a table of
    run ids whose runs and spans are deleted first; ``upsert``: insert runs
    with ``INSERT OR REPLACE`` (only for files whose ``runs`` has a primary key); ``extra``:
    statements run last in the same transaction (the late rows' marks, see :mod:`.late`).
    """
    # DuckDB finds these tables by name among this function's local variables (its
    # replacement scan): ~1 ms less per table than con.register/unregister, which change
    # the catalog each time.
    _lw_spans_batch = spans
    _lw_runs_batch = runs
    _lw_deliveries_batch = deliveries
    _lw_replaced = replaced
    # One call for the whole transaction: each call into DuckDB has a fixed cost, and
    # gives the GIL up and takes it back (up to 5 ms when the agent's thread is busy).
    statements = ["BEGIN TRANSACTION"]
    if replaced is not None:
        statements.append(DROP_REPLACED)
    if spans is not None:
        statements.append(INSERT_SPANS)
    if runs is not None:
        if replace:
            statements.append(REPLACE_RUNS)
        statements.append(UPSERT_RUNS if upsert else INSERT_RUNS)
        if feedback:
            statements.append(JOIN_FEEDBACK)
    if deliveries is not None:
        statements.append(INSERT_DELIVERIES)
    statements.extend(extra)
    statements.append(end)
    try:
        con.execute("; ".join(statements))
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # DuckDB may have ended it already
            con.rollback()
        if replace or replaced is not None or feedback or extra:
            with contextlib.suppress(duckdb.Error):  # stopped between the two pragmas
                con.execute("PRAGMA disable_optimizer")
        raise


def apply_derived(con: duckdb.DuckDBPyConnection, derived: pa.Table, runs: pa.Table | None) -> None:
    """Run :meth:`Store.write_derived`'s transaction on the writer's connection ``con``
    (rolled back, its :class:`duckdb.Error` passing through, on failure)."""
    # DuckDB finds these tables by name among this function's local variables.
    _lw_derived = derived
    _lw_runs_batch = runs
    # A column NULL in every row would be set to itself: DuckDB's update costs per column set.
    sets = ", ".join(
        f"{c} = coalesce(d.{c}, spans.{c})"
        for c in derived.column_names
        if c not in ("trace_id", "span_id", "start_ns")
        and derived.column(c).null_count < derived.num_rows
    )
    statements = [
        "BEGIN TRANSACTION",
        "PRAGMA enable_optimizer",
        # The time window lets DuckDB skip row groups of other times (as REPLACE_RUNS).
        f"UPDATE spans SET {sets} FROM _lw_derived d WHERE spans.start_ns BETWEEN "
        f"{DERIVED_WINDOW} AND spans.start_ns = d.start_ns AND spans.span_id = d.span_id "
        "AND spans.trace_id = d.trace_id",
        f"DELETE FROM runs WHERE start_ns BETWEEN {DERIVED_WINDOW} "
        "AND trace_id IN (SELECT DISTINCT trace_id FROM _lw_derived) "
        # a loopwatch run in the same trace keeps its row: only foreign ones are replaced
        "AND (source = 'foreign' OR run_id = span_id)",
    ]
    if runs is not None:
        statements += [
            INSERT_RUNS,
            fill_peaks_sql(
                "(SELECT run_id, start_ns FROM _lw_runs_batch WHERE source <> 'import')",
                _BATCH_WINDOW,
            ),
        ]
    statements += ["PRAGMA disable_optimizer", "COMMIT"]
    try:
        con.execute("; ".join(statements))
    except duckdb.Error:
        with contextlib.suppress(duckdb.Error):
            con.rollback()
        with contextlib.suppress(duckdb.Error):
            con.execute("PRAGMA disable_optimizer")
        raise
