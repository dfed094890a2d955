-- runs_daily: runs per UTC day, task type, outcome and stop reason with successes and usage sums, for long windows: whole days already rolled up are read from the day rollups, the rest (today) from runs. Day-granular: a window that starts mid-day counts that whole day.
-- @param since TIMESTAMP = NULL          window start (its day is included whole); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive; NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
WITH cut AS (
    SELECT coalesce(max(rolled_until), TIMESTAMP '0001-01-01') AS t
    FROM rollup_state WHERE period = 'day'
),
rolled AS (
    SELECT bucket AS day, task_type, outcome, stop_reason, runs, successes,
           tokens, cost_usd, wall_s, steps
    FROM rollup_runs, cut
    WHERE period = 'day' AND bucket < cut.t
      AND ($since::TIMESTAMP IS NULL OR bucket >= time_bucket(INTERVAL 1 DAY, $since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR bucket < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
fresh AS (
    SELECT time_bucket(INTERVAL 1 DAY, started_at) AS day, task_type, outcome, stop_reason,
           count(*) AS runs, count(*) FILTER (SUCCESSFUL_RUN) AS successes,
           sum(tokens) AS tokens, sum(cost_usd) AS cost_usd, sum(wall_s) AS wall_s,
           sum(steps) AS steps
    FROM runs, cut
    WHERE started_at >= cut.t
      AND ($since::TIMESTAMP IS NULL OR started_at >= time_bucket(INTERVAL 1 DAY, $since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
    GROUP BY ALL
)
SELECT day, task_type, outcome, stop_reason, sum(runs)::BIGINT AS runs,
       sum(successes)::BIGINT AS successes, sum(tokens) AS tokens, sum(cost_usd) AS cost_usd,
       sum(wall_s) AS wall_s, sum(steps) AS steps
FROM (SELECT * FROM rolled UNION ALL SELECT * FROM fresh)
GROUP BY ALL
ORDER BY day, task_type, outcome, stop_reason;
