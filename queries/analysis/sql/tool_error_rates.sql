-- tool_error_rates: tools by error rate, per task type: calls, errors, error rate and the most common error code.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param min_calls BIGINT = 1 min 1      leave out tools called fewer times than this
WITH w AS (
    SELECT task_type, tool_name, tool_status, error_code
    FROM spans
    WHERE operation = 'execute_tool'
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
rates AS (
    SELECT task_type, tool_name,
        count(*) AS calls,
        count(*) FILTER (WHERE tool_status = 'error') AS errors
    FROM w GROUP BY ALL
),
codes AS (
    -- error spans only: a few of the calls
    SELECT task_type, tool_name, mode(error_code) AS top_error_code
    FROM w WHERE tool_status = 'error' GROUP BY ALL
)
SELECT
    r.task_type,
    r.tool_name,
    r.calls,
    r.errors,
    r.errors / r.calls AS error_rate,
    c.top_error_code
FROM rates r
LEFT JOIN codes c ON c.task_type IS NOT DISTINCT FROM r.task_type AND c.tool_name IS NOT DISTINCT FROM r.tool_name
WHERE r.calls >= $min_calls::BIGINT
ORDER BY error_rate DESC, errors DESC, r.task_type, r.tool_name;
