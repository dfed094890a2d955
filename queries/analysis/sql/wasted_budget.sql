-- wasted_budget: what runs that did not succeed spent, per task type and stop reason, and their share of the task type's total spend (tokens, cost, steps, wall time).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH w AS (
    SELECT task_type, outcome, stop_reason,
        SUCCESSFUL_RUN AS ok,
        coalesce(tokens, 0) AS tokens, coalesce(cost_usd, 0) AS cost_usd,
        coalesce(steps, 0) AS steps, coalesce(wall_s, 0) AS wall_s
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
totals AS (
    SELECT task_type, sum(tokens) AS t_tokens, sum(cost_usd) AS t_cost, sum(steps) AS t_steps, sum(wall_s) AS t_wall
    FROM w GROUP BY task_type
),
g AS (
    SELECT task_type, outcome, stop_reason, count(*) AS runs,
        sum(tokens) AS tokens, sum(cost_usd) AS cost_usd, sum(steps) AS steps, sum(wall_s) AS wall_s
    FROM w WHERE NOT ok
    GROUP BY ALL
)
SELECT
    g.task_type, g.outcome, g.stop_reason, g.runs,
    g.tokens, g.cost_usd, g.steps, g.wall_s,
    CASE WHEN t.t_tokens > 0 THEN g.tokens / t.t_tokens END AS tokens_share,
    CASE WHEN t.t_cost > 0 THEN g.cost_usd / t.t_cost END AS cost_share,
    CASE WHEN t.t_steps > 0 THEN g.steps / t.t_steps END AS steps_share,
    CASE WHEN t.t_wall > 0 THEN g.wall_s / t.t_wall END AS wall_share
FROM g JOIN totals t USING (task_type)
ORDER BY g.task_type, g.cost_usd DESC, g.tokens DESC, g.stop_reason;
