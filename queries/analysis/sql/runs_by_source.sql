-- runs_by_source: runs per task type and source ('import' for runs read from recorded logs by `loopwatch import`, 'otel' for live runs, 'foreign' for runs rebuilt from other instrumentations' spans), with how many loops completed and how many tasks were labeled successful or failed.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
SELECT
    task_type,
    source,
    count(*)::BIGINT AS runs,
    count(*) FILTER (WHERE outcome = 'success')::BIGINT AS completed,
    count(*) FILTER (WHERE task_success)::BIGINT AS task_successes,
    count(*) FILTER (WHERE NOT task_success)::BIGINT AS task_failures,
    count(DISTINCT conversation_id)::BIGINT AS conversations
FROM runs
WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY task_type, source
ORDER BY task_type, source;
