-- top_errors: the tool errors seen most, with what the error said: per (task_type, tool, error code, error fingerprint), the errors, the runs that hit it, the most times one run hit it, the runs it stopped (their stop reason names it), the last status message recorded and when it was last seen. (Messages are the span status; raw tool results are recorded only when content capture is on.)
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param top_n BIGINT = 20 min 1 max 10000 how many fingerprints to return
WITH per_run AS (
    SELECT task_type, tool_name, error_code, error_fingerprint, run_id,
        count(*) AS n, max(start_ns) AS last_ns, any_value(status_message) AS message
    FROM spans
    WHERE operation = 'execute_tool'
      AND error_fingerprint IS NOT NULL
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
    GROUP BY ALL
),
stopped AS (
    -- runs an error can stop; a run's spans start at or after the run, so the window holds
    SELECT run_id FROM runs
    WHERE stop_reason IN ('repeated_error', 'tool_failures', 'circuit_open')
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP - INTERVAL 1 DAY)
)
SELECT
    p.task_type, p.tool_name, p.error_code, p.error_fingerprint,
    sum(p.n)::BIGINT AS errors,
    count(*) AS runs,
    max(p.n) AS max_in_one_run,
    count(s.run_id) AS runs_stopped,
    arg_max(p.message, p.last_ns) AS message,
    make_timestamp_ns(max(p.last_ns))::TIMESTAMP AS last_seen
FROM per_run p LEFT JOIN stopped s ON s.run_id = p.run_id
GROUP BY ALL
ORDER BY errors DESC, p.task_type, p.error_fingerprint
LIMIT $top_n::BIGINT;
