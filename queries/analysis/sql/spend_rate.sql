-- spend_rate: per task type, how fast successful runs spent: cost and tokens a minute (averaged over each run's wall time, at least a minute, as the guard's spend-rate stop measures it), the highest and the p99, over successful runs that recorded the usage and their time; and how many runs of the window spent faster than the fastest successful one.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH r AS (
    SELECT task_type, SUCCESSFUL_RUN AS ok,
        cost_usd / (greatest(wall_s, 60) / 60) AS cost_rate,
        tokens / (greatest(wall_s, 60) / 60) AS token_rate
    FROM runs
    WHERE wall_s IS NOT NULL
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
s AS (
    SELECT task_type,
        count(cost_rate) FILTER (WHERE ok) AS successful_costed,
        max(cost_rate) FILTER (WHERE ok) AS max_cost_rate,
        quantile_cont(cost_rate, 0.99) FILTER (WHERE ok) AS p99_cost_rate,
        count(token_rate) FILTER (WHERE ok) AS successful_tokened,
        max(token_rate) FILTER (WHERE ok) AS max_token_rate
    FROM r GROUP BY task_type
)
SELECT s.*,
    (SELECT count(*) FROM r WHERE r.task_type = s.task_type AND NOT r.ok
        AND r.cost_rate > s.max_cost_rate) AS failed_faster
FROM s
ORDER BY task_type;
