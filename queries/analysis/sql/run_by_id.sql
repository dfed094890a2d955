-- run_by_id: the run whose run id is exactly the given id, else the runs of the trace whose trace id it is (newest first), with the task-success label and, where feedback gave them, its score, comment and source: opening a run never matches text inside another run's fields (runs_search's text filter is for searching).
-- @param id VARCHAR                      a run id (exact, case-sensitive) or a trace id (32 hex digits, any case)
-- @param top_n BIGINT = 20 min 1 max 1000 how many runs of one trace to return
SELECT
    run_id, started_at, task_type, stop_reason, outcome, limit_name,
    steps, model_calls, tool_calls, tokens, cost_usd, wall_s, max_utilization,
    limits_version, explanation, trace_id, agent_name, service,
    task_success, f.score AS feedback_score, f.comment AS feedback_comment,
    f.source AS feedback_source
FROM runs LEFT JOIN run_feedback f USING (run_id)
WHERE run_id = $id::VARCHAR
   OR trace_id = lower($id::VARCHAR)
ORDER BY (run_id = $id::VARCHAR) DESC, start_ns DESC, run_id
LIMIT $top_n::BIGINT;
