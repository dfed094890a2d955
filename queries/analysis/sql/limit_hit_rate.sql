-- limit_hit_rate: share of runs stopped by each limit, per task type and time bucket. One row per (bucket, task_type, limit_name) for every limit the task type hit in the window, plus limit_name 'any' (all limits together); buckets with runs but no hits show 0.
-- @param since TIMESTAMP = NULL          window start, inclusive (UTC); NULL = no bound
-- @param until TIMESTAMP = NULL          window end, exclusive (UTC); NULL = no bound
-- @param task_types VARCHAR[] = NULL     only these task types; NULL = all
-- @param bucket_s BIGINT = 3600 min 1    bucket width in seconds
WITH w AS (
    SELECT
        time_bucket(to_seconds($bucket_s::BIGINT), started_at) AS bucket,
        task_type,
        CASE WHEN outcome = 'limit' THEN coalesce(limit_name, CASE stop_reason
            WHEN 'max_steps' THEN 'steps' WHEN 'max_model_calls' THEN 'model_calls'
            WHEN 'max_tool_calls' THEN 'tool_calls' WHEN 'token_budget' THEN 'tokens'
            WHEN 'cost_budget' THEN 'cost_usd' WHEN 'timeout' THEN 'wall_s' ELSE 'other' END) END AS hit
    FROM runs
    WHERE ($since::TIMESTAMP IS NULL OR started_at >= $since::TIMESTAMP)
      AND ($until::TIMESTAMP IS NULL OR started_at < $until::TIMESTAMP)
      AND ($task_types::VARCHAR[] IS NULL OR list_contains($task_types::VARCHAR[], task_type))
),
per_bucket AS (
    SELECT bucket, task_type, count(*) AS runs, count(hit) AS hits
    FROM w GROUP BY ALL
),
per_limit AS (
    SELECT bucket, task_type, hit AS limit_name, count(*) AS hits
    FROM w WHERE hit IS NOT NULL GROUP BY ALL
),
names AS (
    SELECT DISTINCT task_type, limit_name FROM per_limit
)
SELECT b.bucket, b.task_type, 'any' AS limit_name, b.runs, b.hits, b.hits / b.runs AS hit_rate
FROM per_bucket b
UNION ALL
SELECT b.bucket, b.task_type, n.limit_name, b.runs, coalesce(l.hits, 0) AS hits,
       coalesce(l.hits, 0) / b.runs AS hit_rate
FROM per_bucket b
JOIN names n USING (task_type)
LEFT JOIN per_limit l ON l.bucket = b.bucket AND l.task_type = b.task_type AND l.limit_name = n.limit_name
ORDER BY bucket, task_type, limit_name;
