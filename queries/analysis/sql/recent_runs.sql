-- recent_runs: the latest runs, newest first, optionally only some stop reasons or outcomes (to pick one to drill into).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param stop_reasons VARCHAR[] = NULL   only these stop reasons; NULL = all
-- @param outcomes VARCHAR[] = NULL       only these outcomes; NULL = all
-- @param top_n BIGINT = 100 min 1 max 100000 how many runs to return
SELECT
    run_id, trace_id, task_type, agent_name, started_at, stop_reason, outcome, limit_name,
    steps, model_calls, tool_calls, tokens, cost_usd, wall_s, max_utilization,
    limits_version, explanation
FROM runs
WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
  AND ($stop_reasons::VARCHAR[] IS NULL OR list_contains($stop_reasons::VARCHAR[], stop_reason))
  AND ($outcomes::VARCHAR[] IS NULL OR list_contains($outcomes::VARCHAR[], outcome))
ORDER BY start_ns DESC, run_id
LIMIT $top_n::BIGINT;
