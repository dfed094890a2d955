-- usage_range: the largest usage of one budget by one task type's runs in the window, and the limit its latest run ran under (the range what-if candidates span).
-- @param task_type VARCHAR               the task type
-- @param budget BUDGET                   steps, model_calls, tool_calls, tokens, cost_usd or wall_s
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
WITH w AS (
    SELECT
        start_ns,
        CASE $budget::VARCHAR
            WHEN 'steps' THEN steps WHEN 'model_calls' THEN model_calls
            WHEN 'tool_calls' THEN tool_calls WHEN 'tokens' THEN tokens
            WHEN 'cost_usd' THEN cost_usd WHEN 'wall_s' THEN wall_s END AS used,
        CASE $budget::VARCHAR
            WHEN 'steps' THEN limit_steps WHEN 'model_calls' THEN limit_model_calls
            WHEN 'tool_calls' THEN limit_tool_calls WHEN 'tokens' THEN limit_tokens
            WHEN 'cost_usd' THEN limit_cost_usd WHEN 'wall_s' THEN limit_wall_s END AS lim
    FROM runs
    WHERE task_type = $task_type::VARCHAR
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
)
SELECT count(*) AS runs, max(used) AS max_used, arg_max_null(lim, start_ns) AS current_limit
FROM w;
