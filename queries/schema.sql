-- loopwatch store, schema version 1. The store refuses files with another version.
-- Times: *_ns are Unix nanoseconds; started_at is the same instant as a UTC TIMESTAMP for charts.

CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER NOT NULL,
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE TABLE IF NOT EXISTS spans (
    trace_id            VARCHAR NOT NULL,   -- 32 hex digits
    span_id             VARCHAR NOT NULL,   -- 16 hex digits
    parent_span_id      VARCHAR,
    name                VARCHAR NOT NULL,
    kind                VARCHAR NOT NULL,   -- INTERNAL, CLIENT, ...
    start_ns            BIGINT NOT NULL,
    end_ns              BIGINT NOT NULL,
    status_code         VARCHAR NOT NULL,   -- UNSET, OK, ERROR
    status_message      VARCHAR,
    service             VARCHAR,
    -- typed copies of the attributes every chart reads
    operation           VARCHAR,            -- gen_ai.operation.name
    run_id              VARCHAR,
    task_type           VARCHAR,
    step                INTEGER,            -- loopwatch.step
    model               VARCHAR,            -- gen_ai.request.model
    tool_name           VARCHAR,            -- gen_ai.tool.name
    tool_call_id        VARCHAR,
    tool_status         VARCHAR,            -- loopwatch.tool.status
    tool_fingerprint    VARCHAR,
    result_fingerprint  VARCHAR,
    error_type          VARCHAR,            -- error.type
    error_code          VARCHAR,
    error_fingerprint   VARCHAR,
    guard_decision      VARCHAR,
    stop_reason         VARCHAR,
    outcome             VARCHAR,
    limit_name          VARCHAR,            -- loopwatch.limit
    limits_version      VARCHAR,
    input_tokens        BIGINT,
    output_tokens       BIGINT,
    cost_usd            DOUBLE,
    max_utilization     DOUBLE,
    attributes          JSON,               -- every other attribute
    events              JSON,               -- [{name, time_ns, attributes}]
    PRIMARY KEY (trace_id, span_id)
);

-- One row per run, filled at ingest from the run span (invoke_agent). What every chart reads.
CREATE TABLE IF NOT EXISTS runs (
    run_id              VARCHAR PRIMARY KEY,
    trace_id            VARCHAR,
    span_id             VARCHAR,
    parent_run_id       VARCHAR,
    conversation_id     VARCHAR,
    service             VARCHAR,
    agent_name          VARCHAR,
    task_type           VARCHAR NOT NULL,
    started_at          TIMESTAMP NOT NULL,
    start_ns            BIGINT NOT NULL,
    end_ns              BIGINT NOT NULL,
    stop_reason         VARCHAR NOT NULL,
    outcome             VARCHAR NOT NULL,
    limit_name          VARCHAR,            -- which budget, when outcome = 'limit'
    explanation         VARCHAR,
    limits_version      VARCHAR,
    -- usage at the end (loopwatch.budget.<b>.used)
    steps               DOUBLE,
    model_calls         DOUBLE,
    tool_calls          DOUBLE,
    tokens              DOUBLE,
    cost_usd            DOUBLE,
    wall_s              DOUBLE,
    input_tokens        BIGINT,
    output_tokens       BIGINT,
    -- limits the run ran under (loopwatch.budget.<b>.limit); NULL = off
    limit_steps         DOUBLE,
    limit_model_calls   DOUBLE,
    limit_tool_calls    DOUBLE,
    limit_tokens        DOUBLE,
    limit_cost_usd      DOUBLE,
    limit_wall_s        DOUBLE,
    max_utilization     DOUBLE,
    -- progress evidence (loopwatch.progress.*)
    recent_new_calls    INTEGER,
    max_same_error      INTEGER,
    max_same_call       INTEGER,
    task_success        BOOLEAN,            -- recorded task label (import); NULL when unknown
    source              VARCHAR NOT NULL DEFAULT 'otel'   -- otel | import
);
