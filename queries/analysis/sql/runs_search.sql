-- runs_search: runs for the runs table, newest first, with their task-success label and feedback score (when feedback gave one), filtered by task type, stop reason, outcome, whether a detector nudged the run, and a text that the run id, trace id or stop explanation contains (case-insensitive; matched as plain text, not a pattern).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param stop_reasons VARCHAR[] = NULL   only these stop reasons; NULL = all
-- @param outcomes VARCHAR[] = NULL       only these outcomes; NULL = all
-- @param nudged BOOLEAN = NULL          true: only runs a detector nudged; false: only runs never nudged; NULL = all
-- @param text VARCHAR = NULL             only runs whose id, trace id or explanation contains this; NULL or empty = all
-- @param top_n BIGINT = 500 min 1 max 100000 how many runs to return
SELECT
    run_id, started_at, task_type, stop_reason, outcome, limit_name,
    steps, model_calls, tool_calls, tokens, cost_usd, wall_s, max_utilization,
    limits_version, explanation, trace_id, agent_name, service, coalesce(nudges, 0) AS nudges,
    task_success, f.score AS feedback_score
FROM runs LEFT JOIN run_feedback f USING (run_id)
WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
  AND ($stop_reasons::VARCHAR[] IS NULL OR list_contains($stop_reasons::VARCHAR[], stop_reason))
  AND ($outcomes::VARCHAR[] IS NULL OR list_contains($outcomes::VARCHAR[], outcome))
  AND ($nudged::BOOLEAN IS NULL OR (coalesce(nudges, 0) > 0) = $nudged::BOOLEAN)
  AND (coalesce($text::VARCHAR, '') = ''
       OR contains(lower(run_id), lower($text::VARCHAR))
       OR contains(lower(coalesce(trace_id, '')), lower($text::VARCHAR))
       OR contains(lower(coalesce(explanation, '')), lower($text::VARCHAR)))
ORDER BY start_ns DESC, run_id
LIMIT $top_n::BIGINT;
