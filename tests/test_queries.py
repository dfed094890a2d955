"""The query gateway and the named SQL queries, on real DuckDB files."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest
from loopwatch.instrumentation import semconv
from loopwatch.queries.analysis.gateway import (
    QueryFailedError,
    QueryGateway,
    QueryParameterError,
    QueryTimeoutError,
    UnknownQueryError,
    parse_duration,
    parse_spec,
    query_names,
    query_spec,
    run_query,
    run_spec,
)
from loopwatch.queries.ingest.synthetic import (
    SyntheticRun,
    SyntheticSpan,
    connect_store,
    generate_fleet,
    write_runs,
    write_spans,
)
from loopwatch.queries.store.rollups import ensure_rollup_tables, roll_up

END = datetime(2026, 11, 1, 12, 0, 0)

# Parameters the queries without defaults need.
REQUIRED: dict[str, dict[str, Any]] = {
    "usage_histogram": {"budget": "steps"},
    "what_if": {"task_type": "tight", "budget": "steps", "candidates": [5, 10]},
    "run_steps": {"run_id": "nope"},
    "run_by_id": {"id": "nope"},
    "usage_range": {"task_type": "tight", "budget": "steps"},
    "usage_values": {"task_type": "tight", "budget": "steps"},
    "usage_sketch": {"measure": "steps"},
}


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("fleet") / "fleet.duckdb"
    truth = generate_fleet(path, seed=3, end=END, spans=True, runs_per_type=200)
    with duckdb.connect(str(path)) as writer:  # as serve does: the long-window queries read these
        roll_up(writer, END + timedelta(days=1))
    con = duckdb.connect(str(path), read_only=True)
    yield con, truth
    con.close()


def _empty() -> Any:
    con = duckdb.connect()
    connect_store(con)
    ensure_rollup_tables(con)  # a store serve has opened: its rollup tables exist, empty
    return con


def _run(
    rid: str, task_type: str, at: datetime, reason: str = "completed", **kw: Any
) -> SyntheticRun:
    return SyntheticRun(run_id=rid, task_type=task_type, started_at=at, stop_reason=reason, **kw)


# --- catalogue ---------------------------------------------------------------------------------
def test_every_question_of_the_design_has_a_named_query() -> None:
    expected = {
        "stop_reason_mix",
        "limit_hit_rate",
        "usage_distribution",
        "usage_histogram",
        "limit_stats",
        "what_if",
        "wasted_budget",
        "top_call_fingerprints",
        "top_error_fingerprints",
        "tool_error_rates",
        "run_steps",
        "limit_changes",
        "repeated_error_alert",
        "repeated_error_trend",
        "detector_replay",
        "recent_runs",
        "task_types",
        "usage_range",
    }
    assert expected <= set(query_names())
    for name in query_names():
        spec = query_spec(name)
        assert spec.description, name
        # every user-facing filter is a declared parameter, never formatted into the text
        assert "{" not in spec.sql and "%s" not in spec.sql, name


def test_sql_literals_match_the_semantic_conventions() -> None:
    # SQL cannot import semconv; pin the names it spells out instead.
    assert semconv.OP_EXECUTE_TOOL == "execute_tool"
    assert semconv.OP_INVOKE_AGENT == "invoke_agent"
    assert "'execute_tool'" in query_spec("tool_error_rates").sql
    assert semconv.BUDGETS == ("steps", "model_calls", "tool_calls", "tokens", "cost_usd", "wall_s")


@pytest.mark.parametrize("name", query_names())
def test_every_query_runs_on_an_empty_store(name: str) -> None:
    con = _empty()
    res = run_query(con, name, REQUIRED.get(name))
    assert res.columns
    assert res.truncated is False
    assert res.elapsed_ms >= 0
    if name == "what_if":
        assert [r[0] for r in res.rows] == [5.0, 10.0]
    elif name == "usage_range":
        assert res.rows == [(0, None, None)]
    else:
        assert res.rows == []


@pytest.mark.parametrize("name", query_names())
def test_every_query_runs_on_a_fleet(name: str, fleet_db: Any) -> None:
    con, _ = fleet_db
    params = dict(REQUIRED.get(name, {}))
    if name in ("repeated_error_alert", "spend_alert"):
        params["now"] = END
    res = run_query(con, name, params)
    # the fleet has no imported runs and no shadow limits: tests/test_import*.py, test_shadow.py
    # limit_change_side names no task type and version by default: no runs, no row
    if name not in (
        "run_steps", "run_by_id", "import_replay", "import_detectors", "shadow_limits",
        "limit_change_side",
    ):  # fmt: skip
        assert res.rows, name


# --- gateway errors ---------------------------------------------------------------------------
def test_unknown_query_names_the_known_ones() -> None:
    with pytest.raises(
        UnknownQueryError, match=r"unknown query 'stop_reasons'; known queries: .*stop_reason_mix"
    ):
        run_query(_empty(), "stop_reasons")


@pytest.mark.parametrize(
    "name", ["../schema", "schema", "STOP_REASON_MIX", "stop_reason_mix.sql", "", "a/b"]
)
def test_query_names_cannot_reach_other_files(name: str) -> None:
    with pytest.raises(UnknownQueryError):
        query_spec(name)


def test_unknown_parameter_lists_what_the_query_takes() -> None:
    with pytest.raises(
        QueryParameterError,
        match=r"query 'stop_reason_mix': unknown parameter 'task_type'; "
        r"it takes: since, until, task_types",
    ):
        run_query(_empty(), "stop_reason_mix", {"task_type": "x"})


def test_missing_required_parameter() -> None:
    with pytest.raises(
        QueryParameterError, match=r"query 'run_steps': parameter 'run_id' is required"
    ):
        run_query(_empty(), "run_steps")


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        (
            "stop_reason_mix",
            {"task_types": "tight"},
            "parameter 'task_types' must be a list, got 'tight'",
        ),
        ("stop_reason_mix", {"task_types": ["a", 3]}, "must be a list of strings"),
        (
            "stop_reason_mix",
            {"since": "yesterday"},
            "parameter 'since' must be an ISO 8601 timestamp",
        ),
        ("stop_reason_mix", {"since": 1700000000}, "parameter 'since' must be a datetime"),
        ("limit_hit_rate", {"bucket_s": 0}, "parameter 'bucket_s' must be at least 1, got 0"),
        ("limit_hit_rate", {"bucket_s": True}, "parameter 'bucket_s' must be an integer"),
        ("limit_hit_rate", {"bucket_s": 60.5}, "parameter 'bucket_s' must be an integer"),
        ("limit_stats", {"quantile": 1.5}, "parameter 'quantile' must be at most 1"),
        ("limit_stats", {"quantile": math.nan}, "parameter 'quantile' must be a finite number"),
        (
            "usage_histogram",
            {"budget": "steps; DROP TABLE runs"},
            "parameter 'budget' must be one of steps",
        ),
        (
            "what_if",
            {"task_type": "t", "budget": "steps", "candidates": [1, math.inf]},
            "must be a finite number",
        ),
        ("run_steps", {"run_id": "a\x00b"}, "without NUL characters"),
    ],
)
def test_bad_parameters_get_clear_errors(name: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(QueryParameterError, match=message.replace("(", r"\(").replace("[", r"\[")):
        run_query(_empty(), name, params)


def test_row_cap_truncates_and_says_so(fleet_db: Any) -> None:
    con, _ = fleet_db
    full = run_query(con, "recent_runs", {"top_n": 50})
    assert len(full) == 50 and not full.truncated
    capped = run_query(con, "recent_runs", {"top_n": 50}, max_rows=7)
    assert len(capped) == 7 and capped.truncated
    assert capped.rows == full.rows[:7]
    with pytest.raises(QueryParameterError, match="max_rows must be at least 1"):
        run_query(con, "recent_runs", max_rows=0)


def test_row_cap_from_the_environment(fleet_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    con, _ = fleet_db
    monkeypatch.setenv("LOOPWATCH_QUERY_MAX_ROWS", "3")
    res = run_query(con, "recent_runs")
    assert len(res) == 3 and res.truncated


def test_a_query_past_its_time_limit_is_interrupted_and_the_connection_still_works() -> None:
    con = _empty()
    slow = parse_spec("slow", "-- slow: never ends\nSELECT count(*) FROM range(1000000000000) a")
    with pytest.raises(QueryTimeoutError, match=r"query 'slow' was interrupted after 0.2 s"):
        run_spec(con, slow, timeout_s=0.2)
    assert run_query(con, "task_types").rows == []


def test_sql_errors_are_wrapped_with_the_query_name() -> None:
    con = duckdb.connect()  # no schema at all
    with pytest.raises(QueryFailedError, match=r"query 'stop_reason_mix' failed: .*runs"):
        run_query(con, "stop_reason_mix")


def test_gateway_object_passes_keyword_parameters(fleet_db: Any) -> None:
    con, truth = fleet_db
    gw = QueryGateway(con, max_rows=2)
    res = gw.run("task_types")
    assert len(res) == 2 and res.truncated
    res = gw.run("stop_reason_mix", task_types=["sparse"], max_rows=100)
    assert {r["task_type"] for r in res.records()} == {"sparse"}
    assert sum(res.column("runs")) == truth.task_types["sparse"].runs


def test_parse_duration() -> None:
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("250ms") == timedelta(milliseconds=250)
    for bad in ("", "15", "m", "1h;DROP", "-5m", "1 h", "1y"):
        with pytest.raises(ValueError, match=r"invalid duration .*: use a number and a unit"):
            parse_duration(bad)
    for zero in ("0s", "0ms", "0h0m"):
        with pytest.raises(ValueError, match=r"invalid duration .*: must be longer than zero"):
            parse_duration(zero)
    assert parse_duration("36500d") == timedelta(days=36_500)
    for huge in ("36501d", "99999999d", "99999999999999999999d", "1" + "0" * 400 + "w"):
        with pytest.raises(ValueError, match=r"at most 36500d \(100 years\)"):
            parse_duration(huge)


# --- injection ----------------------------------------------------------------------------------
NASTY = [
    "x' OR '1'='1",
    "'; DROP TABLE runs; --",
    'a"b',
    "tight') OR TRUE --",
    "\\'",
    "$since",
    "?",
]


def test_task_types_with_quotes_and_sql_match_only_themselves(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    runs = [
        _run(f"r{i}", name, END - timedelta(minutes=i)) for i, name in enumerate(["tight", *NASTY])
    ]
    write_runs(path, runs)
    con = duckdb.connect(str(path))
    for name in NASTY:
        res = run_query(con, "stop_reason_mix", {"task_types": [name]})
        assert [r["task_type"] for r in res.records()] == [name]
        res = run_query(con, "what_if", {"task_type": name, "budget": "steps", "candidates": [1]})
        assert len(res) == 1
    res = run_query(
        con, "stop_reason_mix", {"task_types": ["x' OR '1'='1", "'; DROP TABLE runs; --"]}
    )
    assert len(res) == 2
    assert run_query(con, "stop_reason_mix", {"task_types": ["nobody"]}).rows == []
    assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == len(NASTY) + 1


def test_time_windows_cannot_carry_sql() -> None:
    con = _empty()
    for bad in ("2026-01-01' OR '1'='1", "2026-01-01; DROP TABLE runs"):
        with pytest.raises(QueryParameterError):
            run_query(con, "stop_reason_mix", {"since": bad})
    assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == 0


# --- time handling -------------------------------------------------------------------------------
def test_window_bounds_are_utc_and_half_open() -> None:
    con = _empty()
    write_runs(
        con,
        [
            _run("a", "t", END - timedelta(hours=2)),
            _run("b", "t", END),
            _run("c", "t", END + timedelta(hours=1)),
        ],
    )
    res = run_query(con, "stop_reason_mix", {"since": END - timedelta(hours=2), "until": END})
    assert res.column("runs") == [1]  # since inclusive, until exclusive
    # An aware timestamp means the same instant, whatever its zone (and the session's).
    con.execute("SET TimeZone = 'Asia/Shanghai'")
    plus8 = timezone(timedelta(hours=8))
    aware = (END - timedelta(hours=2)).replace(tzinfo=UTC).astimezone(plus8)
    res = run_query(con, "stop_reason_mix", {"since": aware, "until": END.replace(tzinfo=UTC)})
    assert res.column("runs") == [1]
    assert res.params["since"] == END - timedelta(hours=2)
    res = run_query(con, "stop_reason_mix", {"since": (END - timedelta(hours=2)).isoformat()})
    assert res.column("runs") == [3]


# --- the queries' numbers ----------------------------------------------------------------------
def test_stop_reason_mix_counts_and_shares(fleet_db: Any) -> None:
    con, truth = fleet_db
    recs = run_query(con, "stop_reason_mix").records()
    for name, tt in truth.task_types.items():
        mine = [r for r in recs if r["task_type"] == name]
        assert sum(r["runs"] for r in mine) == tt.runs
        assert math.isclose(sum(r["share"] for r in mine), 1.0)
        assert sum(r["runs"] for r in mine if r["outcome"] == "success") == tt.successes
        assert sum(r["runs"] for r in mine if r["outcome"] == "limit") == tt.limit_hits


def test_limit_hit_rate_buckets_by_hand() -> None:
    con = _empty()
    t0 = datetime(2026, 11, 1, 10, 0)
    runs = [
        _run("a", "t", t0 + timedelta(minutes=5), "max_steps", limit_name="steps"),
        _run("b", "t", t0 + timedelta(minutes=10)),
        _run("c", "t", t0 + timedelta(minutes=20), "timeout"),  # limit_name from the stop reason
        _run("d", "t", t0 + timedelta(minutes=70)),
        _run("e", "u", t0 + timedelta(minutes=70), "repeated_error"),
    ]
    write_runs(con, runs)
    recs = run_query(con, "limit_hit_rate", {"bucket_s": 3600}).records()
    got = {
        (r["bucket"].hour, r["task_type"], r["limit_name"]): (r["runs"], r["hits"], r["hit_rate"])
        for r in recs
    }
    assert got == {
        (10, "t", "any"): (3, 2, 2 / 3),
        (10, "t", "steps"): (3, 1, 1 / 3),
        (10, "t", "wall_s"): (3, 1, 1 / 3),
        (11, "t", "any"): (1, 0, 0.0),
        (11, "t", "steps"): (1, 0, 0.0),
        (11, "t", "wall_s"): (1, 0, 0.0),
        (11, "u", "any"): (1, 0, 0.0),
    }


def test_usage_distribution_by_hand() -> None:
    con = _empty()
    steps = [1, 2, 3, 4, 10]
    write_runs(con, [_run(f"r{i}", "t", END, steps=s, tokens=s * 100) for i, s in enumerate(steps)])
    recs = {r["budget"]: r for r in run_query(con, "usage_distribution").records()}
    assert set(recs) == {"steps", "tokens"}  # budgets nobody recorded are left out
    s = recs["steps"]
    assert (s["runs"], s["mean"], s["p50"], s["max"]) == (5, 4.0, 3.0, 10.0)
    assert math.isclose(s["p95"], 4 + 0.8 * 6)  # linear interpolation between 4 and 10
    hist = run_query(con, "usage_histogram", {"budget": "steps", "bins": 5}).records()
    assert [(h["bin"], h["runs"]) for h in hist] == [(0, 1), (1, 2), (2, 1), (4, 1)]


def test_wasted_budget_counts_only_runs_that_did_not_succeed() -> None:
    con = _empty()
    write_runs(
        con,
        [
            _run("a", "t", END, tokens=100, cost_usd=1.0),
            _run("b", "t", END, "max_steps", tokens=300, cost_usd=3.0),
            _run(
                "c", "t", END, tokens=600, cost_usd=6.0, task_success=False
            ),  # loop done, task failed
        ],
    )
    recs = run_query(con, "wasted_budget").records()
    got = {r["stop_reason"]: (r["runs"], r["tokens"], r["cost_share"]) for r in recs}
    assert got == {"completed": (1, 600.0, 0.6), "max_steps": (1, 300.0, 0.3)}


def _tool(
    run: str, i: int, fp: str, *, result: str = "r", error: str | None = None
) -> SyntheticSpan:
    t = int(END.replace(tzinfo=UTC).timestamp() * 1e9) + i * 1_000_000
    return SyntheticSpan(
        trace_id=run.ljust(32, "0"),
        span_id=f"{run}{i}".ljust(16, "0"),
        name="execute_tool read_file",
        start_ns=t,
        end_ns=t + 500_000,
        operation="execute_tool",
        run_id=run,
        task_type="t",
        step=i,
        tool_name="read_file",
        tool_status="error" if error else "ok",
        tool_fingerprint=fp,
        result_fingerprint=result,
        error_code=error,
        error_fingerprint=f"read_file:{error}" if error else None,
    )


def test_fingerprint_and_tool_queries_by_hand() -> None:
    con = _empty()
    spans = [
        _tool("r1", 1, "A"),
        _tool("r1", 2, "A"),  # same call, same result: no new information
        _tool("r1", 3, "A", result="r2"),  # same call, new result
        _tool("r1", 4, "B", error="NOT_FOUND"),
        _tool("r2", 1, "A"),
        _tool("r2", 2, "B", error="NOT_FOUND"),
        _tool("r2", 3, "B", error="NOT_FOUND"),
        _tool("r2", 4, "C"),
    ]
    write_spans(con, spans)
    # the guard's own count of repeated (call, result) pairs: r3 repeated nothing, so it is skipped
    write_runs(
        con, [_run(r, "t", END, max_same_call=m) for r, m in (("r1", 2), ("r2", 2), ("r3", 1))]
    )
    write_spans(con, [_tool("r3", 1, "A"), _tool("r3", 2, "A")])
    calls = run_query(con, "top_call_fingerprints").records()
    # r1 read A twice with the same result (the third A brought a new one); r2 hit B's error twice
    got = [
        (c["tool_fingerprint"], c["repeated_calls"], c["repeats"], c["runs"], c["max_in_one_run"])
        for c in calls
    ]
    assert got == [("A", 2, 1, 1, 2), ("B", 2, 1, 1, 2)]
    errors = run_query(con, "top_error_fingerprints").records()
    assert [
        (e["error_fingerprint"], e["errors"], e["runs"], e["max_in_one_run"]) for e in errors
    ] == [("read_file:NOT_FOUND", 3, 2, 2)]
    tools = run_query(con, "tool_error_rates").records()
    assert [
        (t["tool_name"], t["calls"], t["errors"], t["error_rate"], t["top_error_code"])
        for t in tools
    ] == [("read_file", 10, 3, 3 / 10, "NOT_FOUND")]
    steps = run_query(con, "run_steps", {"run_id": "r2"}).records()
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert [s["error_code"] for s in steps] == [None, "NOT_FOUND", "NOT_FOUND", None]


def test_run_steps_on_generated_spans_follow_the_run(fleet_db: Any) -> None:
    con, _ = fleet_db
    run = run_query(
        con, "recent_runs", {"task_types": ["looping"], "stop_reasons": ["max_steps"], "top_n": 1}
    ).records()[0]
    steps = run_query(con, "run_steps", {"run_id": run["run_id"]}).records()
    assert steps[0]["operation"] == "invoke_agent" and steps[0]["stop_reason"] == "max_steps"
    step_spans = [s for s in steps if s["name"].startswith("step ")]
    assert [s["step"] for s in step_spans] == list(range(1, int(run["steps"]) + 1))
    assert step_spans[-1]["guard_decision"] == "max_steps"


def test_limit_changes_split_runs_by_limits_version() -> None:
    con = _empty()
    runs = [
        _run(
            f"old{i}",
            "t",
            END - timedelta(hours=5, minutes=i),
            "max_steps" if i % 2 else "completed",
            limit_steps=5,
            limits_version="v1",
            steps=5,
        )
        for i in range(10)
    ]
    runs += [
        _run(
            f"new{i}",
            "t",
            END - timedelta(hours=1, minutes=i),
            limit_steps=10,
            limits_version="v2",
            steps=6,
        )
        for i in range(10)
    ]
    write_runs(con, runs)
    recs = run_query(con, "limit_changes").records()
    assert [(r["limits_version"], r["runs"], r["limit_share"], r["limit_steps"]) for r in recs] == [
        ("v1", 10, 0.5, 5.0),
        ("v2", 10, 0.0, 10.0),
    ]


def test_recent_runs_filters(fleet_db: Any) -> None:
    con, truth = fleet_db
    recs = run_query(con, "recent_runs", {"outcomes": ["limit"], "top_n": 100000}).records()
    assert len(recs) == sum(t.limit_hits for t in truth.task_types.values())
    starts = [r["started_at"] for r in recs]
    assert starts == sorted(starts, reverse=True)
