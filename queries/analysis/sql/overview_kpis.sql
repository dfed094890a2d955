-- overview_kpis: the headline numbers per task type and for all of them (task_type NULL): runs, runs whose loop completed (outcome success), runs with a task label and the successful ones among them, runs stopped by a limit, runs stopped as stuck, and spend (cost, tokens) in total and on runs that did not succeed (loop did not complete, or the task label says it failed).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH w AS (
    SELECT task_type, outcome, task_success,
        NOT (SUCCESSFUL_RUN) AS failed,
        coalesce(cost_usd, 0) AS cost_usd, coalesce(tokens, 0) AS tokens
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
)
SELECT
    task_type,
    count(*) AS runs,
    count(*) FILTER (WHERE outcome = 'success') AS completed,
    count(task_success) AS labelled,
    count(*) FILTER (WHERE task_success) AS task_successes,
    count(*) FILTER (WHERE outcome = 'limit') AS limit_hits,
    count(*) FILTER (WHERE outcome = 'stuck') AS stuck,
    sum(cost_usd) AS cost_usd,
    coalesce(sum(cost_usd) FILTER (WHERE failed), 0) AS failed_cost_usd,
    sum(tokens) AS tokens,
    coalesce(sum(tokens) FILTER (WHERE failed), 0) AS failed_tokens
FROM w
GROUP BY GROUPING SETS ((task_type), ())
HAVING count(*) > 0
ORDER BY task_type NULLS FIRST;
