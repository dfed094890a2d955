-- limit_change_side: one side of a limit change's before/after report: the runs of one task type under one limits version in a time window, with their hit rate (no row when there are none), completed share, task success where labelled (and how many were labelled), the mean feedback score where scored (and how many were scored), and spend per run.
-- @param task_type VARCHAR = NULL        the task type (NULL: no runs)
-- @param limits_version VARCHAR = NULL   the loopwatch.limits.version its runs recorded (NULL: no runs)
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
SELECT
    count(*) AS runs,
    count(*) FILTER (WHERE outcome = 'limit') / nullif(count(*), 0) AS hit_rate,
    count(*) FILTER (WHERE stop_reason = 'completed') / nullif(count(*), 0) AS completed_share,
    count(task_success) AS labelled,
    count(*) FILTER (WHERE task_success) / nullif(count(task_success), 0) AS task_success_rate,
    count(f.score) AS scored,
    avg(f.score) AS mean_score,
    count(cost_usd) AS costed,
    avg(cost_usd) AS cost_per_run,
    avg(tokens) AS tokens_per_run,
    avg(steps) AS steps_per_run
FROM runs LEFT JOIN run_feedback f USING (run_id)
WHERE task_type = $task_type
  AND limits_version = $limits_version
  AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
HAVING count(*) > 0;
