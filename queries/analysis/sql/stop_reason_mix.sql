-- stop_reason_mix: how runs ended, per task type: runs per (outcome, stop_reason) and their share of the task type's runs.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH w AS (
    SELECT task_type, outcome, stop_reason
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
g AS (
    SELECT task_type, outcome, stop_reason, count(*) AS runs
    FROM w
    GROUP BY ALL
)
SELECT
    task_type,
    outcome,
    stop_reason,
    runs,
    runs / sum(runs) OVER (PARTITION BY task_type) AS share
FROM g
ORDER BY task_type, runs DESC, stop_reason;
