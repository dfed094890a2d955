-- loopwatch store, schema version 5. The store upgrades version 1-4 files when it opens them for
-- writing (Store._migrate) and refuses files with any other version.
-- Times: *_ns are Unix nanoseconds; started_at is the same instant as a UTC TIMESTAMP for charts.
-- Typed columns hold an attribute only when its value has the column's type; otherwise the
-- column is NULL and the raw value is kept in `attributes` (bad input loses nothing).

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
    service             VARCHAR,            -- resource service.name
    -- typed copies of the attributes every chart reads
    operation           VARCHAR,            -- gen_ai.operation.name
    run_id              VARCHAR,            -- loopwatch.run_id
    task_type           VARCHAR,            -- loopwatch.task_type
    step                INTEGER,            -- loopwatch.step
    model               VARCHAR,            -- gen_ai.request.model
    tool_name           VARCHAR,            -- gen_ai.tool.name
    tool_call_id        VARCHAR,            -- gen_ai.tool.call.id
    tool_status         VARCHAR,            -- loopwatch.tool.status (ok | error)
    tool_fingerprint    VARCHAR,            -- loopwatch.tool.fingerprint
    result_fingerprint  VARCHAR,            -- loopwatch.tool.result_fingerprint
    error_type          VARCHAR,            -- error.type
    error_code          VARCHAR,            -- loopwatch.error.code
    error_fingerprint   VARCHAR,            -- loopwatch.error.fingerprint
    guard_decision      VARCHAR,            -- loopwatch.guard.decision
    stop_reason         VARCHAR,            -- loopwatch.stop_reason
    outcome             VARCHAR,            -- loopwatch.outcome
    limit_name          VARCHAR,            -- loopwatch.limit
    limits_version      VARCHAR,            -- loopwatch.limits.version
    input_tokens        BIGINT,             -- gen_ai.usage.input_tokens
    output_tokens       BIGINT,             -- gen_ai.usage.output_tokens
    cost_usd            DOUBLE,             -- loopwatch.usage.cost_usd
    max_utilization     DOUBLE,             -- loopwatch.budget.max_utilization
    attributes          JSON,               -- every other attribute: {"key": value}, '{}' when none
    events              JSON,               -- [{name, time_ns, attributes}], '[]' when none
    -- budget usage at the end of the span (loopwatch.budget.<b>.used / .limit; limit NULL = off)
    used_steps          DOUBLE,
    used_model_calls    DOUBLE,
    used_tool_calls     DOUBLE,
    used_tokens         DOUBLE,
    used_cost_usd       DOUBLE,
    used_wall_s         DOUBLE,
    limit_steps         DOUBLE,
    limit_model_calls   DOUBLE,
    limit_tool_calls    DOUBLE,
    limit_tokens        DOUBLE,
    limit_cost_usd      DOUBLE,
    limit_wall_s        DOUBLE,
    tool_retries        INTEGER             -- loopwatch.tool.retries
);
-- No primary key on spans: the index would cost memory for every span ever stored and halve
-- the ingest rate. A span delivered twice (an OTLP retry after a lost acknowledgment) can
-- appear twice; runs, which every chart reads, never does (see below).

-- One row per run, filled at ingest from the run span (invoke_agent). What every chart reads.
-- A run span stored again (a retried export) replaces its row, and a re-import replaces the runs
-- it imported before: the writers do it (Store.write, the importer), not a primary key. A key's
-- index would live in memory, ~73 bytes per run for as long as the file is open (365 MB at 5M
-- runs), so a long-lived `serve` or a large import would grow with the store.
CREATE TABLE IF NOT EXISTS runs (
    run_id              VARCHAR NOT NULL,       -- loopwatch.run_id (the span id when missing)
    trace_id            VARCHAR,
    span_id             VARCHAR,
    parent_run_id       VARCHAR,
    conversation_id     VARCHAR,
    service             VARCHAR,
    agent_name          VARCHAR,
    task_type           VARCHAR NOT NULL,       -- 'unknown' when the span lacks it
    started_at          TIMESTAMP NOT NULL,
    start_ns            BIGINT NOT NULL,
    end_ns              BIGINT NOT NULL,
    stop_reason         VARCHAR NOT NULL,       -- 'unknown' when the span lacks it
    outcome             VARCHAR NOT NULL,       -- from the stop reason when the span lacks it
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
    source              VARCHAR NOT NULL DEFAULT 'otel',  -- otel | import
    -- version 2: what the replay of an imported run found (loopwatch.replay.*) and what a live
    -- run's shadow limits would have done (loopwatch.shadow.*), so that the history queries
    -- read small typed columns instead of every run span's JSON
    replay_decision             VARCHAR,    -- a stop reason, or 'finish'
    replay_step                 INTEGER,
    replay_saved_tokens         DOUBLE,
    replay_saved_model_calls    DOUBLE,
    peak_repeated_action        INTEGER,    -- each detector's peak evidence over the run
    peak_repeated_tool_call     INTEGER,
    peak_repeated_error         INTEGER,
    peak_tool_failures          INTEGER,
    peak_no_progress            INTEGER,
    shadow_decision             VARCHAR,    -- a stop reason, or 'finish'
    shadow_limits_version       VARCHAR,
    shadow_step                 INTEGER,
    shadow_saved_tokens         DOUBLE,
    shadow_saved_cost_usd       DOUBLE,
    shadow_saved_model_calls    DOUBLE,
    -- version 3: nudges the run's detectors gave before it ended (loopwatch.nudges; NULL: none)
    nudges                      INTEGER,
    -- version 5: the highest spend a minute at the end of one of the run's model calls (spend so
    -- far over time so far, at least a minute; docs/queries.md "Spend rate"), written with the
    -- run by the store's writer (queries/store/spend_peaks.py); 0: no model call recorded it;
    -- NULL: not measured (imported runs, rows written around the writer)
    rate_cost_per_min           DOUBLE,
    rate_tokens_per_min         DOUBLE
);

-- Keys of the OTLP requests `loopwatch serve` committed (a digest of the request body), written in
-- the same transaction as their spans: a request retried after a lost acknowledgement is
-- recognised and answered without storing its spans again. Kept for a retention window.
CREATE TABLE IF NOT EXISTS deliveries (
    key          VARCHAR PRIMARY KEY,
    received_ns  BIGINT NOT NULL
);

-- version 4: the limit sets `loopwatch serve` holds (docs/serve.md, "Limits held by serve"), one
-- row per change, never updated: the current set is the highest version.
CREATE TABLE IF NOT EXISTS limit_versions (
    version         INTEGER PRIMARY KEY,
    action          VARCHAR NOT NULL,   -- apply, shadow, promote, rollback
    document        VARCHAR NOT NULL,   -- the whole limits file as TOML (LimitPolicy.to_toml)
    task_versions   VARCHAR NOT NULL,   -- JSON {task type: loopwatch.limits.version}; "*": defaults
    created_at      TIMESTAMP NOT NULL, -- UTC
    who             VARCHAR,
    note            VARCHAR,
    recommendation  VARCHAR,            -- JSON: the recommendation the change came from, if any
    based_on        INTEGER             -- rollback: the version restored
);

-- version 4: task-success labels that arrive after the run (POST /api/v1/runs/{id}/feedback), one
-- per run id, kept even before the run's spans arrive; copied to runs.task_success.
CREATE TABLE IF NOT EXISTS run_feedback (
    run_id       VARCHAR PRIMARY KEY,
    success      BOOLEAN NOT NULL,
    score        DOUBLE,
    comment      VARCHAR,
    source       VARCHAR,
    received_at  TIMESTAMP NOT NULL     -- UTC, of the latest label
);
