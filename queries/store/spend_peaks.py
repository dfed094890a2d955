"""Each run's peak spend rate, kept in ``runs`` when the run is written (docs/queries.md, "Spend
rate"; docs/store.md, ``runs``).

The spend-rate stop's recommendation needs, per run, the highest spend a minute the guard could
have seen: at the end of each model call, the spend so far over the time so far (at least a
minute). That is a running sum over the run's model-call spans; computed by the reader, it was a
pass over every model-call span of the window (at 1M runs, most of ``loopwatch report``'s time).
The store's writer computes it once per run, from the run's stored spans (every one of them when
spans are exported as they end: a run's span ends after its calls): not in every batch's
transaction (one pass over the batch's spans would double the cost of a small batch) but for the
live runs of many batches at once (:class:`PendingPeaks`: every 2,000 runs or 5 seconds, and when
the store closes), in the transaction of the batch that reaches the mark. Runs rebuilt from other
instrumentations' spans get it in their own transaction (:func:`~.write_sql.apply_derived`), and
the upgrade to schema version 5 fills it for the runs stored before (:mod:`.migrations`). Until
then a run's columns are NULL, and the ``spend_rate`` query reads its spans instead: every reader
sees the same rate either way.

``rate_cost_per_min`` / ``rate_tokens_per_min``: that peak; 0 when no model call of the run
recorded a cost (tokens); NULL when not measured: imported runs (the spend-rate stop does not
apply to them) and rows written into the table around the writer, for which the ``spend_rate``
query still reads the spans.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "LIVE_RUNS",
    "PEAK_COLUMNS",
    "PendingPeaks",
    "fill_peaks_sql",
    "has_live_runs",
    "peaks_sql",
]

PEAK_COLUMNS: Final = ("rate_cost_per_min", "rate_tokens_per_min")
"""The ``runs`` columns holding each run's peak spend rate (schema version 5)."""
LIVE_RUNS: Final = "(SELECT run_id, start_ns FROM runs WHERE source <> 'import')"
"""Every stored live run, for :func:`fill_peaks_sql` (the upgrade fills them all at once)."""


def peaks_sql(runs: str) -> str:
    """A query of ``run_id``, ``start_ns``, ``cost_peak``, ``token_peak`` (NULL: no call recorded
    it) for the runs ``runs`` names: a table or subquery with ``run_id`` and ``start_ns``. The
    ``spend_rate`` query reads it too, for runs whose peak is not stored (``TODO_PEAKS``)."""
    return f"""
    WITH r AS MATERIALIZED (SELECT run_id, start_ns FROM {runs}),
    calls AS (
        -- spend so far at the end of each model call (a span stored twice only raises it: safe)
        SELECT s.run_id, s.end_ns,
            sum(s.cost_usd) OVER so_far AS cost,
            sum(coalesce(s.input_tokens, 0) + coalesce(s.output_tokens, 0)) OVER so_far AS tokens
        FROM spans s
        WHERE s.start_ns >= (SELECT min(start_ns) FROM r)
          AND s.run_id IN (SELECT run_id FROM r)
          AND s.operation IS DISTINCT FROM 'invoke_agent'
          AND (s.cost_usd IS NOT NULL OR s.input_tokens IS NOT NULL OR s.output_tokens IS NOT NULL)
        WINDOW so_far AS (PARTITION BY s.run_id ORDER BY s.end_ns ROWS UNBOUNDED PRECEDING)
    )
    SELECT r.run_id, r.start_ns,
        max(c.cost / (greatest((c.end_ns - r.start_ns) / 1e9, 60) / 60)) AS cost_peak,
        max(c.tokens / (greatest((c.end_ns - r.start_ns) / 1e9, 60) / 60)) AS token_peak
    FROM r LEFT JOIN calls c USING (run_id)
    GROUP BY r.run_id, r.start_ns"""


def fill_peaks_sql(runs: str, window: str | None = None) -> str:
    """The ``UPDATE`` setting :data:`PEAK_COLUMNS` of the stored runs ``runs`` names (as
    :func:`peaks_sql`; imported runs are left NULL). ``window``: ``(lo) AND (hi)`` bounding the
    runs' ``start_ns``, so that DuckDB skips the row groups of other times."""
    bound = f"runs.start_ns BETWEEN {window} AND " if window else ""
    return (
        "UPDATE runs SET rate_cost_per_min = coalesce(p.cost_peak, 0), "
        "rate_tokens_per_min = coalesce(p.token_peak, 0) "
        f"FROM ({peaks_sql(runs)}) p "
        f"WHERE {bound}runs.run_id = p.run_id AND runs.start_ns = p.start_ns "
        "AND runs.source <> 'import'"
    )


def has_live_runs(runs: pa.Table | None) -> bool:
    """``runs`` (a batch's ``runs`` rows) holds a run not imported: one whose peak to compute.
    An import's batches skip the span pass."""
    if runs is None or not runs.num_rows:
        return False
    return any(s != "import" for s in runs.column("source").unique().to_pylist())


@dataclass(slots=True)
class PendingPeaks:
    """The live runs a :class:`~.database.Store` wrote whose peaks are not filled yet, as the span
    of their start times; the fill is due every ``every_runs`` runs or ``every_s`` seconds."""

    every_runs: int = 2000
    every_s: float = 5.0
    lo: int | None = None
    hi: int | None = None
    runs: int = 0
    since: float = field(default_factory=time.monotonic)

    def statements(self, runs: pa.Table | None) -> list[str]:
        """Note a batch's ``runs`` rows; the fill's SQL when it is due (then forgotten here: a
        batch that fails leaves those runs to the readers' span pass), else nothing."""
        if has_live_runs(runs):
            assert runs is not None
            import pyarrow.compute as pc  # as the writer's late-row marks (.late) import it

            bounds = pc.min_max(runs.column("start_ns")).as_py()
            lo, hi = int(bounds["min"]), int(bounds["max"])
            self.lo = lo if self.lo is None else min(self.lo, lo)
            self.hi = hi if self.hi is None else max(self.hi, hi)
            self.runs += runs.num_rows
        due = self.runs >= self.every_runs or time.monotonic() - self.since >= self.every_s
        return [self.fill()] if self.runs and due else []

    def fill(self) -> str:
        """The SQL filling the pending runs' peaks (``""``: none pending), and forget them."""
        if self.lo is None or self.hi is None:
            return ""
        window = f"{self.lo:d} AND {self.hi:d}"
        self.lo = self.hi = None
        self.runs, self.since = 0, time.monotonic()
        pending = (
            "(SELECT run_id, start_ns FROM runs WHERE start_ns BETWEEN "
            f"{window} AND source <> 'import' AND rate_cost_per_min IS NULL)"
        )
        # the optimizer prunes other times' row groups (the writer's connection runs without it)
        return (
            f"PRAGMA enable_optimizer; {fill_peaks_sql(pending, window)}; PRAGMA disable_optimizer"
        )
