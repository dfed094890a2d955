-- spend_alert: the LoopwatchSpendPerRunRising rule evaluated on the store, per task type: spend per run (cost_usd, runs that recorded a cost) over the short window (default 15 min) against the baseline window (default 6 h, which includes the short one, as the PromQL rate does); firing when short ≥ factor × baseline, short > 0 and the short window has at least min_runs costed runs.
-- @param now TIMESTAMP = NULL            evaluation time (UTC); NULL = the current time
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param short_window_s DOUBLE = 900 min 1       short window in seconds
-- @param baseline_window_s DOUBLE = 21600 min 1  baseline window in seconds
-- @param factor DOUBLE = 2.0 min 0       how many times the baseline the short spend per run must reach
-- @param min_runs BIGINT = 20 min 0      the fewest costed runs in the short window that can fire
WITH t AS (
    SELECT coalesce($now::TIMESTAMP, get_current_timestamp() AT TIME ZONE 'UTC') AS now_ts
),
w AS (
    SELECT
        task_type,
        started_at > t.now_ts - to_microseconds(($short_window_s::DOUBLE * 1e6)::BIGINT) AS recent,
        cost_usd
    FROM runs, t
    WHERE started_at > t.now_ts - to_microseconds(($baseline_window_s::DOUBLE * 1e6)::BIGINT)
      AND started_at <= t.now_ts
      AND cost_usd IS NOT NULL
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
g AS (
    SELECT
        task_type,
        count(*) FILTER (WHERE recent) AS runs_short,
        avg(cost_usd) FILTER (WHERE recent) AS per_run_short,
        count(*) AS runs_baseline,
        avg(cost_usd) AS per_run_baseline
    FROM w GROUP BY task_type
)
SELECT
    task_type,
    runs_short,
    per_run_short,
    runs_baseline,
    per_run_baseline,
    coalesce(
        runs_short >= $min_runs::BIGINT
        AND per_run_short > 0
        AND per_run_short >= $factor::DOUBLE * per_run_baseline,
        FALSE) AS firing
FROM g
ORDER BY firing DESC, per_run_short / nullif(per_run_baseline, 0) DESC NULLS LAST, task_type;
