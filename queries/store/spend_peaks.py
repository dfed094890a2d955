"""Each run's peak spend rate, kept in ``runs`` when the run is written (docs/queries.md, "Spend
rate"; docs/store.md, ``runs``).

The spend-rate stop's recommendation needs, per run, the highest spend a minute the guard could
have seen: at the end of each model call, the spend so far over the time so far (at least a
minute). That is a running sum over the run's model-call spans; computed by the reader, it was a
pass over every model-call span of the window (at 1M runs, most of ``loopwatch report``'s time).
The store's writer computes it once, in the transaction that stores the run row
(:func:`~.write_sql.insert_batch`, :func:`~.write_sql.apply_derived`) — from the run's spans in
that batch and those stored before, which is every one of them when spans are exported as they
end (a run's span ends after its calls) — and the upgrade to schema version 5 fills it for the
runs stored before (:mod:`.migrations`).

``rate_cost_per_min`` / ``rate_tokens_per_min``: that peak; 0 when no model call of the run
recorded a cost (tokens); NULL when not measured: imported runs (the spend-rate stop does not
apply to them) and rows written into the table around the writer, for which the ``spend_rate``
query still reads the spans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LIVE_RUNS", "PEAK_COLUMNS", "fill_peaks_sql", "has_live_runs", "peaks_sql"]

PEAK_COLUMNS: Final = ("rate_cost_per_min", "rate_tokens_per_min")
"""The ``runs`` columns holding each run's peak spend rate (schema version 5)."""
LIVE_RUNS: Final = "(SELECT run_id, start_ns FROM runs WHERE source <> 'import')"
"""Every stored live run, for :func:`fill_peaks_sql` (the upgrade fills them all at once)."""


def peaks_sql(runs: str) -> str:
    """A query of ``run_id``, ``start_ns``, ``cost_peak``, ``token_peak`` (NULL: no call recorded
    it) for the runs ``runs`` names: a table or subquery with ``run_id`` and ``start_ns``. The
    same arithmetic as the ``spend_rate`` query's fallback (queries/analysis/sql/spend_rate.sql)."""
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
