-- tool_result_errors: per task type, the tool results (execute_tool spans) in the window and how many of them were classified as errors (tool status error): whether the error rules matched anything at all. In the order of tool_error_rates' first row of each task type (its tool with the highest error rate first). replayed: only the tool results of replayed runs (imported, or rebuilt from foreign spans), the runs the detector tables judge.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param replayed BOOLEAN = NULL         true: only replayed runs' tool results; NULL = all
WITH tools AS (
    SELECT task_type, tool_name,
        count(*) AS calls,
        count(*) FILTER (WHERE tool_status = 'error') AS errors
    FROM spans
    WHERE operation = 'execute_tool'
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
      AND ($replayed::BOOLEAN IS NOT TRUE
           OR run_id IN (SELECT run_id FROM runs WHERE source IN ('import', 'foreign')))
    GROUP BY ALL
)
SELECT task_type, sum(calls)::BIGINT AS calls, sum(errors)::BIGINT AS errors
FROM tools
GROUP BY task_type
ORDER BY max(struct_pack(rate := errors / calls, errors := errors)) DESC, task_type;
