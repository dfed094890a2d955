-- spend_rate: each run's spend rate as the guard's spend-rate stop sees it (docs/queries.md, "Spend rate"): cost and tokens a minute, the highest of the run's average over its wall time and, from its model-call spans, the spend so far over the time so far at the end of each call, every time counted as at least a minute (as the guard does). That peak over the calls is kept in runs when the run is written (rate_cost_per_min, rate_tokens_per_min); only runs without it (rows written around the store's writer) have their spans read here. Live runs that recorded their wall time, the newest max_runs per task type among successful runs and among the others. A rate of 0 counts as not recorded (NULL).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param max_runs BIGINT = 10000 min 1    at most this many runs per task type and side (successful or not), the newest
WITH w AS NOT MATERIALIZED (
    SELECT run_id, task_type, start_ns, cost_usd, tokens, wall_s, SUCCESSFUL_RUN AS ok,
        outcome = 'limit' AND limit_name = 'spend_rate' AS rate_stopped,
        rate_cost_per_min, rate_tokens_per_min
    FROM runs
    WHERE source <> 'import' AND wall_s IS NOT NULL
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
-- the newest max_runs per task type and side: a top-N aggregate finds where they start
-- (from_ns) and how many of the runs that started at that instant are among them (at_from); every
-- run after it is kept, and only the runs at the boundary are numbered (cheaper than numbering
-- every run of the window, or the kept ones: DuckDB turns that into a top-N of whole rows)
keep AS (
    SELECT task_type, ok, min(x) AS from_ns, $max_runs::BIGINT - count(*) FILTER (x > m) AS at_from
    FROM (
        SELECT task_type, ok, x, min(x) OVER (PARTITION BY task_type, ok) AS m FROM (
            SELECT task_type, ok, unnest(max(start_ns, $max_runs::BIGINT)) AS x
            FROM w GROUP BY task_type, ok
        )
    ) GROUP BY task_type, ok
),
r AS (
    SELECT w.* FROM w JOIN keep ON keep.task_type = w.task_type AND keep.ok IS NOT DISTINCT FROM w.ok
    WHERE w.start_ns > keep.from_ns
    UNION ALL
    SELECT w.* FROM w JOIN keep ON keep.task_type = w.task_type AND keep.ok IS NOT DISTINCT FROM w.ok
    WHERE w.start_ns = keep.from_ns
    QUALIFY row_number() OVER (PARTITION BY w.task_type, w.ok) <= any_value(keep.at_from) OVER (PARTITION BY w.task_type, w.ok)
),
-- runs whose peak is not stored: read from their spans by the store writer's own SQL (below,
-- queries/store/spend_peaks.py); none in a store written by loopwatch, so no span is read
todo AS MATERIALIZED (
    SELECT run_id, start_ns FROM r WHERE rate_cost_per_min IS NULL OR rate_tokens_per_min IS NULL
),
peaks AS (TODO_PEAKS)
SELECT r.run_id, r.task_type, r.ok, r.rate_stopped,
    nullif(greatest(r.cost_usd / (greatest(r.wall_s, 60) / 60),
        coalesce(r.rate_cost_per_min, p.cost_peak)), 0)::DOUBLE AS cost_per_min,
    nullif(greatest(r.tokens / (greatest(r.wall_s, 60) / 60),
        coalesce(r.rate_tokens_per_min, p.token_peak)), 0)::DOUBLE AS tokens_per_min
FROM r LEFT JOIN peaks p USING (run_id)
ORDER BY r.task_type, r.start_ns;
