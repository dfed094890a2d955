-- limit_stats: the evidence behind limit recommendations and verdicts, one row per (task_type, budget). The current limit is the one the task type's latest run in the window ran under; hit counts and progress evidence count only runs under that same limit value; success quantiles use every successful run in the window (outcome success, and task_success not false).
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param quantile DOUBLE = 0.95 min 0 max 1 the success quantile the recommendation starts from
-- @param progress_min_new_calls BIGINT = 1 min 0 a stopped run progressed if its last steps brought at least this many new call fingerprints
-- @param progress_max_same_error BIGINT = 1 min 0 ... and no error fingerprint occurred more often than this
WITH w AS NOT MATERIALIZED (
    SELECT
        task_type, start_ns,
        steps, model_calls, tool_calls, tokens, cost_usd, wall_s,
        limit_steps, limit_model_calls, limit_tool_calls, limit_tokens, limit_cost_usd, limit_wall_s,
        SUCCESSFUL_RUN AS ok,
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
g AS (
    -- one pass over the runs; everything below works on these few rows
    SELECT
        task_type, hit, progressing,
        limit_steps, limit_model_calls, limit_tool_calls, limit_tokens, limit_cost_usd, limit_wall_s,
        count(*) AS n, max(start_ns) AS last_ns
    FROM w
    GROUP BY ALL
),
cur AS (
    -- the limits of each task type's latest run: those of the group holding it
    SELECT
        task_type,
        sum(n)::BIGINT AS runs_total,
        arg_max_null(limit_steps, last_ns) AS c_steps,
        arg_max_null(limit_model_calls, last_ns) AS c_model_calls,
        arg_max_null(limit_tool_calls, last_ns) AS c_tool_calls,
        arg_max_null(limit_tokens, last_ns) AS c_tokens,
        arg_max_null(limit_cost_usd, last_ns) AS c_cost_usd,
        arg_max_null(limit_wall_s, last_ns) AS c_wall_s
    FROM g GROUP BY task_type
),
hits AS (
    -- runs under the current limit value, and those it stopped
    SELECT
        r.task_type,
        coalesce(sum(n) FILTER (WHERE r.limit_steps IS NOT DISTINCT FROM c.c_steps), 0)::BIGINT AS steps_runs,
        coalesce(sum(n) FILTER (WHERE r.limit_steps IS NOT DISTINCT FROM c.c_steps AND hit = 'steps'), 0)::BIGINT AS steps_hits,
        coalesce(sum(n) FILTER (WHERE r.limit_steps IS NOT DISTINCT FROM c.c_steps AND hit = 'steps' AND progressing), 0)::BIGINT AS steps_prog,
        coalesce(sum(n) FILTER (WHERE r.limit_steps IS NOT DISTINCT FROM c.c_steps AND hit = 'steps' AND NOT progressing), 0)::BIGINT AS steps_loop,
        coalesce(sum(n) FILTER (WHERE r.limit_model_calls IS NOT DISTINCT FROM c.c_model_calls), 0)::BIGINT AS model_calls_runs,
        coalesce(sum(n) FILTER (WHERE r.limit_model_calls IS NOT DISTINCT FROM c.c_model_calls AND hit = 'model_calls'), 0)::BIGINT AS model_calls_hits,
        coalesce(sum(n) FILTER (WHERE r.limit_model_calls IS NOT DISTINCT FROM c.c_model_calls AND hit = 'model_calls' AND progressing), 0)::BIGINT AS model_calls_prog,
        coalesce(sum(n) FILTER (WHERE r.limit_model_calls IS NOT DISTINCT FROM c.c_model_calls AND hit = 'model_calls' AND NOT progressing), 0)::BIGINT AS model_calls_loop,
        coalesce(sum(n) FILTER (WHERE r.limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls), 0)::BIGINT AS tool_calls_runs,
        coalesce(sum(n) FILTER (WHERE r.limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls AND hit = 'tool_calls'), 0)::BIGINT AS tool_calls_hits,
        coalesce(sum(n) FILTER (WHERE r.limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls AND hit = 'tool_calls' AND progressing), 0)::BIGINT AS tool_calls_prog,
        coalesce(sum(n) FILTER (WHERE r.limit_tool_calls IS NOT DISTINCT FROM c.c_tool_calls AND hit = 'tool_calls' AND NOT progressing), 0)::BIGINT AS tool_calls_loop,
        coalesce(sum(n) FILTER (WHERE r.limit_tokens IS NOT DISTINCT FROM c.c_tokens), 0)::BIGINT AS tokens_runs,
        coalesce(sum(n) FILTER (WHERE r.limit_tokens IS NOT DISTINCT FROM c.c_tokens AND hit = 'tokens'), 0)::BIGINT AS tokens_hits,
        coalesce(sum(n) FILTER (WHERE r.limit_tokens IS NOT DISTINCT FROM c.c_tokens AND hit = 'tokens' AND progressing), 0)::BIGINT AS tokens_prog,
        coalesce(sum(n) FILTER (WHERE r.limit_tokens IS NOT DISTINCT FROM c.c_tokens AND hit = 'tokens' AND NOT progressing), 0)::BIGINT AS tokens_loop,
        coalesce(sum(n) FILTER (WHERE r.limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd), 0)::BIGINT AS cost_usd_runs,
        coalesce(sum(n) FILTER (WHERE r.limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd AND hit = 'cost_usd'), 0)::BIGINT AS cost_usd_hits,
        coalesce(sum(n) FILTER (WHERE r.limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd AND hit = 'cost_usd' AND progressing), 0)::BIGINT AS cost_usd_prog,
        coalesce(sum(n) FILTER (WHERE r.limit_cost_usd IS NOT DISTINCT FROM c.c_cost_usd AND hit = 'cost_usd' AND NOT progressing), 0)::BIGINT AS cost_usd_loop,
        coalesce(sum(n) FILTER (WHERE r.limit_wall_s IS NOT DISTINCT FROM c.c_wall_s), 0)::BIGINT AS wall_s_runs,
        coalesce(sum(n) FILTER (WHERE r.limit_wall_s IS NOT DISTINCT FROM c.c_wall_s AND hit = 'wall_s'), 0)::BIGINT AS wall_s_hits,
        coalesce(sum(n) FILTER (WHERE r.limit_wall_s IS NOT DISTINCT FROM c.c_wall_s AND hit = 'wall_s' AND progressing), 0)::BIGINT AS wall_s_prog,
        coalesce(sum(n) FILTER (WHERE r.limit_wall_s IS NOT DISTINCT FROM c.c_wall_s AND hit = 'wall_s' AND NOT progressing), 0)::BIGINT AS wall_s_loop
    FROM g r JOIN cur c USING (task_type)
    GROUP BY r.task_type
),
succ AS (
    SELECT
        task_type,
        count(*) AS successes_total,
        count(steps) AS steps_succ,
        quantile_cont(steps, [$quantile::DOUBLE, 0.5]) AS steps_qs,
        max(steps) AS steps_max,
        count(model_calls) AS model_calls_succ,
        quantile_cont(model_calls, [$quantile::DOUBLE, 0.5]) AS model_calls_qs,
        max(model_calls) AS model_calls_max,
        count(tool_calls) AS tool_calls_succ,
        quantile_cont(tool_calls, [$quantile::DOUBLE, 0.5]) AS tool_calls_qs,
        max(tool_calls) AS tool_calls_max,
        count(tokens) AS tokens_succ,
        quantile_cont(tokens, [$quantile::DOUBLE, 0.5]) AS tokens_qs,
        max(tokens) AS tokens_max,
        count(cost_usd) AS cost_usd_succ,
        quantile_cont(cost_usd, [$quantile::DOUBLE, 0.5]) AS cost_usd_qs,
        max(cost_usd) AS cost_usd_max,
        count(wall_s) AS wall_s_succ,
        quantile_cont(wall_s, [$quantile::DOUBLE, 0.5]) AS wall_s_qs,
        max(wall_s) AS wall_s_max
    FROM w WHERE ok
    GROUP BY task_type
),
agg AS (
    SELECT
        c.task_type, c.runs_total, coalesce(s.successes_total, 0) AS successes_total,
        c.c_steps AS steps_limit, n.steps_runs, n.steps_hits, n.steps_prog, n.steps_loop,
        coalesce(s.steps_succ, 0) AS steps_succ, s.steps_qs[1] AS steps_q, s.steps_qs[2] AS steps_p50, s.steps_max,
        c.c_model_calls AS model_calls_limit, n.model_calls_runs, n.model_calls_hits, n.model_calls_prog, n.model_calls_loop,
        coalesce(s.model_calls_succ, 0) AS model_calls_succ, s.model_calls_qs[1] AS model_calls_q, s.model_calls_qs[2] AS model_calls_p50, s.model_calls_max,
        c.c_tool_calls AS tool_calls_limit, n.tool_calls_runs, n.tool_calls_hits, n.tool_calls_prog, n.tool_calls_loop,
        coalesce(s.tool_calls_succ, 0) AS tool_calls_succ, s.tool_calls_qs[1] AS tool_calls_q, s.tool_calls_qs[2] AS tool_calls_p50, s.tool_calls_max,
        c.c_tokens AS tokens_limit, n.tokens_runs, n.tokens_hits, n.tokens_prog, n.tokens_loop,
        coalesce(s.tokens_succ, 0) AS tokens_succ, s.tokens_qs[1] AS tokens_q, s.tokens_qs[2] AS tokens_p50, s.tokens_max,
        c.c_cost_usd AS cost_usd_limit, n.cost_usd_runs, n.cost_usd_hits, n.cost_usd_prog, n.cost_usd_loop,
        coalesce(s.cost_usd_succ, 0) AS cost_usd_succ, s.cost_usd_qs[1] AS cost_usd_q, s.cost_usd_qs[2] AS cost_usd_p50, s.cost_usd_max,
        c.c_wall_s AS wall_s_limit, n.wall_s_runs, n.wall_s_hits, n.wall_s_prog, n.wall_s_loop,
        coalesce(s.wall_s_succ, 0) AS wall_s_succ, s.wall_s_qs[1] AS wall_s_q, s.wall_s_qs[2] AS wall_s_p50, s.wall_s_max
    FROM cur c JOIN hits n USING (task_type) LEFT JOIN succ s USING (task_type)
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
