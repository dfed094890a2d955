-- usage_distribution: what runs used (steps, model calls, tool calls, tokens, cost, wall time), per task type and outcome: successful runs against each kind of stop. One row per (task_type, outcome, budget); quantiles are linear-interpolated (quantile_cont).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH w AS (
    SELECT task_type, outcome, steps, model_calls, tool_calls, tokens, cost_usd, wall_s
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
agg AS (
    SELECT
        task_type, outcome,
        count(steps) AS steps_n, avg(steps) AS steps_mean,
        quantile_cont(steps, [0.5, 0.9, 0.95, 0.99]) AS steps_q, max(steps) AS steps_max,
        count(model_calls) AS model_calls_n, avg(model_calls) AS model_calls_mean,
        quantile_cont(model_calls, [0.5, 0.9, 0.95, 0.99]) AS model_calls_q, max(model_calls) AS model_calls_max,
        count(tool_calls) AS tool_calls_n, avg(tool_calls) AS tool_calls_mean,
        quantile_cont(tool_calls, [0.5, 0.9, 0.95, 0.99]) AS tool_calls_q, max(tool_calls) AS tool_calls_max,
        count(tokens) AS tokens_n, avg(tokens) AS tokens_mean,
        quantile_cont(tokens, [0.5, 0.9, 0.95, 0.99]) AS tokens_q, max(tokens) AS tokens_max,
        count(cost_usd) AS cost_usd_n, avg(cost_usd) AS cost_usd_mean,
        quantile_cont(cost_usd, [0.5, 0.9, 0.95, 0.99]) AS cost_usd_q, max(cost_usd) AS cost_usd_max,
        count(wall_s) AS wall_s_n, avg(wall_s) AS wall_s_mean,
        quantile_cont(wall_s, [0.5, 0.9, 0.95, 0.99]) AS wall_s_q, max(wall_s) AS wall_s_max
    FROM w
    GROUP BY ALL
),
long AS (
    FROM agg UNPIVOT INCLUDE NULLS (
        (runs, mean, q, max) FOR budget IN (
            (steps_n, steps_mean, steps_q, steps_max) AS steps,
            (model_calls_n, model_calls_mean, model_calls_q, model_calls_max) AS model_calls,
            (tool_calls_n, tool_calls_mean, tool_calls_q, tool_calls_max) AS tool_calls,
            (tokens_n, tokens_mean, tokens_q, tokens_max) AS tokens,
            (cost_usd_n, cost_usd_mean, cost_usd_q, cost_usd_max) AS cost_usd,
            (wall_s_n, wall_s_mean, wall_s_q, wall_s_max) AS wall_s
        )
    )
)
SELECT
    task_type, outcome, budget, runs, mean,
    q[1] AS p50, q[2] AS p90, q[3] AS p95, q[4] AS p99, max
FROM long
WHERE runs > 0
ORDER BY task_type, budget, outcome;
