-- runs_daily_raw: runs_daily read from runs only (stores without rollups, and the reference the rollups are tested against).
-- @param since TIMESTAMP = NULL          window start (its day is included whole); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive; NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
SELECT time_bucket(INTERVAL 1 DAY, started_at) AS day, task_type, outcome, stop_reason,
       count(*)::BIGINT AS runs, count(*) FILTER (SUCCESSFUL_RUN)::BIGINT AS successes,
       sum(tokens) AS tokens, sum(cost_usd) AS cost_usd, sum(wall_s) AS wall_s,
       sum(steps) AS steps
FROM runs
WHERE ($since::TIMESTAMP IS NULL OR started_at >= time_bucket(INTERVAL 1 DAY, $since::TIMESTAMP))
  AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
  AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
GROUP BY ALL
ORDER BY day, task_type, outcome, stop_reason;
