-- top_call_fingerprints: the calls runs repeated without learning anything: per (task_type, tool, call fingerprint), the calls that repeated an earlier call of the same run with the same result (same call and result fingerprints, what the repeated_tool_call detector counts): repeated_calls (all calls of such pairs), repeats (those beyond the first), the runs that did it, and the most times one run made the same call with the same result. Only runs whose recorded runs.max_same_call is 2 or more (or unknown) are read: the others repeated nothing.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param top_n BIGINT = 20 min 1 max 10000 how many fingerprints to return
WITH repeating AS (
    SELECT run_id FROM runs
    WHERE (max_same_call IS NULL OR max_same_call >= 2)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
pairs AS (
    -- one pass over the tool spans; only pairs seen twice or more in a run are kept
    SELECT task_type, tool_name, tool_fingerprint, run_id, result_fingerprint, count(*) AS n
    FROM spans
    WHERE operation = 'execute_tool'
      AND tool_fingerprint IS NOT NULL
      AND run_id IN (SELECT run_id FROM repeating)
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
    GROUP BY ALL
    HAVING count(*) >= 2
)
SELECT
    task_type,
    tool_name,
    tool_fingerprint,
    sum(n)::BIGINT AS repeated_calls,
    sum(n - 1)::BIGINT AS repeats,
    count(DISTINCT run_id) AS runs,
    max(n) AS max_in_one_run
FROM pairs
GROUP BY ALL
ORDER BY repeats DESC, repeated_calls DESC, task_type, tool_fingerprint
LIMIT $top_n::BIGINT;
