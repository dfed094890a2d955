"""Prometheus rules (promtool) and the same repeated_error alert evaluated in SQL."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import require_program
from loopwatch.queries.analysis.alerts import (
    AlertThresholds,
    render_rules,
    repeated_error_alerts,
    rules_path,
)
from loopwatch.queries.ingest.synthetic import SyntheticRun, connect_store, write_runs

RULES_DIR = Path(__file__).resolve().parent.parent / "queries" / "analysis" / "rules"
RULES = RULES_DIR / "loopwatch-rules.yml"
RULES_TEST = RULES_DIR / "loopwatch-rules_test.yml"
T0 = datetime(2026, 11, 1, 0, 0)


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = require_program("promtool")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_rules_file_is_rendered_from_the_thresholds() -> None:
    assert RULES.read_text(encoding="utf-8") == render_rules(AlertThresholds())
    assert Path(str(rules_path())).read_text(encoding="utf-8") == RULES.read_text(encoding="utf-8")


def test_rules_use_the_design_metric_names_and_thresholds() -> None:
    text = RULES.read_text(encoding="utf-8")
    for name in (
        "LoopwatchRepeatedErrorRateRising",
        "LoopwatchLimitHitRateHigh",
        "LoopwatchTelemetryDropping",
        "loopwatch_runs_total",
        'stop_reason="repeated_error"',
        'outcome="limit"',
        "loopwatch_telemetry_dropped_total",
        "[15m]",
        "[6h]",
        ">= 2 *",
        ">= 0.05",
        ">= 20",
        "> 0.1",
        "for: 30m",
    ):
        assert name in text, name


def test_promtool_check_rules() -> None:
    proc = _promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 12 rules found" in proc.stdout


def test_promtool_unit_tests() -> None:
    # rising rate fires; flat high baseline, too few runs stay silent; limit-hit fires and resolves;
    # telemetry drops fire after 5 minutes
    proc = _promtool("test", "rules", RULES_TEST.name, cwd=RULES_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_custom_thresholds_render_valid_rules(tmp_path: Path) -> None:
    t = AlertThresholds(
        short_window="30s", baseline_window="5m", min_runs=5, limit_hit_for="0s", drop_for="1m"
    )
    path = tmp_path / "scaled.yml"
    path.write_text(render_rules(t), encoding="utf-8")
    proc = _promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rate30s" in path.read_text() and "[5m]" in path.read_text()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"short_window": "6h", "baseline_window": "15m"}, "baseline_window must be longer"),
        ({"short_window": "15"}, "invalid duration"),
        ({"repeated_error_factor": 0.5}, "repeated_error_factor must be at least 1"),
        ({"limit_hit_ratio": 2.0}, "ratios must be between 0 and 1"),
        ({"min_runs": -1}, "min_runs must not be negative"),
    ],
)
def test_alert_thresholds_are_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AlertThresholds(**kwargs)


# --- the same alert in SQL ------------------------------------------------------------------
def _per_minute(
    task_type: str, reason: str, minutes: range, per_minute: float
) -> list[SyntheticRun]:
    """``per_minute`` runs a minute (fractions spread out) over ``minutes``."""
    out: list[SyntheticRun] = []
    acc = 0.0
    for m in minutes:
        acc += per_minute
        while acc >= 1:
            acc -= 1
            i = len(out)
            out.append(
                SyntheticRun(
                    run_id=f"{task_type}-{reason}-{m}-{i}",
                    task_type=task_type,
                    started_at=T0 + timedelta(minutes=m, seconds=1 + i % 50),
                    stop_reason=reason,
                )
            )
    return out


@pytest.fixture(scope="module")
def alert_db() -> Any:
    con = duckdb.connect()
    connect_store(con)
    runs: list[SyntheticRun] = []
    # search: repeated_error rises from 1 to 10 a minute over the last 30 minutes -> fires
    runs += _per_minute("search", "completed", range(420), 20)
    runs += _per_minute("search", "repeated_error", range(390), 1)
    runs += _per_minute("search", "repeated_error", range(390, 420), 10)
    # flaky: a flat 25% repeated_error share for 7 hours -> silent
    runs += _per_minute("flaky", "completed", range(420), 15)
    runs += _per_minute("flaky", "repeated_error", range(420), 5)
    # rare: the same rise with under 20 runs in 15 minutes -> silent
    runs += _per_minute("rare", "completed", range(420), 0.4)
    runs += _per_minute("rare", "repeated_error", range(400, 420), 0.5)
    write_runs(con, runs)
    return con


def test_sql_alert_fires_on_a_rising_rate(alert_db: Any) -> None:
    states = {s.task_type: s for s in repeated_error_alerts(alert_db, now=T0 + timedelta(hours=7))}
    s = states["search"]
    assert s.firing
    assert (s.runs_short, s.repeated_short) == (15 * 30, 15 * 10)
    assert s.ratio_short == pytest.approx(1 / 3)
    assert s.ratio_baseline < s.ratio_short / 2
    # half an hour earlier, before the rise, it is silent
    before = {
        x.task_type: x
        for x in repeated_error_alerts(alert_db, now=T0 + timedelta(hours=6, minutes=25))
    }
    assert not before["search"].firing


def test_sql_alert_stays_silent_on_a_flat_high_baseline(alert_db: Any) -> None:
    (s,) = repeated_error_alerts(alert_db, now=T0 + timedelta(hours=7), task_types=["flaky"])
    assert s.ratio_short == pytest.approx(0.25) and s.ratio_baseline == pytest.approx(0.25)
    assert not s.firing


def test_sql_alert_stays_silent_under_the_minimum_run_count(alert_db: Any) -> None:
    (s,) = repeated_error_alerts(alert_db, now=T0 + timedelta(hours=7), task_types=["rare"])
    assert s.runs_short < 20 and s.ratio_short is not None and s.ratio_short >= 0.05
    assert not s.firing
    # the run count is what holds it back: with a lower minimum it fires
    (low,) = repeated_error_alerts(
        alert_db,
        now=T0 + timedelta(hours=7),
        task_types=["rare"],
        thresholds=AlertThresholds(min_runs=5),
    )
    assert low.firing


def test_sql_alert_puts_firing_task_types_first(alert_db: Any) -> None:
    states = repeated_error_alerts(alert_db, now=T0 + timedelta(hours=7))
    assert states[0].task_type == "search"
    assert [s.firing for s in states] == [True, False, False]
