-- spend_trend: spend per run (cost_usd, runs that recorded a cost) per task type and time bucket, with the runs behind each point: the chart beside the spend alert.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param bucket_s BIGINT = 3600 min 1    bucket width in seconds
SELECT
    task_type,
    to_timestamp((epoch(started_at) // $bucket_s::BIGINT) * $bucket_s::BIGINT)::TIMESTAMP AS bucket,
    count(*) AS runs,
    avg(cost_usd) AS cost_per_run,
    sum(cost_usd) AS spend
FROM runs
WHERE cost_usd IS NOT NULL
  AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY ALL
ORDER BY task_type, bucket;
