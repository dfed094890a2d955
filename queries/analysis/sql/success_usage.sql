-- success_usage: what the successful runs of the window used (the newest max_runs per task type) (the order statistics behind limit recommendations, docs/queries.md), oldest first per task type, with each detector's peak evidence where the replay recorded it and whether a task-success label (rather than completion) made the run successful (labelled). A live run that a limit stopped, whose task is not labelled failed and that was not looping, is included as a censored observation (censored = TRUE, hit = the budget that stopped it, or the rate item cost_per_min / tokens_per_min for a spend-rate stop): it needed at least what it used. Usage of 0 tokens, cost or seconds counts as not recorded (NULL), and so does the wall time of imported runs: logs without usage or timestamps say nothing about them.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param max_runs BIGINT = 10000 min 1    at most this many runs per task type, the newest
WITH w AS NOT MATERIALIZED (
    SELECT
        run_id, task_type, start_ns, steps, model_calls, tool_calls,
        nullif(tokens, 0) AS tokens, nullif(cost_usd, 0) AS cost_usd,
        CASE WHEN source <> 'import' THEN nullif(wall_s, 0) END AS wall_s,
        peak_repeated_action, peak_repeated_tool_call, peak_repeated_error,
        peak_tool_failures, peak_no_progress,
        source <> 'import' AND outcome = 'limit' AND task_success IS NOT FALSE
            AND NOT (coalesce(recent_new_calls, 1) < 1 OR coalesce(max_same_error, 0) > 1) AS censored,
        SUCCESSFUL_RUN AS ok, task_success IS NOT NULL AS labelled,
        CASE WHEN outcome = 'limit' AND limit_name = 'spend_rate'
            THEN CASE stop_reason WHEN 'token_budget' THEN 'tokens_per_min' ELSE 'cost_per_min' END
            WHEN outcome = 'limit' THEN coalesce(limit_name, CASE stop_reason
            WHEN 'max_steps' THEN 'steps' WHEN 'max_model_calls' THEN 'model_calls'
            WHEN 'max_tool_calls' THEN 'tool_calls' WHEN 'token_budget' THEN 'tokens'
            WHEN 'cost_budget' THEN 'cost_usd' WHEN 'timeout' THEN 'wall_s' END) END AS hit
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
-- the newest max_runs per task type: a top-N aggregate finds where they start (from_ns) and how
-- many of the runs that started at that instant are among them (at_from); every run after it is
-- kept, and only the runs at the boundary are numbered (cheaper than numbering every run of the
-- window, or the kept ones: DuckDB turns that into a top-N of whole rows)
keep AS (
    SELECT task_type, min(x) AS from_ns, $max_runs::BIGINT - count(*) FILTER (x > m) AS at_from
    FROM (
        SELECT task_type, x, min(x) OVER (PARTITION BY task_type) AS m FROM (
            SELECT task_type, unnest(max(start_ns, $max_runs::BIGINT)) AS x
            FROM w WHERE ok OR censored GROUP BY task_type
        )
    ) GROUP BY task_type
),
kept AS (
    SELECT w.* FROM w JOIN keep USING (task_type)
    WHERE (ok OR censored) AND start_ns > from_ns
    UNION ALL
    SELECT w.* FROM w JOIN keep USING (task_type)
    WHERE (ok OR censored) AND start_ns = from_ns
    QUALIFY row_number() OVER (PARTITION BY task_type) <= any_value(at_from) OVER (PARTITION BY task_type)
)
SELECT run_id, task_type, steps, model_calls, tool_calls, tokens, cost_usd, wall_s,
    peak_repeated_action, peak_repeated_tool_call, peak_repeated_error,
    peak_tool_failures, peak_no_progress, censored, CASE WHEN censored THEN hit END AS hit,
    labelled
FROM kept
ORDER BY task_type, start_ns;
