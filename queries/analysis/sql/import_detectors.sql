-- import_detectors: each detector replayed on the whole of every imported run (its peak evidence, recorded at import), per task type, detector and threshold N (2..max_threshold): a threshold N would have stopped a run iff the peak reached N. repeated_tool_call: one (call, result) N times; repeated_error: one error (tool, code, normalized message) N times; tool_failures: N failures in a row; no_progress: N steps in a row with no new call or result; repeated_action: the same (call, result) N times in a row (the guard's rule stops at 2). False stops are runs of successful tasks (task label true; unlabeled: loop completed) it would have stopped; caught, runs of failed tasks.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param max_threshold BIGINT = 10 min 2 max 100 the largest threshold to try
WITH r AS (
    SELECT task_type, SUCCESSFUL_RUN AS ok,
        peak_repeated_action AS repeated_action,
        peak_repeated_tool_call AS repeated_tool_call,
        peak_repeated_error AS repeated_error,
        peak_tool_failures AS tool_failures,
        peak_no_progress AS no_progress
    FROM runs
    WHERE source IN ('import', 'foreign')  -- replayed at import, or rebuilt from foreign spans
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
peaks AS (
    UNPIVOT r
    ON repeated_action, repeated_tool_call, repeated_error, tool_failures, no_progress
    INTO NAME detector VALUE peak
),
counts AS (
    SELECT task_type, detector, ok, peak, count(*) AS n FROM peaks GROUP BY ALL
),
th AS (
    SELECT range AS threshold FROM range(2, $max_threshold::BIGINT + 1)
)
SELECT
    c.task_type,
    c.detector,
    th.threshold,
    coalesce(sum(n) FILTER (WHERE ok), 0)::BIGINT AS successful_runs,
    coalesce(sum(n) FILTER (WHERE ok AND peak >= th.threshold), 0)::BIGINT AS false_stops,
    coalesce(sum(n) FILTER (WHERE ok AND peak >= th.threshold), 0) / sum(n) FILTER (WHERE ok) AS false_stop_share,
    coalesce(sum(n) FILTER (WHERE NOT ok), 0)::BIGINT AS failed_runs,
    coalesce(sum(n) FILTER (WHERE NOT ok AND peak >= th.threshold), 0)::BIGINT AS caught,
    coalesce(sum(n) FILTER (WHERE NOT ok AND peak >= th.threshold), 0) / sum(n) FILTER (WHERE NOT ok) AS caught_share
FROM counts c CROSS JOIN th
GROUP BY c.task_type, c.detector, th.threshold
ORDER BY c.task_type, c.detector, th.threshold;
