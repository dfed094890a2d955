-- detector_replay_spans: the sequence detectors replayed on the runs' tool spans, per task type, detector and threshold N (2..max_threshold): repeated_action stops a run with N identical call fingerprints in a row (the guard stops at 2; its A,B,A,B cycle rule and repeat-exempt tools are not replayed); tool_failures one with N tool errors in a row; no_progress one with N steps in a row whose tool results had all been seen before in the run (the default progress signal). Shares of successful runs stopped (false stops) and of other runs stopped. Reads every tool span in the window: a replay, not a dashboard query.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param max_threshold BIGINT = 10 min 2 max 100 the largest threshold to try
WITH r AS (
    SELECT run_id, task_type, outcome = 'success' AND coalesce(task_success, TRUE) AS ok
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
t AS (
    SELECT run_id, coalesce(step, 0) AS step, start_ns, span_id,
        coalesce(tool_fingerprint, '') AS fp, coalesce(result_fingerprint, '') AS res,
        tool_status = 'error' AS err
    FROM spans
    WHERE operation = 'execute_tool'
      AND run_id IN (SELECT run_id FROM r)
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
),
seq AS (
    SELECT *,
        row_number() OVER (PARTITION BY run_id ORDER BY start_ns, span_id) AS k,
        count(*) OVER (PARTITION BY run_id, res ORDER BY start_ns, span_id ROWS UNBOUNDED PRECEDING) > 1
            AS stale
    FROM t
),
isl AS (
    -- gaps and islands: rows of one run with the same value in a row share a group number
    SELECT run_id, err, fp,
        k - row_number() OVER (PARTITION BY run_id, err ORDER BY k) AS err_grp,
        k - row_number() OVER (PARTITION BY run_id, fp ORDER BY k) AS fp_grp
    FROM seq
),
same_runs AS (
    SELECT run_id, max(n) AS streak FROM (
        SELECT run_id, fp, fp_grp, count(*) AS n FROM isl GROUP BY ALL
    ) GROUP BY run_id
),
err_runs AS (
    SELECT run_id, max(n) AS streak FROM (
        SELECT run_id, err_grp, count(*) AS n FROM isl WHERE err GROUP BY ALL
    ) GROUP BY run_id
),
steps AS (
    SELECT run_id, step, bool_and(stale) AS idle,
        row_number() OVER (PARTITION BY run_id ORDER BY step) AS k
    FROM seq GROUP BY run_id, step
),
idle_isl AS (
    SELECT run_id, idle, k - row_number() OVER (PARTITION BY run_id, idle ORDER BY k) AS grp
    FROM steps
),
idle_runs AS (
    SELECT run_id, max(n) AS streak FROM (
        SELECT run_id, grp, count(*) AS n FROM idle_isl WHERE idle GROUP BY ALL
    ) GROUP BY run_id
),
per_run AS (
    SELECT r.task_type, r.ok,
        coalesce(s.streak, 0) AS same, coalesce(e.streak, 0) AS errs, coalesce(i.streak, 0) AS idle
    FROM r
    LEFT JOIN same_runs s USING (run_id)
    LEFT JOIN err_runs e USING (run_id)
    LEFT JOIN idle_runs i USING (run_id)
),
counts AS (
    SELECT task_type, 'repeated_action' AS detector, ok, same AS c, count(*) AS n FROM per_run GROUP BY ALL
    UNION ALL
    SELECT task_type, 'tool_failures' AS detector, ok, errs AS c, count(*) AS n FROM per_run GROUP BY ALL
    UNION ALL
    SELECT task_type, 'no_progress' AS detector, ok, idle AS c, count(*) AS n FROM per_run GROUP BY ALL
),
th AS (
    SELECT range AS threshold FROM range(2, $max_threshold::BIGINT + 1)
)
SELECT
    c.task_type,
    c.detector,
    th.threshold,
    coalesce(sum(n) FILTER (WHERE ok), 0)::BIGINT AS successful_runs,
    coalesce(sum(n) FILTER (WHERE ok AND c >= th.threshold), 0)::BIGINT AS false_stops,
    coalesce(sum(n) FILTER (WHERE ok AND c >= th.threshold), 0) / sum(n) FILTER (WHERE ok) AS false_stop_share,
    coalesce(sum(n) FILTER (WHERE NOT ok), 0)::BIGINT AS failed_runs,
    coalesce(sum(n) FILTER (WHERE NOT ok AND c >= th.threshold), 0)::BIGINT AS caught,
    coalesce(sum(n) FILTER (WHERE NOT ok AND c >= th.threshold), 0) / sum(n) FILTER (WHERE NOT ok) AS caught_share
FROM counts c CROSS JOIN th
GROUP BY c.task_type, c.detector, th.threshold
ORDER BY c.task_type, c.detector, th.threshold;
