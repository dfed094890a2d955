-- detector_replay_spans: the runs of the window with their tool spans in order, for replaying the detectors (loopwatch.instrumentation.runtime.detectors) on them: one row per tool span (call and result fingerprints, status, error code and fingerprint, step), and one row with NULL tool columns for a run without tool spans. Ordered by run, then time. Reads every tool span in the window: a replay, not a dashboard query.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH r AS (
    SELECT run_id, task_type, SUCCESSFUL_RUN AS ok
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
t AS (
    SELECT run_id, coalesce(step, 0) AS step, start_ns, span_id,
        coalesce(tool_name, '') AS tool, coalesce(tool_fingerprint, '') AS fp,
        coalesce(result_fingerprint, '') AS res, tool_status = 'error' AS err,
        error_code, error_fingerprint
    FROM spans
    WHERE operation = 'execute_tool'
      AND run_id IN (SELECT run_id FROM r)
      AND ($since::TIMESTAMP IS NULL OR start_ns >= epoch_ns($since::TIMESTAMP))
)
SELECT r.run_id, r.task_type, r.ok, t.step, t.tool, t.fp, t.res, t.err, t.error_code,
    t.error_fingerprint
FROM r LEFT JOIN t USING (run_id)
ORDER BY r.run_id, t.start_ns NULLS FIRST, t.span_id;
