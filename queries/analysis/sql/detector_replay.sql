-- detector_replay: the count detectors replayed on the runs' recorded evidence, per task type, detector and threshold N (2..max_threshold): repeated_tool_call stops a run whose highest count of one (call, result) pair reached N (runs.max_same_call); repeated_error one whose highest count of one error fingerprint reached N (runs.max_same_error). Shares of successful runs stopped (false stops) and of other runs stopped.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param max_threshold BIGINT = 10 min 2 max 100 the largest threshold to try
WITH w AS (
    SELECT task_type,
        SUCCESSFUL_RUN AS ok,
        max_same_call, max_same_error
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
counts AS (
    SELECT task_type, 'repeated_tool_call' AS detector, ok, max_same_call AS c, count(*) AS n
    FROM w WHERE max_same_call IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT task_type, 'repeated_error' AS detector, ok, max_same_error AS c, count(*) AS n
    FROM w WHERE max_same_error IS NOT NULL GROUP BY ALL
),
th AS (
    SELECT range AS threshold FROM range(2, $max_threshold::BIGINT + 1)
)
SELECT
    c.task_type,
    c.detector,
    th.threshold,
    sum(n) FILTER (WHERE ok)::BIGINT AS successful_runs,
    coalesce(sum(n) FILTER (WHERE ok AND c >= th.threshold), 0)::BIGINT AS false_stops,
    coalesce(sum(n) FILTER (WHERE ok AND c >= th.threshold), 0) / sum(n) FILTER (WHERE ok) AS false_stop_share,
    coalesce(sum(n) FILTER (WHERE NOT ok), 0)::BIGINT AS failed_runs,
    coalesce(sum(n) FILTER (WHERE NOT ok AND c >= th.threshold), 0)::BIGINT AS caught,
    coalesce(sum(n) FILTER (WHERE NOT ok AND c >= th.threshold), 0) / sum(n) FILTER (WHERE NOT ok) AS caught_share
FROM counts c CROSS JOIN th
GROUP BY c.task_type, c.detector, th.threshold
ORDER BY c.task_type, c.detector, th.threshold;
