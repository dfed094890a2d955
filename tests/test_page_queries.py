"""The lean queries the dashboard pages run (docs/dashboard.md, "Speed") give what the queries
they replace gave: the same rows, markers, counts and fits, on real DuckDB stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from loopwatch.dashboard.app.charts import limit_change_markers
from loopwatch.queries.analysis.gateway import SUCCESSFUL_RUN_SQL, query_spec, run_query
from loopwatch.queries.analysis.history import error_classification
from loopwatch.queries.analysis.recommend import fit_limits, read_usage
from loopwatch.queries.analysis.recommendations import analyze_file
from loopwatch.queries.analysis.spend_rate import spend_rate_advice
from loopwatch.queries.ingest.synthetic import (
    SyntheticRun,
    SyntheticSpan,
    connect_store,
    generate_fleet,
    write_runs,
    write_spans,
)

END = datetime(2026, 11, 1, 12, 0, 0)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path: Path = tmp_path_factory.mktemp("pages") / "fleet.duckdb"
    generate_fleet(path, seed=5, end=END, spans=True, runs_per_type=150)
    con = duckdb.connect(str(path), read_only=True)
    yield con
    con.close()


def _rates_store() -> Any:
    """Live runs of two task types, successful and not, one second apart (no ties)."""
    con = duckdb.connect()
    connect_store(con)
    runs = [
        SyntheticRun(
            run_id=f"{t}-{i}",
            task_type=t,
            started_at=END - timedelta(seconds=i),
            stop_reason="completed" if i % 3 else "max_steps",
            wall_s=30.0 + i,
            cost_usd=0.01 * (i % 7 + 1),
            tokens=100.0 * (i % 5 + 1),
            steps=3.0,
        )
        for t in ("a", "b")
        for i in range(40)
    ]
    write_runs(con, runs)
    return con


def test_spend_rate_keeps_the_newest_runs_per_task_type_and_side_as_numbering_all_did() -> None:
    con = _rates_store()
    for max_runs in (1, 3, 10, 1000):
        got = run_query(con, "spend_rate", {"max_runs": max_runs}, max_rows=10_000).rows
        # the definition: number every run of the window per (task type, side), newest first
        want = con.execute(
            f"""SELECT run_id FROM runs WHERE source <> 'import' AND wall_s IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY task_type, {SUCCESSFUL_RUN_SQL}
                                       ORDER BY start_ns DESC) <= ?""",
            [max_runs],
        ).fetchall()
        assert sorted(r[0] for r in got) == sorted(r[0] for r in want), max_runs
        assert len(got) == min(max_runs, 13) * 2 + min(max_runs, 27) * 2


def test_tool_result_errors_are_tool_error_rates_summed_per_task_type_in_their_order(
    fleet: Any,
) -> None:
    for params in ({}, {"since": END - timedelta(days=2)}, {"task_types": ["looping"]}):
        per_tool = run_query(fleet, "tool_error_rates", params, max_rows=100_000).rows
        summed: dict[str, list[int]] = {}
        for task_type, _tool, calls, errors, *_ in per_tool:
            pair = summed.setdefault(task_type, [0, 0])
            pair[0] += calls
            pair[1] += errors
        rows = run_query(fleet, "tool_result_errors", params).rows
        assert rows == [(k, c, e) for k, (c, e) in summed.items()]
        assert any(e for _, _, e in rows) or "looping" not in str(params)
        assert run_query(fleet, "tool_result_errors", {**params, "replayed": True}).rows == []
        assert error_classification(fleet, **params) == {}  # live runs only: nothing replayed


def test_error_classification_judges_replayed_runs_only() -> None:
    """A task type whose replayed tool results never matched an error rule is flagged; a live
    one whose tools never raised is not, and a live run's results do not hide an imported
    run's in a task type that has both."""
    con = duckdb.connect()
    connect_store(con)
    kinds = {"imp": ("import", "ok"), "live": ("otel", "ok"), "mixed": ("import", "ok")}
    runs = [
        SyntheticRun(
            run_id=f"{t}{i}", task_type=t, started_at=END, stop_reason="completed", source=source
        )
        for t, (source, _) in kinds.items()
        for i in range(3)
    ] + [
        SyntheticRun(
            run_id=f"mixed-live{i}",
            task_type="mixed",
            started_at=END,
            stop_reason="completed",
            source="otel",
        )
        for i in range(3)
    ]
    spans = [
        SyntheticSpan(
            trace_id=f"t{r.run_id}",
            span_id=f"s{r.run_id}{j}",
            name="execute_tool",
            start_ns=j,
            end_ns=j + 1,
            operation="execute_tool",
            run_id=r.run_id,
            task_type=r.task_type,
            tool_name="bash",
            tool_status="error" if r.run_id.startswith("mixed-live") else "ok",
        )
        for r in runs
        for j in range(400)
    ]
    write_runs(con, runs)
    write_spans(con, spans)
    found = error_classification(con)
    assert {k: (c.tool_results, c.errors) for k, c in found.items()} == {
        "imp": (1200, 0),
        "mixed": (1200, 0),  # the live runs' 1,200 errors are not the imported runs' rules
    }
    assert found["imp"].almost_none and found["mixed"].almost_none


def test_limit_change_points_give_the_markers_limit_changes_gave() -> None:
    con = duckdb.connect()
    connect_store(con)
    runs = [
        SyntheticRun(
            run_id=f"{t}{v}{i}",
            task_type=t,
            started_at=END - timedelta(hours=6 - v, minutes=i),
            stop_reason="completed",
            limit_steps=5.0 * v if (t, v) != ("y", 3) else None,
            limit_tokens=1000.0 if v == 3 else None,
            limits_version=f"v{v}" if v > 1 else None,
            steps=4.0,
        )
        for t in ("x", "y")
        for v in (1, 2, 3)
        for i in range(5)
    ]
    write_runs(con, runs)
    for params in ({}, {"task_types": ["y"]}, {"since": END - timedelta(hours=4, minutes=2)}):
        full = run_query(con, "limit_changes", params).records()
        lean = run_query(con, "limit_change_points", params).records()
        markers = limit_change_markers(lean)
        assert markers and markers == limit_change_markers(full)
    (y_off,) = [
        m
        for m in limit_change_markers(run_query(con, "limit_change_points").records())
        if m["task_type"] == "y" and "off" in m["label"]
    ]
    assert y_off["label"] == "max_steps 10 steps → off, max_tokens off → 1,000 tokens"
    assert "quantile_cont" not in query_spec("limit_change_points").sql


def _fit_view(fits: dict[str, Any]) -> dict[str, Any]:
    return {t: (f.items, dict(f.fit.values), f.fit.cut_share, f.backtest) for t, f in fits.items()}


def test_successful_runs_read_once_serve_the_file_and_its_spend_rate_fit(fleet: Any) -> None:
    since = END - timedelta(days=3)
    usage = read_usage(fleet, since=since)
    columns = {k: list(v) for k, v in usage.columns.items()}
    on = {"tight": ["steps", "tokens"], "loose": ["steps"]}
    assert _fit_view(fit_limits(fleet, on, since=since, usage=usage)) == _fit_view(
        fit_limits(fleet, on, since=since)
    )
    analyses, fits = analyze_file(fleet, since=since, include_off=True, usage=usage)
    again, fits_again = analyze_file(fleet, since=since, include_off=True)
    assert analyses == again and _fit_view(fits) == _fit_view(fits_again)
    advice = spend_rate_advice(fleet, on, since=since, usage=usage)
    assert advice == spend_rate_advice(fleet, on, since=since)
    assert advice and all(a.successful_runs > 0 for a in advice)
    # the fits add each run's spend rate to their own copy: the columns read stay as read
    assert usage.columns == columns and "cost_per_min" not in usage.columns
