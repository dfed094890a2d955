-- repeated_error_trend: the repeated_error share of runs per task type and time bucket (the series behind the repeated_error alert).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param bucket_s BIGINT = 900 min 1     bucket width in seconds
SELECT
    time_bucket(to_seconds($bucket_s::BIGINT), started_at) AS bucket,
    task_type,
    count(*) AS runs,
    count(*) FILTER (WHERE stop_reason = 'repeated_error') AS repeated_error_runs,
    count(*) FILTER (WHERE stop_reason = 'repeated_error') / count(*) AS ratio
FROM runs
WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY ALL
ORDER BY bucket, task_type;
