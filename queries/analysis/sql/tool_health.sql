-- tool_health: tools by error rate and retries, per task type: calls, failed calls, error rate, retries (extra attempts after transient failures), calls that needed a retry, and the most common error code.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param min_calls BIGINT = 1 min 1      leave out tools called fewer times than this
SELECT
    task_type,
    tool_name,
    count(*) AS calls,
    count(*) FILTER (WHERE tool_status = 'error') AS errors,
    count(*) FILTER (WHERE tool_status = 'error') / count(*) AS error_rate,
    coalesce(sum(tool_retries), 0)::BIGINT AS retries,
    count(*) FILTER (WHERE tool_retries > 0) AS retried_calls,
    mode(error_code) FILTER (WHERE tool_status = 'error') AS top_error_code
FROM spans
WHERE operation = 'execute_tool'
  AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
  AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY task_type, tool_name
HAVING count(*) >= $min_calls::BIGINT
ORDER BY error_rate DESC, retries DESC, calls DESC, task_type, tool_name;
