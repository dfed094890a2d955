"""``columnar.shared_reads``: one command reads a query's columns once (``loopwatch report`` fits
the same successful runs twice), and only inside the block."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
from loopwatch.queries.analysis.columnar import run_query_columns, shared_reads
from loopwatch.queries.ingest.synthetic import SyntheticRun, write_runs

START = datetime(2026, 11, 1)


def _runs(first: int, n: int) -> list[SyntheticRun]:
    return [
        SyntheticRun(
            run_id=f"r{i}",
            task_type="support",
            started_at=START + timedelta(minutes=i),
            stop_reason="completed",
            steps=i % 7 + 1,
        )
        for i in range(first, first + n)
    ]


def _usage(con: duckdb.DuckDBPyConnection) -> list[str]:
    return list(run_query_columns(con, "success_usage", {}, max_rows=1_000).columns["run_id"])


def test_a_repeated_read_inside_the_block_is_the_first_ones() -> None:
    con = duckdb.connect(":memory:")
    write_runs(con, _runs(0, 5))
    with shared_reads():
        first = run_query_columns(con, "success_usage", {}, max_rows=1_000)
        write_runs(con, _runs(5, 3))  # a second read would see these: it is not made
        again = run_query_columns(con, "success_usage", {}, max_rows=1_000)
        assert again.columns["run_id"] == first.columns["run_id"] == [f"r{i}" for i in range(5)]
        first.columns["cost_per_min"] = [None] * 5  # callers add columns (attach_rates)
        assert (
            "cost_per_min"
            not in run_query_columns(con, "success_usage", {}, max_rows=1_000).columns
        )
        # other parameters, another row cap: read anew
        assert len(run_query_columns(con, "success_usage", {}, max_rows=999).columns["run_id"]) == 8
        other = duckdb.connect(":memory:")
        write_runs(other, _runs(100, 1))
        assert _usage(other) == ["r100"]  # another connection: its own read
    assert _usage(con) == [f"r{i}" for i in range(8)]  # outside the block: every call reads


def test_outside_the_block_nothing_is_kept() -> None:
    con = duckdb.connect(":memory:")
    write_runs(con, _runs(0, 2))
    assert _usage(con) == ["r0", "r1"]
    write_runs(con, _runs(2, 1))
    assert _usage(con) == ["r0", "r1", "r2"]
