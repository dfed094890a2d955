-- top_call_fingerprints: the tool calls runs repeated most: per (task_type, tool, call fingerprint), the calls, the runs that made it, the repeats (calls beyond the first in each run), the runs that repeated it, the most times one run made it, and how many of the repeats returned a result already seen in that run (no new information).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param top_n BIGINT = 20 min 1 max 10000 how many fingerprints to return
WITH per_run AS (
    SELECT task_type, tool_name, tool_fingerprint, run_id,
        count(*) AS n,
        count(DISTINCT result_fingerprint) AS results
    FROM spans
    WHERE operation = 'execute_tool'
      AND tool_fingerprint IS NOT NULL
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR start_ns < epoch_ns($until::TIMESTAMP))
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
    GROUP BY ALL
)
SELECT
    task_type,
    tool_name,
    tool_fingerprint,
    sum(n)::BIGINT AS calls,
    count(*) AS runs,
    sum(n - 1)::BIGINT AS repeats,
    count(*) FILTER (WHERE n >= 2) AS runs_repeating,
    max(n) AS max_in_one_run,
    sum(n - greatest(results, 1))::BIGINT AS same_result_repeats
FROM per_run
GROUP BY ALL
HAVING sum(n - 1) > 0
ORDER BY repeats DESC, calls DESC, task_type, tool_fingerprint
LIMIT $top_n::BIGINT;
