-- shadow_limits: candidate (shadow) limits evaluated on live runs next to the enforced ones, per task type, candidate (its limits version) and what the candidate would have done (a stop reason, or 'finish'). Runs are successful when their loop completed and their task label is not false. For each group: runs, successful runs (a candidate stop on one is a would-be false cut), runs that did not succeed, how many of those the enforced limits stopped, and spend (tokens, cost) of the runs that did not succeed with the part past the candidate's would-be stop. Reads the runs' shadow columns (from the run spans' loopwatch.shadow.* attributes).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH r AS (
    SELECT task_type, outcome,
        SUCCESSFUL_RUN AS ok,
        coalesce(tokens, 0) AS tokens, coalesce(cost_usd, 0) AS cost_usd, model_calls,
        shadow_decision AS decision,
        coalesce(shadow_limits_version, '') AS candidate,
        shadow_step AS step,
        coalesce(shadow_saved_tokens, 0) AS saved_tokens,
        coalesce(shadow_saved_cost_usd, 0) AS saved_cost_usd,
        coalesce(shadow_saved_model_calls, 0) AS saved_model_calls
    FROM runs
    WHERE shadow_decision IS NOT NULL
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
)
SELECT
    r.task_type,
    r.candidate,
    r.decision,
    count(*)::BIGINT AS runs,
    count(*) FILTER (WHERE r.ok)::BIGINT AS successful_runs,
    count(*) FILTER (WHERE NOT r.ok)::BIGINT AS failed_runs,
    count(*) FILTER (WHERE r.outcome IN ('limit', 'stuck'))::BIGINT AS enforced_stops,
    coalesce(sum(r.tokens) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_tokens,
    coalesce(sum(r.saved_tokens) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_saved_tokens,
    coalesce(sum(r.cost_usd) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_cost_usd,
    coalesce(sum(r.saved_cost_usd) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_saved_cost_usd,
    median(r.step) AS median_step
FROM r
GROUP BY r.task_type, r.candidate, r.decision
ORDER BY r.task_type, r.candidate, r.decision = 'finish' DESC, runs DESC, r.decision;
