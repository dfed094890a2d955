-- task_types: every task type in the window with its run count, first and last run (for filters and pickers).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
SELECT
    task_type,
    count(*) AS runs,
    min(started_at) AS first_run,
    max(started_at) AS last_run
FROM runs
WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
GROUP BY task_type
ORDER BY runs DESC, task_type;
