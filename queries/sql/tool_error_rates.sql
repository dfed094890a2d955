-- tool_error_rates: tools by error rate, per task type: calls, errors, error rate, retries and the most common error code.
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
    mode(error_code) AS top_error_code,
    avg((end_ns - start_ns) / 1e6) AS mean_ms
FROM spans
WHERE operation = 'execute_tool'
  AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
  AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY ALL
HAVING count(*) >= $min_calls::BIGINT
ORDER BY error_rate DESC, errors DESC, task_type, tool_name;
