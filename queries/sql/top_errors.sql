-- top_errors: the tool errors seen most, with what the error said: per (task_type, tool, error code, error fingerprint), the errors, the runs that hit it, the most times one run hit it, the runs it stopped (their stop reason names it), the last status message recorded and when it was last seen. (Messages are the span status; raw tool results are recorded only when content capture is on.)
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param top_n BIGINT = 20 min 1 max 10000 how many fingerprints to return
WITH per_run AS (
    SELECT task_type, tool_name, error_code, error_fingerprint, run_id,
        count(*) AS n, max(start_ns) AS last_ns, arg_max(status_message, start_ns) AS message
    FROM spans
    WHERE operation = 'execute_tool'
      AND error_fingerprint IS NOT NULL
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
    GROUP BY ALL
),
g AS (
    SELECT task_type, tool_name, error_code, error_fingerprint,
        sum(n)::BIGINT AS errors,
        count(*) AS runs,
        max(n) AS max_in_one_run,
        max(last_ns) AS last_ns,
        arg_max(message, last_ns) AS message,
        list(run_id) AS run_ids
    FROM per_run
    GROUP BY ALL
    ORDER BY errors DESC, task_type, error_fingerprint
    LIMIT $top_n::BIGINT
)
SELECT
    g.task_type, g.tool_name, g.error_code, g.error_fingerprint, g.errors, g.runs, g.max_in_one_run,
    (SELECT count(*) FROM runs r
     WHERE list_contains(g.run_ids, r.run_id)
       AND r.stop_reason IN ('repeated_error', 'tool_failures', 'circuit_open')) AS runs_stopped,
    g.message,
    make_timestamp_ns(g.last_ns)::TIMESTAMP AS last_seen
FROM g
ORDER BY g.errors DESC, g.task_type, g.error_fingerprint;
