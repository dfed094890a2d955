-- repeated_error_alert_history: the LoopwatchRepeatedErrorRateRising rule (see repeated_error_alert) evaluated at the end of every step_s bucket of the window, per task type: short-window and baseline repeated_error shares and whether the rule fired. Windows are counted in whole buckets (short_window_s and baseline_window_s rounded to step_s), so this is the alert's history for charts, not its exact state.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param step_s BIGINT = 60 min 1        seconds between evaluations (the bucket width)
-- @param short_window_s DOUBLE = 900 min 1       short window in seconds
-- @param baseline_window_s DOUBLE = 21600 min 1  baseline window in seconds
-- @param factor DOUBLE = 2.0 min 0       how many times the baseline the short ratio must reach
-- @param min_ratio DOUBLE = 0.05 min 0 max 1 the smallest short-window ratio that can fire
-- @param min_runs BIGINT = 20 min 0      the fewest runs in the short window that can fire
WITH p AS (
    SELECT
        greatest(round($short_window_s::DOUBLE / $step_s::BIGINT), 1)::BIGINT - 1 AS short_prev,
        greatest(round($baseline_window_s::DOUBLE / $step_s::BIGINT), 1)::BIGINT - 1 AS base_prev
),
b AS (
    SELECT
        task_type,
        (epoch(time_bucket(to_seconds($step_s::BIGINT), started_at)) / $step_s::BIGINT)::BIGINT AS k,
        count(*) AS runs,
        count(*) FILTER (WHERE stop_reason = 'repeated_error') AS rep
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL
           OR started_at >= $since::TIMESTAMP - to_microseconds(($baseline_window_s::DOUBLE * 1e6)::BIGINT))
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
    GROUP BY ALL
),
s AS (
    -- a bucket's index k counts steps since the epoch, so a RANGE frame in k is a time window
    SELECT
        task_type, k,
        sum(runs) OVER w_short AS runs_short,
        sum(rep) OVER w_short AS repeated_short,
        sum(runs) OVER w_base AS runs_baseline,
        sum(rep) OVER w_base AS repeated_baseline
    FROM b, p
    WINDOW
        w_short AS (PARTITION BY task_type ORDER BY k RANGE BETWEEN p.short_prev PRECEDING AND CURRENT ROW),
        w_base AS (PARTITION BY task_type ORDER BY k RANGE BETWEEN p.base_prev PRECEDING AND CURRENT ROW)
)
SELECT
    task_type,
    make_timestamp(((k + 1) * $step_s::BIGINT) * 1000000) AS evaluated_at,
    runs_short::BIGINT AS runs_short,
    repeated_short::BIGINT AS repeated_short,
    repeated_short / runs_short AS ratio_short,
    runs_baseline::BIGINT AS runs_baseline,
    repeated_baseline::BIGINT AS repeated_baseline,
    repeated_baseline / runs_baseline AS ratio_baseline,
    coalesce(
        runs_short >= $min_runs::BIGINT
        AND repeated_short / runs_short >= $min_ratio::DOUBLE
        AND repeated_short / runs_short >= $factor::DOUBLE * (repeated_baseline / runs_baseline),
        FALSE) AS firing
FROM s
WHERE $since::TIMESTAMP IS NULL OR make_timestamp(((k + 1) * $step_s::BIGINT) * 1000000) > $since::TIMESTAMP
ORDER BY evaluated_at, task_type;
