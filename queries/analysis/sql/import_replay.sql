-- import_replay: what the guard would have done to imported runs, replayed at import under the limits given then, per task type and decision (a stop reason, or 'finish' when it would have let the run end as recorded). Runs of successful tasks are those whose task label is true (unlabeled runs: whose loop completed); a stop on one is a false cut, on a run of a failed task a stop earlier. Saved spend is the recorded usage past the would-be stop: tokens, and model calls for logs that recorded no tokens.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH r AS (
    SELECT run_id, task_type, limits_version,
        SUCCESSFUL_RUN AS ok,
        task_success IS NULL AS unlabeled,
        tokens, model_calls,
        coalesce(replay_decision, 'unknown') AS decision,
        replay_step AS step,
        replay_saved_tokens AS saved_tokens,
        replay_saved_model_calls AS saved_model_calls
    FROM runs
    WHERE source IN ('import', 'foreign')  -- replayed at import, or rebuilt from foreign spans
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
)
SELECT
    r.task_type,
    r.decision,
    count(*)::BIGINT AS runs,
    count(*) FILTER (WHERE r.ok)::BIGINT AS successful_task_runs,
    count(*) FILTER (WHERE NOT r.ok)::BIGINT AS failed_task_runs,
    count(*) FILTER (WHERE r.unlabeled)::BIGINT AS unlabeled_runs,
    coalesce(sum(r.tokens), 0)::DOUBLE AS tokens,
    coalesce(sum(r.saved_tokens), 0)::DOUBLE AS saved_tokens,
    coalesce(sum(r.tokens) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_tokens,
    coalesce(sum(r.saved_tokens) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_saved_tokens,
    coalesce(sum(r.model_calls), 0)::DOUBLE AS model_calls,
    coalesce(sum(r.saved_model_calls), 0)::DOUBLE AS saved_model_calls,
    coalesce(sum(r.model_calls) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_model_calls,
    coalesce(sum(r.saved_model_calls) FILTER (WHERE NOT r.ok), 0)::DOUBLE AS failed_saved_model_calls,
    count(r.tokens)::BIGINT AS runs_with_tokens,
    median(r.step) AS median_step,
    string_agg(DISTINCT r.limits_version, ',' ORDER BY r.limits_version) AS limits_versions
FROM r
GROUP BY r.task_type, r.decision
ORDER BY r.task_type, r.decision = 'finish' DESC, runs DESC, r.decision;
