-- top_error_fingerprints: the tool errors seen most: per (task_type, tool, error code, error fingerprint), the errors, the runs that hit it, the most times one run hit it and when it was last seen.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param top_n BIGINT = 20 min 1 max 10000 how many fingerprints to return
WITH per_run AS (
    SELECT task_type, tool_name, error_code, error_fingerprint, run_id,
        count(*) AS n, max(start_ns) AS last_ns
    FROM spans
    WHERE operation = 'execute_tool'
      AND error_fingerprint IS NOT NULL
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
    GROUP BY ALL
)
SELECT
    task_type,
    tool_name,
    error_code,
    error_fingerprint,
    sum(n)::BIGINT AS errors,
    count(*) AS runs,
    max(n) AS max_in_one_run,
    make_timestamp_ns(max(last_ns))::TIMESTAMP AS last_seen
FROM per_run
GROUP BY ALL
ORDER BY errors DESC, task_type, error_fingerprint
LIMIT $top_n::BIGINT;
