-- limit_change_points: where each task type's limits changed, for chart markers: per task type and loopwatch.limits.version (in order of first use), its first run and the limits of its latest run. The columns of limit_changes a marker reads, without its shares and quantiles.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
SELECT
    task_type,
    coalesce(limits_version, '') AS limits_version,
    min(started_at) AS first_run,
    LATEST_LIMITS
FROM runs
WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY task_type, coalesce(limits_version, '')
ORDER BY task_type, first_run;
