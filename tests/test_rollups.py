"""Rollups (docs/store.md, *Rollups*; docs/queries.md, *Long windows*): the figures long-window
charts read from rollups equal the same figures computed from raw runs on the same data, and the
merged quantile sketches keep their stated relative error."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from loopwatch.queries.analysis.gateway import run_query
from loopwatch.queries.analysis.longwindow import has_rollups, runs_daily, usage_quantiles
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store import Store
from loopwatch.queries.store.rollups import (
    GAMMA,
    RELATIVE_ERROR,
    bin_value,
    roll_up,
    sketch_quantile,
)

END = datetime(2026, 1, 31, 15, 30)


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 days of runs ending mid-day (today partly in runs only), rolled up, then more runs of
    today arriving after the roll-up."""
    db = tmp_path_factory.mktemp("rollups") / "month.duckdb"
    with Store(db) as store:
        generate_fleet(
            store.connection, runs_per_type=1500, seed=3, end=END, span=timedelta(days=30)
        )
        roll_up(store.connection, END + timedelta(minutes=5))
        roll_up(store.connection, END + timedelta(minutes=5))  # twice: idempotent
        generate_fleet(
            store.connection,
            runs_per_type=60,
            seed=4,
            end=END + timedelta(hours=2),
            span=timedelta(hours=2),
        )
    return db


def _rows(result: object) -> list[tuple[object, ...]]:
    rows = result.rows
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows]


def test_rollup_figures_equal_the_raw_figures(month: Path) -> None:
    with Store(month, read_only=True) as store:
        con = store.connection
        assert has_rollups(con)
        rolled = runs_daily(con, since="2026-01-01", until="2026-02-01")
        raw = run_query(
            con,
            "runs_daily_raw",
            {"since": "2026-01-01", "until": "2026-02-01"},
            max_rows=1_000_000,
        )
        [(day_rows,)] = con.execute(
            "SELECT count(*) FROM rollup_runs WHERE period = 'day'"
        ).fetchall()
    assert rolled.columns == raw.columns
    assert _rows(rolled) == _rows(raw)
    assert sum(rolled.column("runs")) == 4 * 1500 + 12 + 4 * 60 + 12
    assert day_rows > 0  # the whole days did come from the rollups


def test_quantiles_from_sketches_are_within_their_error(month: Path) -> None:
    with Store(month, read_only=True) as store:
        con = store.connection
        got = usage_quantiles(con, "tokens", (0.5, 0.95, 0.99))
        for task_type, qs in got.items():
            values = sorted(
                v
                for (v,) in con.execute(
                    "SELECT tokens::DOUBLE FROM runs WHERE task_type = ? AND tokens IS NOT NULL",
                    [task_type],
                ).fetchall()
            )
            for q, estimate in qs.items():
                true = values[max(1, math.ceil(q * len(values))) - 1]
                assert estimate is not None
                assert abs(estimate - true) <= RELATIVE_ERROR * true + 1e-9, (task_type, q)


def test_a_store_without_rollups_answers_the_same(month: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain.duckdb"
    with Store(plain) as store:
        generate_fleet(
            store.connection, runs_per_type=1500, seed=3, end=END, span=timedelta(days=30)
        )
        generate_fleet(
            store.connection,
            runs_per_type=60,
            seed=4,
            end=END + timedelta(hours=2),
            span=timedelta(hours=2),
        )
    with Store(plain, read_only=True) as a, Store(month, read_only=True) as b:
        assert not has_rollups(a.connection)
        assert _rows(runs_daily(a.connection)) == _rows(runs_daily(b.connection))
        assert usage_quantiles(a.connection, "wall_s") == usage_quantiles(b.connection, "wall_s")


def test_the_sketch_keeps_its_relative_error() -> None:
    rng = random.Random(0)
    values = [rng.lognormvariate(3, 2) for _ in range(20_000)] + [0.0] * 50
    parts: list[dict[int, int]] = [{}, {}, {}]
    for i, v in enumerate(values):  # three sketches, merged by adding counts
        b = bin_value(v)
        parts[i % 3][b] = parts[i % 3].get(b, 0) + 1
    merged: dict[int, int] = {}
    for part in parts:
        for b, n in part.items():
            merged[b] = merged.get(b, 0) + n
    values.sort()
    for q in (0.001, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0):
        true = values[max(1, math.ceil(q * len(values))) - 1]
        estimate = sketch_quantile(merged, q)
        assert estimate is not None
        assert abs(estimate - true) <= RELATIVE_ERROR * true + 1e-12, q
    assert pytest.approx(1.01 / 0.99) == GAMMA


def test_rollups_outlive_the_runs_retention_deletes(tmp_path: Path) -> None:
    """Runs deleted by retention leave their minutes, hours and days rolled up: a later pass
    never rolls a minute again whose runs may be gone."""
    from loopwatch.queries.store.retention import Retention, RetentionPolicy

    with Store(tmp_path / "r.duckdb") as store:
        con = store.connection
        generate_fleet(con, runs_per_type=200, seed=5, end=END, span=timedelta(hours=3))
        roll_up(con, END + timedelta(minutes=5))
        before = con.execute(
            "SELECT period, sum(runs) FROM rollup_runs GROUP BY 1 ORDER BY 1"
        ).fetchall()
        keep = 3600.0  # runs kept one hour: the two older hours are deleted
        later = END + timedelta(minutes=30)
        epoch_s = (later - datetime(1970, 1, 1)).total_seconds()
        Retention(RetentionPolicy(keep_spans_s=None, keep_runs_s=keep)).run_until_done(
            con, now_s=epoch_s
        )
        [(left,)] = con.execute("SELECT count(*) FROM runs").fetchall()
        assert 0 < left < 4 * 200 + 12
        roll_up(con, later, runs_kept_s=keep)
        after = con.execute(
            "SELECT period, sum(runs) FROM rollup_runs GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert after == before
