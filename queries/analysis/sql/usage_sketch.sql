-- usage_sketch: the merged quantile sketch (DDSketch-style log bins, 1% relative error) of one run measure per task type over a long window: whole days from the day rollups, the rest from runs binned the same way; quantiles are read from it in Python (loopwatch.queries.analysis.longwindow).
-- @param measure VARCHAR = NULL          wall_s, tokens, steps or cost_usd
-- @param since TIMESTAMP = NULL          window start (its day is included whole); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive; NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param ln_gamma DOUBLE = 0.020000666706669435 the sketch's log(gamma); keep the default
WITH cut AS (
    SELECT coalesce(max(rolled_until), TIMESTAMP '0001-01-01') AS t
    FROM rollup_state WHERE period = 'day'
),
rolled AS (
    SELECT task_type, bin, n
    FROM rollup_sketches, cut
    WHERE period = 'day' AND bucket < cut.t AND measure = $measure::VARCHAR
      AND ($since::TIMESTAMP IS NULL OR bucket >= time_bucket(INTERVAL 1 DAY, $since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR bucket < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
values AS (
    SELECT task_type, CASE $measure::VARCHAR WHEN 'wall_s' THEN wall_s::DOUBLE
        WHEN 'tokens' THEN tokens::DOUBLE WHEN 'steps' THEN steps::DOUBLE
        WHEN 'cost_usd' THEN cost_usd::DOUBLE END AS x
    FROM runs, cut
    WHERE started_at >= cut.t
      AND ($since::TIMESTAMP IS NULL OR started_at >= time_bucket(INTERVAL 1 DAY, $since::TIMESTAMP))
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
fresh AS (
    SELECT task_type,
           CASE WHEN x > 0 THEN ceil(ln(x) / $ln_gamma::DOUBLE)::INTEGER ELSE -2147483648 END AS bin,
           count(*) AS n
    FROM values WHERE x IS NOT NULL GROUP BY ALL
)
SELECT task_type, bin, sum(n)::BIGINT AS n
FROM (SELECT * FROM rolled UNION ALL SELECT * FROM fresh)
GROUP BY ALL
ORDER BY task_type, bin;
