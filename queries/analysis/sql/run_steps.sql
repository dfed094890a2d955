-- run_steps: one run's spans in order (the run, its steps, model calls and tool calls) with what each did and what the guard decided.
-- @param run_id VARCHAR                  the run's loopwatch.run_id
SELECT
    make_timestamp_ns(start_ns)::TIMESTAMP AS started_at,
    (end_ns - start_ns) / 1e6 AS duration_ms,
    name,
    operation,
    step,
    model,
    tool_name,
    tool_status,
    tool_fingerprint,
    result_fingerprint,
    error_code,
    error_fingerprint,
    guard_decision,
    stop_reason,
    input_tokens,
    output_tokens,
    cost_usd,
    max_utilization,
    status_code,
    span_id,
    parent_span_id
FROM spans
WHERE run_id = $run_id::VARCHAR
ORDER BY start_ns, CASE operation WHEN 'invoke_agent' THEN 0 ELSE 1 END, step NULLS FIRST, span_id;
