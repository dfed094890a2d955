-- repeated_error_causes: which tool, error code and error (fingerprint of tool, code and normalized message) are behind the runs stopped with repeated_error, per task type: the last failing tool call of each such run, grouped; with the latest stop explanation, which names the tool, the code and the message.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param top BIGINT = 3 min 1 max 100    causes kept per task type
WITH r AS (
    SELECT run_id, task_type, start_ns, explanation
    FROM runs
    WHERE stop_reason = 'repeated_error'
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
last_error AS (
    SELECT run_id,
        arg_max(tool_name, start_ns) AS tool,
        arg_max(error_code, start_ns) AS error_code,
        arg_max(error_fingerprint, start_ns) AS error_fingerprint
    FROM spans
    WHERE operation = 'execute_tool' AND tool_status = 'error'
      AND run_id IN (SELECT run_id FROM r)
    GROUP BY run_id
),
g AS (
    SELECT r.task_type,
        coalesce(e.tool, '-') AS tool,
        coalesce(e.error_code, '-') AS error_code,
        coalesce(e.error_fingerprint, '') AS error_fingerprint,
        count(*)::BIGINT AS runs,
        arg_max(r.explanation, r.start_ns) AS example
    FROM r LEFT JOIN last_error e USING (run_id)
    GROUP BY ALL
),
ranked AS (
    SELECT *,
        runs / sum(runs) OVER (PARTITION BY task_type) AS share,
        row_number() OVER (PARTITION BY task_type ORDER BY runs DESC, tool, error_code) AS k
    FROM g
)
SELECT task_type, tool, error_code, error_fingerprint, runs, share, example
FROM ranked
WHERE k <= $top::BIGINT
ORDER BY task_type, runs DESC, tool, error_code;
