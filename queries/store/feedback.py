"""Task-success labels that arrive after the run (docs/store.md, "Task-success feedback").

An evaluator or a user's thumbs-up labels a run minutes or days after it ended. The label is kept
in ``run_feedback`` (one row per run id: the latest label wins, the same label again changes
nothing) and copied onto ``runs.task_success``, the column every query's one definition of a
successful run reads (``gateway.SUCCESSFUL_RUN_SQL``). A label for a run id the store does not
hold yet is kept and joined when the run arrives: the store copies labels onto each batch of runs
it commits, in the same transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import duckdb

from .database import Store

__all__ = ["MAX_COMMENT_CHARS", "FeedbackStored", "record_feedback"]

MAX_COMMENT_CHARS: Final = 4000
"""Longest comment kept (a longer one is refused, not cut)."""


@dataclass(frozen=True, slots=True)
class FeedbackStored:
    """What :func:`record_feedback` did."""

    run_id: str
    run_known: bool
    """Whether the store holds the run yet (if not, the label waits for it)."""
    changed: bool
    """False when the same label was already stored (a retry)."""


def _check(run_id: str, success: object, score: object, comment: object) -> None:
    if not isinstance(run_id, str) or not run_id.strip() or len(run_id) > 200:
        raise ValueError("run_id must be a non-empty string of at most 200 characters")
    if not isinstance(success, bool):
        raise ValueError(f"success must be true or false, got {success!r}")
    if score is not None and (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        or not math.isfinite(float(score))
    ):
        raise ValueError(f"score must be a finite number or null, got {score!r}")
    if comment is not None and (not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS):
        raise ValueError(f"comment must be a string of at most {MAX_COMMENT_CHARS} characters")


def record_feedback(
    store: Store,
    run_id: str,
    success: bool,
    *,
    score: float | None = None,
    comment: str | None = None,
    source: str | None = None,
) -> FeedbackStored:
    """Store one run's task-success label and copy it onto the run if the store holds it.

    Idempotent: the same label again changes nothing; a different one replaces it. Raises
    ``ValueError`` for a bad value (nothing stored)."""
    _check(run_id, success, score, comment)
    # Set before the label is committed: a batch of runs written after this commits copies it.
    store.has_feedback = True
    value = None if score is None else float(score)
    late = store.late  # its instants change only inside run_write, where work() reads them

    def work(con: duckdb.DuckDBPyConnection) -> FeedbackStored:
        old = con.execute(
            "SELECT success, score, comment, source FROM run_feedback WHERE run_id = ?", [run_id]
        ).fetchone()
        changed = old != (success, value, comment, source)
        if changed:
            con.execute(
                "INSERT OR REPLACE INTO run_feedback "
                "(run_id, success, score, comment, source, received_at) VALUES (?, ?, ?, ?, ?, ?)",
                [run_id, success, value, comment, source, datetime.now(UTC).replace(tzinfo=None)],
            )
        con.execute(
            "UPDATE runs SET task_success = ? WHERE run_id = ? AND task_success IS DISTINCT FROM ?",
            [success, run_id, success],
        )
        rolled = None if late is None else late.rollup_before_ns
        if changed and rolled is not None:
            # A label for a run in a rolled-up hour changes that hour's successes: roll it again.
            con.execute(
                "INSERT INTO rollup_dirty SELECT time_bucket(INTERVAL 1 HOUR, "
                "make_timestamp(start_ns // 1000)) FROM runs WHERE run_id = ? AND start_ns < ?",
                [run_id, rolled],
            )
        row = con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()
        return FeedbackStored(run_id, bool(row and row[0]), changed)

    return store.run_write(work)
