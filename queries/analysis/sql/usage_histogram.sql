-- usage_histogram: how many runs used how much of one budget, per task type and outcome, in equal-width bins from 0 to the largest value seen (for distribution charts without shipping every run).
-- @param budget BUDGET                   steps, model_calls, tool_calls, tokens, cost_usd or wall_s
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param bins BIGINT = 30 min 1 max 1000 number of bins
WITH w AS (
    SELECT task_type, outcome,
        CASE $budget::VARCHAR
            WHEN 'steps' THEN steps WHEN 'model_calls' THEN model_calls
            WHEN 'tool_calls' THEN tool_calls WHEN 'tokens' THEN tokens
            WHEN 'cost_usd' THEN cost_usd WHEN 'wall_s' THEN wall_s END AS v
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
top AS (
    SELECT task_type, greatest(max(v), 1e-9) AS hi FROM w WHERE v IS NOT NULL GROUP BY task_type
)
SELECT
    w.task_type,
    w.outcome,
    least(floor(w.v / (t.hi / $bins::BIGINT)), $bins::BIGINT - 1)::BIGINT AS bin,
    bin * (t.hi / $bins::BIGINT) AS bin_lo,
    (bin + 1) * (t.hi / $bins::BIGINT) AS bin_hi,
    count(*) AS runs
FROM w JOIN top t USING (task_type)
WHERE w.v IS NOT NULL
GROUP BY ALL
ORDER BY w.task_type, w.outcome, bin;
