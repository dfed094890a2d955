-- what_if: for candidate values of one budget of one task type, the share of successful runs the value would have cut (usage above it) and the share of spend it would have saved on runs that did not succeed (spend above the point where the value stops them, pro rata to that budget's usage). Spend is cost_usd, or tokens when the window's failed runs recorded no cost.
-- @param task_type VARCHAR               the task type
-- @param budget BUDGET                   steps, model_calls, tool_calls, tokens, cost_usd or wall_s
-- @param candidates DOUBLE[]             the limit values to try
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
WITH w AS (
    SELECT
        SUCCESSFUL_RUN AS ok,
        CASE $budget::VARCHAR
            WHEN 'steps' THEN steps WHEN 'model_calls' THEN model_calls
            WHEN 'tool_calls' THEN tool_calls WHEN 'tokens' THEN tokens
            WHEN 'cost_usd' THEN cost_usd WHEN 'wall_s' THEN wall_s END AS used,
        coalesce(cost_usd, 0.0) AS cost,
        coalesce(tokens, 0.0) AS tok
    FROM runs
    WHERE task_type = $task_type::VARCHAR
      AND ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
),
measure AS (
    SELECT CASE WHEN coalesce(sum(cost) FILTER (WHERE NOT ok), 0) > 0 THEN 'cost_usd' ELSE 'tokens' END AS m
    FROM w
),
succ AS (
    SELECT used FROM w WHERE ok AND used IS NOT NULL
),
fail AS (
    SELECT used, CASE WHEN (SELECT m FROM measure) = 'cost_usd' THEN cost ELSE tok END AS spend
    FROM w WHERE NOT ok AND used IS NOT NULL
),
cand AS (
    SELECT DISTINCT unnest($candidates::DOUBLE[]) AS candidate
),
s AS (
    SELECT c.candidate, count(*) FILTER (WHERE succ.used > c.candidate) AS cut, count(succ.used) AS n
    FROM cand c LEFT JOIN succ ON TRUE
    GROUP BY c.candidate
),
f AS (
    SELECT
        c.candidate,
        coalesce(sum(fail.spend), 0) AS failed_spend,
        coalesce(sum(CASE
            WHEN fail.used > c.candidate AND fail.used > 0
            THEN fail.spend * (1 - c.candidate / fail.used) ELSE 0 END), 0) AS saved,
        count(*) FILTER (WHERE fail.used > c.candidate) AS stopped_earlier,
        count(fail.used) AS failed_runs
    FROM cand c LEFT JOIN fail ON TRUE
    GROUP BY c.candidate
)
SELECT
    s.candidate,
    s.n AS successful_runs,
    s.cut AS successful_cut,
    CASE WHEN s.n > 0 THEN s.cut / s.n END AS cut_share,
    f.failed_runs,
    f.stopped_earlier,
    f.failed_spend,
    f.saved AS saved_spend,
    CASE WHEN f.failed_spend > 0 THEN f.saved / f.failed_spend END AS saved_share,
    (SELECT m FROM measure) AS spend_measure
FROM s JOIN f USING (candidate)
ORDER BY s.candidate;
