-- limit_changes: runs before and after each limit change: per task type and loopwatch.limits.version (in order of first use), the limits, runs, success and limit-hit shares, and successful runs' p95 steps and tokens.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH w AS (
    SELECT *, SUCCESSFUL_RUN AS ok
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
)
SELECT
    task_type,
    coalesce(limits_version, '') AS limits_version,
    min(started_at) AS first_run,
    max(started_at) AS last_run,
    count(*) AS runs,
    count(*) FILTER (WHERE ok) / count(*) AS success_share,
    count(*) FILTER (WHERE outcome = 'limit') / count(*) AS limit_share,
    count(*) FILTER (WHERE outcome = 'stuck') / count(*) AS stuck_share,
    quantile_cont(steps, 0.95) FILTER (WHERE ok) AS success_p95_steps,
    quantile_cont(tokens, 0.95) FILTER (WHERE ok) AS success_p95_tokens,
    LATEST_LIMITS
FROM w
GROUP BY task_type, coalesce(limits_version, '')
ORDER BY task_type, first_run;
