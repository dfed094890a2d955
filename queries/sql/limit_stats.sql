-- limit_stats: the evidence behind limit recommendations and verdicts, one row per (task_type, budget). The current limit is the one the task type's latest run in the window ran under; hit counts and progress evidence count only runs under that same limit value; success quantiles use every successful run in the window (outcome success, and task_success not false).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param quantile DOUBLE = 0.95 min 0 max 1 the success quantile the recommendation starts from
-- @param progress_min_new_calls BIGINT = 1 min 0 a stopped run progressed if its last steps brought at least this many new call fingerprints
-- @param progress_max_same_error BIGINT = 1 min 0 ... and no error fingerprint occurred more often than this
WITH w AS (
    SELECT
        *,
        outcome = 'success' AND coalesce(task_success, TRUE) AS ok,
        CASE WHEN outcome = 'limit' THEN coalesce(limit_name, CASE stop_reason
            WHEN 'max_steps' THEN 'steps' WHEN 'max_model_calls' THEN 'model_calls'
            WHEN 'max_tool_calls' THEN 'tool_calls' WHEN 'token_budget' THEN 'tokens'
            WHEN 'cost_budget' THEN 'cost_usd' WHEN 'timeout' THEN 'wall_s' END) END AS hit,
        CASE WHEN recent_new_calls IS NULL THEN NULL
             ELSE recent_new_calls >= $progress_min_new_calls::BIGINT
                  AND coalesce(max_same_error, 0) <= $progress_max_same_error::BIGINT END AS progressing
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
cur AS (
    SELECT
        task_type,
        arg_max_null(limit_steps, start_ns) AS c_steps,
        arg_max_null(limit_model_calls, start_ns) AS c_model_calls,
        arg_max_null(limit_tool_calls, start_ns) AS c_tool_calls,
        arg_max_null(limit_tokens, start_ns) AS c_tokens,
        arg_max_null(limit_cost_usd, start_ns) AS c_cost_usd,
        arg_max_null(limit_wall_s, start_ns) AS c_wall_s
    FROM w GROUP BY task_type
),
agg AS MATERIALIZED (
    SELECT
        w.task_type,
        count(*) AS runs_total,
        count(*) FILTER (WHERE ok) AS successes_total,
        -- steps
        any_value(c.c_steps) AS steps_limit,
        count(*) FILTER (WHERE limit_steps IS NOT DISTINCT FROM c.c_steps) AS steps_runs,
        count(*) FILTER (WHERE limit_steps IS NOT DISTINCT FROM c.c_steps AND hit = 'steps') AS steps_hits,
        count(*) FILTER (WHERE limit_steps IS NOT DISTINCT FROM c.c_steps AND hit = 'steps' AND progressing) AS steps_prog,
        count(*) FILTER (WHERE limit_steps IS NOT DISTINCT FROM c.c_steps AND hit = 'steps' AND NOT progressing) AS steps_loop,
        count(steps) FILTER (WHERE ok) AS steps_succ,
        quantile_cont(steps, $quantile::DOUBLE) FILTER (WHERE ok) AS steps_q,
        median(steps) FILTER (WHERE ok) AS steps_p50,
        max(steps) FILTER (WHERE ok) AS steps_max,
        -- model_calls
        any_value(c.c_model_calls) AS model_calls_limit,
        count(*) FILTER (WHERE limit_model_calls IS NOT DISTINCT FROM c.c_model_calls) AS model_calls_runs,
        count(*) FILTER (WHERE limit_model_calls IS NOT DISTINCT FROM c.c_model_calls AND hit = 'model_calls') AS model_calls_hits,
        count(*) FILTER (WHERE limit_model_calls IS NOT DISTINCT FROM c.c_model_calls AND hit = 'model_calls' AND progressing) AS model_calls_prog,
        count(*) FILTER (WHERE limit_model_calls IS NOT DISTINCT FROM c.c_model_calls AND hit = 'model_calls' AND NOT progressing) AS model_calls_loop,
        count(model_calls) FILTER (WHERE ok) AS model_calls_succ,
        quantile_cont(model_calls, $quantile::DOUBLE) FILTER (WHERE ok) AS model_calls_q,
        median(model_calls) FILTER (WHERE ok) AS model_calls_p50,
        max(model_calls) FILTER (WHERE ok) AS model_calls_max,
        -- tool_calls
        any_value(c.c_tool_calls) AS tool_calls_limit,
        count(*) FILTER (WHERE limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls) AS tool_calls_runs,
        count(*) FILTER (WHERE limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls AND hit = 'tool_calls') AS tool_calls_hits,
        count(*) FILTER (WHERE limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls AND hit = 'tool_calls' AND progressing) AS tool_calls_prog,
        count(*) FILTER (WHERE limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls AND hit = 'tool_calls' AND NOT progressing) AS tool_calls_loop,
        count(tool_calls) FILTER (WHERE ok) AS tool_calls_succ,
        quantile_cont(tool_calls, $quantile::DOUBLE) FILTER (WHERE ok) AS tool_calls_q,
        median(tool_calls) FILTER (WHERE ok) AS tool_calls_p50,
        max(tool_calls) FILTER (WHERE ok) AS tool_calls_max,
        -- tokens
        any_value(c.c_tokens) AS tokens_limit,
        count(*) FILTER (WHERE limit_tokens IS NOT DISTINCT FROM c.c_tokens) AS tokens_runs,
        count(*) FILTER (WHERE limit_tokens IS NOT DISTINCT FROM c.c_tokens AND hit = 'tokens') AS tokens_hits,
        count(*) FILTER (WHERE limit_tokens IS NOT DISTINCT FROM c.c_tokens AND hit = 'tokens' AND progressing) AS tokens_prog,
        count(*) FILTER (WHERE limit_tokens IS NOT DISTINCT FROM c.c_tokens AND hit = 'tokens' AND NOT progressing) AS tokens_loop,
        count(tokens) FILTER (WHERE ok) AS tokens_succ,
        quantile_cont(tokens, $quantile::DOUBLE) FILTER (WHERE ok) AS tokens_q,
        median(tokens) FILTER (WHERE ok) AS tokens_p50,
        max(tokens) FILTER (WHERE ok) AS tokens_max,
        -- cost_usd
        any_value(c.c_cost_usd) AS cost_usd_limit,
        count(*) FILTER (WHERE limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd) AS cost_usd_runs,
        count(*) FILTER (WHERE limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd AND hit = 'cost_usd') AS cost_usd_hits,
        count(*) FILTER (WHERE limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd AND hit = 'cost_usd' AND progressing) AS cost_usd_prog,
        count(*) FILTER (WHERE limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd AND hit = 'cost_usd' AND NOT progressing) AS cost_usd_loop,
        count(cost_usd) FILTER (WHERE ok) AS cost_usd_succ,
        quantile_cont(cost_usd, $quantile::DOUBLE) FILTER (WHERE ok) AS cost_usd_q,
        median(cost_usd) FILTER (WHERE ok) AS cost_usd_p50,
        max(cost_usd) FILTER (WHERE ok) AS cost_usd_max,
        -- wall_s
        any_value(c.c_wall_s) AS wall_s_limit,
        count(*) FILTER (WHERE limit_wall_s IS NOT DISTINCT FROM c.c_wall_s) AS wall_s_runs,
        count(*) FILTER (WHERE limit_wall_s IS NOT DISTINCT FROM c.c_wall_s AND hit = 'wall_s') AS wall_s_hits,
        count(*) FILTER (WHERE limit_wall_s IS NOT DISTINCT FROM c.c_wall_s AND hit = 'wall_s' AND progressing) AS wall_s_prog,
        count(*) FILTER (WHERE limit_wall_s IS NOT DISTINCT FROM c.c_wall_s AND hit = 'wall_s' AND NOT progressing) AS wall_s_loop,
        count(wall_s) FILTER (WHERE ok) AS wall_s_succ,
        quantile_cont(wall_s, $quantile::DOUBLE) FILTER (WHERE ok) AS wall_s_q,
        median(wall_s) FILTER (WHERE ok) AS wall_s_p50,
        max(wall_s) FILTER (WHERE ok) AS wall_s_max
    FROM w JOIN cur c USING (task_type)
    GROUP BY w.task_type
),
long AS (
    FROM agg UNPIVOT INCLUDE NULLS (
        (current_limit, runs, hits, hits_progressing, hits_looping, successes, success_q, success_p50, success_max) FOR budget IN (
            (steps_limit, steps_runs, steps_hits, steps_prog, steps_loop, steps_succ, steps_q, steps_p50, steps_max) AS steps,
            (model_calls_limit, model_calls_runs, model_calls_hits, model_calls_prog, model_calls_loop, model_calls_succ, model_calls_q, model_calls_p50, model_calls_max) AS model_calls,
            (tool_calls_limit, tool_calls_runs, tool_calls_hits, tool_calls_prog, tool_calls_loop, tool_calls_succ, tool_calls_q, tool_calls_p50, tool_calls_max) AS tool_calls,
            (tokens_limit, tokens_runs, tokens_hits, tokens_prog, tokens_loop, tokens_succ, tokens_q, tokens_p50, tokens_max) AS tokens,
            (cost_usd_limit, cost_usd_runs, cost_usd_hits, cost_usd_prog, cost_usd_loop, cost_usd_succ, cost_usd_q, cost_usd_p50, cost_usd_max) AS cost_usd,
            (wall_s_limit, wall_s_runs, wall_s_hits, wall_s_prog, wall_s_loop, wall_s_succ, wall_s_q, wall_s_p50, wall_s_max) AS wall_s
        )
    )
)
SELECT
    task_type,
    budget,
    runs_total,
    successes_total,
    current_limit,
    runs,
    hits,
    CASE WHEN runs > 0 THEN hits / runs END AS hit_rate,
    hits_progressing,
    hits_looping,
    successes,
    success_q,
    success_p50,
    success_max
FROM long
ORDER BY task_type, list_position(['steps', 'model_calls', 'tool_calls', 'tokens', 'cost_usd', 'wall_s'], budget);
