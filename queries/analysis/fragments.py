"""The pieces of SQL the ``.sql`` files name instead of writing them out (docs/queries.md,
"Definitions, exactly"): the gateway puts each in place of its name when it reads a file, so a
definition several queries share, or one the store's writer shares, is written once."""

from __future__ import annotations

from typing import Final

from loopwatch.instrumentation.runtime.semconv import BUDGETS
from loopwatch.queries.store.spend_peaks import peaks_sql

__all__ = ["FRAGMENTS", "SUCCESSFUL_RUN_SQL"]

SUCCESSFUL_RUN_SQL: Final = "(coalesce(task_success, outcome = 'success'))"
"""The one meaning of a *successful run*, for every query (docs/queries.md): the run belongs to a
task labelled successful (import, feedback) whatever ended its loop; without a label, its loop
completed. The ``.sql`` files write ``SUCCESSFUL_RUN`` and the gateway puts this in its place."""

FRAGMENTS: Final = {
    "SUCCESSFUL_RUN": SUCCESSFUL_RUN_SQL,
    # the limits of a group's latest run, one column per budget
    "LATEST_LIMITS": ",\n    ".join(
        f"arg_max_null(limit_{b}, start_ns) AS limit_{b}" for b in BUDGETS
    ),
    # each peak spend rate of the runs of a CTE named todo, as the store's writer keeps it
    "TODO_PEAKS": peaks_sql("todo"),
}
"""Name in a ``.sql`` file → the SQL the gateway puts in its place: wherever the name stands,
comments included, so a file names a multi-line one only where that SQL goes."""
