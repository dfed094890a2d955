-- nudge_recoveries: per task type, the runs a detector nudged (on_stuck = "nudge"): how many recovered (went on to succeed) and how many stopped anyway; NULL nudges means none.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
SELECT
    task_type,
    count(*) AS nudged_runs,
    count(*) FILTER (WHERE outcome = 'success') AS recovered,
    count(*) FILTER (WHERE outcome <> 'success') AS stopped_anyway,
    sum(nudges) AS nudges,
    count(*) FILTER (WHERE outcome = 'success') / count(*) AS recovered_share
FROM runs
WHERE coalesce(nudges, 0) > 0
  AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY task_type
ORDER BY nudged_runs DESC, task_type;
