-- import_replay: what the guard would have done to imported runs, replayed at import under the limits given then, per task type and decision (a stop reason, or 'finish' when it would have let the run end as recorded). Runs of successful tasks are those whose task label is true (unlabeled runs: whose loop completed); a stop on one is a false cut, on a run of a failed task a stop earlier. Saved spend is the recorded usage past the would-be stop: tokens, and model calls for logs that recorded no tokens.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH r AS (
    SELECT run_id, task_type, limits_version,
        coalesce(task_success, outcome = 'success') AS ok,
        task_success IS NULL AS unlabeled,
        tokens, model_calls
    FROM runs
    WHERE source = 'import'
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
d AS (
    SELECT run_id,
        coalesce(attributes->>'$."loopwatch.replay.stop_reason"', 'unknown') AS decision,
        TRY_CAST(attributes->>'$."loopwatch.replay.step"' AS BIGINT) AS step,
        TRY_CAST(attributes->>'$."loopwatch.replay.saved.tokens"' AS DOUBLE) AS saved_tokens,
        TRY_CAST(attributes->>'$."loopwatch.replay.saved.model_calls"' AS DOUBLE) AS saved_model_calls
    FROM spans
    WHERE operation = 'invoke_agent' AND run_id IN (SELECT run_id FROM r)
)
SELECT
    r.task_type,
    d.decision,
    count(*)::BIGINT AS runs,
    count(*) FILTER (WHERE r.ok)::BIGINT AS successful_task_runs,
    count(*) FILTER (WHERE NOT r.ok)::BIGINT AS failed_task_runs,
    count(*) FILTER (WHERE r.unlabeled)::BIGINT AS unlabeled_runs,
    coalesce(sum(r.tokens), 0)::DOUBLE AS tokens,
    coalesce(sum(d.saved_tokens), 0)::DOUBLE AS saved_tokens,
    coalesce(sum(r.tokens) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_tokens,
    coalesce(sum(d.saved_tokens) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_saved_tokens,
    coalesce(sum(r.model_calls), 0)::DOUBLE AS model_calls,
    coalesce(sum(d.saved_model_calls), 0)::DOUBLE AS saved_model_calls,
    coalesce(sum(r.model_calls) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_model_calls,
    coalesce(sum(d.saved_model_calls) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_saved_model_calls,
    count(r.tokens)::BIGINT AS runs_with_tokens,
    median(d.step) AS median_step,
    string_agg(DISTINCT r.limits_version, ',' ORDER BY r.limits_version) AS limits_versions
FROM r JOIN d USING (run_id)
GROUP BY r.task_type, d.decision
ORDER BY r.task_type, d.decision = 'finish' DESC, runs DESC, d.decision;
