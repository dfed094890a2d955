-- usage_values: how many runs of one task type used exactly each value of a count budget (steps, model calls, tool calls), per outcome: the distribution behind a limit's chart without binning (a limit of 8 steps sits between 8 and 9, not inside a bin).
-- @param task_type VARCHAR               the task type
-- @param budget BUDGET                   steps, model_calls or tool_calls (others are rounded to whole units)
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
WITH w AS (
    SELECT outcome,
        round(CASE $budget::VARCHAR
            WHEN 'steps' THEN steps WHEN 'model_calls' THEN model_calls
            WHEN 'tool_calls' THEN tool_calls WHEN 'tokens' THEN tokens
            WHEN 'cost_usd' THEN cost_usd WHEN 'wall_s' THEN wall_s END) AS v
    FROM runs
    WHERE task_type = $task_type::VARCHAR
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
)
SELECT outcome, v AS value, count(*) AS runs
FROM w
WHERE v IS NOT NULL
GROUP BY ALL
ORDER BY outcome, value;
