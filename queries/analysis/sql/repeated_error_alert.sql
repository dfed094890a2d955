-- repeated_error_alert: the LoopwatchRepeatedErrorRateRising rule evaluated on the store, per task type: the repeated_error share of runs over the short window (default 15 min) against the baseline window (default 6 h, which includes the short one, as the PromQL rate does); firing when short ≥ factor × baseline, short ≥ min_ratio and the short window has at least min_runs runs.
-- @param now TIMESTAMP = NULL            evaluation time (UTC); NULL = the current time
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param short_window_s DOUBLE = 900 min 1       short window in seconds
-- @param baseline_window_s DOUBLE = 21600 min 1  baseline window in seconds
-- @param factor DOUBLE = 2.0 min 0       how many times the baseline the short ratio must reach
-- @param min_ratio DOUBLE = 0.05 min 0 max 1 the smallest short-window ratio that can fire
-- @param min_runs BIGINT = 20 min 0      the fewest runs in the short window that can fire
WITH t AS (
    SELECT coalesce($now::TIMESTAMP, get_current_timestamp() AT TIME ZONE 'UTC') AS now_ts
),
w AS (
    SELECT
        task_type,
        started_at > t.now_ts - to_microseconds(($short_window_s::DOUBLE * 1e6)::BIGINT) AS recent,
        stop_reason = 'repeated_error' AS rep
    FROM runs, t
    WHERE started_at > t.now_ts - to_microseconds(($baseline_window_s::DOUBLE * 1e6)::BIGINT)
      AND started_at <= t.now_ts
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
g AS (
    SELECT
        task_type,
        count(*) FILTER (WHERE recent) AS runs_short,
        count(*) FILTER (WHERE recent AND rep) AS repeated_short,
        count(*) AS runs_baseline,
        count(*) FILTER (WHERE rep) AS repeated_baseline
    FROM w GROUP BY task_type
)
SELECT
    task_type,
    runs_short,
    repeated_short,
    CASE WHEN runs_short > 0 THEN repeated_short / runs_short END AS ratio_short,
    runs_baseline,
    repeated_baseline,
    repeated_baseline / runs_baseline AS ratio_baseline,
    coalesce(
        runs_short >= $min_runs::BIGINT
        AND repeated_short / runs_short >= $min_ratio::DOUBLE
        AND repeated_short / runs_short >= $factor::DOUBLE * (repeated_baseline / runs_baseline),
        FALSE) AS firing
FROM g
ORDER BY firing DESC, ratio_short DESC NULLS LAST, task_type;
