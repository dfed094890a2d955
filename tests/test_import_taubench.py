"""loopwatch import on 200 recorded gpt-4o customer-service conversations (tau-bench airline,
MIT licensed; kept outside the repository and skipped when absent). The figures asserted here
are the worked example of docs/import.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loopwatch.queries.analysis.history import detector_thresholds, imported_replay
from loopwatch.queries.ingest.chatlogs import ChatLogOptions
from loopwatch.queries.ingest.importer import ImportOptions, import_chat_log
from loopwatch.queries.store.database import Store

REPO = Path(__file__).resolve().parents[1]
TAU = REPO.parent / "shared" / "data" / "trajectories" / "tau-bench-gpt-4o-airline.json"

pytestmark = pytest.mark.skipif(not TAU.is_file(), reason=f"{TAU} is not here")

CHAT = ChatLogOptions(
    messages_key="traj", success="reward", task_type="airline", error_prefixes=("Error:",)
)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = tmp_path_factory.mktemp("tau") / "tau.duckdb"
    with Store(db) as store:
        summary = import_chat_log(TAU, store, ImportOptions(chat=CHAT))
    return db, summary


def test_every_conversation_is_imported_with_its_label(imported: Any) -> None:
    db, summary = imported
    records = json.loads(TAU.read_text())
    assert summary.conversations == len(records) == 200
    assert summary.bad == 0 and summary.problems == 0
    successes = sum(1 for r in records if r["reward"] == 1.0)
    assert summary.labels == {"success": successes, "failure": 200 - successes}
    assert (successes, summary.runs, summary.messages) == (84, 1341, 5308)
    with Store(db, read_only=True) as store:
        row = store.connection.execute(
            "SELECT count(DISTINCT conversation_id), count(*), "
            "count(*) FILTER (WHERE task_success), max(model_calls) FROM runs "
            "WHERE source = 'import' AND task_type = 'airline'"
        ).fetchone()
    assert row == (200, 1341, 517, 26.0)


def test_the_replay_decisions_under_the_default_limits(imported: Any) -> None:
    db, summary = imported
    assert summary.decisions == {
        "finish": 1319,
        "max_steps": 18,
        "repeated_tool_call": 2,
        "repeated_error": 1,
        "tool_failures": 1,
    }
    with Store(db, read_only=True) as store:
        (replay,) = imported_replay(store.connection)
    assert (replay.successful_cut, replay.successful_task_runs) == (5, 517)
    assert (replay.failed_stopped, replay.failed_task_runs) == (17, 824)
    assert replay.spend_measure == "model_calls"  # the logs recorded no tokens
    assert replay.saved_spend == 56 + 8 + 4 + 1


def test_detector_false_stop_rates_and_thresholds(imported: Any) -> None:
    db, _ = imported
    with Store(db, read_only=True) as store:
        found = {d.detector: d for d in detector_thresholds(store.connection)}
    assert set(found) == {
        "repeated_action",
        "repeated_tool_call",
        "repeated_error",
        "tool_failures",
        "no_progress",
    }
    for d in found.values():
        assert d.successful_runs == 517 and d.failed_runs == 824
        # no detector stops a run of a successful task at any threshold tried
        assert all(fs == 0.0 for _, fs, _ in d.curve)
    assert found["repeated_error"].suggested == 2
    assert found["repeated_error"].caught_share == pytest.approx(8 / 824)
    assert found["repeated_action"].suggested is None  # a fixed rule


def _report(db: Path, *args: str, fmt: str = "json") -> str:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "loopwatch.dashboard.cli",
            "report",
            "--db",
            str(db),
            "--format",
            fmt,
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_report_gives_recommendations_rates_and_decisions(imported: Any) -> None:
    db, _ = imported
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopwatch.dashboard.cli",
            "report",
            "--db",
            str(db),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout)
    (entry,) = report["task_types"]
    (steps,) = [d for d in entry["limits"] if d["field"] == "max_steps"]
    # max_steps and five detectors judged together: at 2%, 517 runs of successful tasks are 6 short
    assert steps["recommended"] is None and steps["runs_needed"] == 523
    assert steps["verdict"] == "insufficient_data" and "(523 needed" in steps["sentence"]
    assert entry["file"]["runs_needed"] == 523 and entry["file"]["successful_runs"] == 517
    report = json.loads(_report(db, "--cut-target", "0.05"))
    (entry,) = report["task_types"]
    (steps,) = [d for d in entry["limits"] if d["field"] == "max_steps"]
    assert steps["recommended"] == 5 and steps["observed_cut_share"] == pytest.approx(11 / 517)
    assert entry["file"]["cut_share"] <= 0.05 and entry["file"]["backtest"]["cut_share"] <= 0.05
    assert {r["source"] for r in report["sources"]} == {"import"}
    assert report["imported"][0]["successful_cut"] == 5
    assert len(report["detectors"]) == 5


def test_imported_history_is_not_a_lower_bound(tmp_path: Path) -> None:
    limits = tmp_path / "limits.toml"
    limits.write_text("[defaults]\nmax_steps = 3\n")
    db = tmp_path / "tight.duckdb"
    with Store(db) as store:
        from loopwatch.instrumentation.runtime.limits import LimitPolicy

        import_chat_log(TAU, store, ImportOptions(chat=CHAT, limits=LimitPolicy.from_toml(limits)))
    (entry,) = json.loads(_report(db, "--cut-target", "0.05"))["task_types"]
    (steps,) = [d for d in entry["limits"] if d["field"] == "max_steps"]
    # successful runs' p95 (4) is over the limit: too tight, measured on whole recorded runs
    assert steps["verdict"] == "too_tight" and steps["lower_bound"] is False
    assert steps["proposed"] == 5


def test_the_limits_file_carries_the_measured_detector_thresholds(imported: Any) -> None:
    from loopwatch.instrumentation.runtime.limits import LimitPolicy

    db, _ = imported
    text = _report(db, "--cut-target", "0.05", fmt="toml")
    assert "max_same_error = 2  # with the file's other limits: cuts at most 5.0%" in text
    assert "# airline: its 6 limits and thresholds together cut at most 5% of successful" in text
    airline = LimitPolicy.from_toml(text).for_task("airline")
    assert (airline.max_same_call, airline.max_same_error) == (2, 2)
    assert (airline.max_consecutive_failures, airline.max_idle_turns) == (2, 2)
    assert airline.max_steps == 8


def test_backtest_figures_of_every_budget_and_detector(imported: Any) -> None:
    """The table of docs/import.md: fit on the older half of the runs of successful tasks,
    judged on the newest half, every budget the log records and every detector together."""
    from loopwatch.queries.analysis.gateway import run_query
    from loopwatch.queries.analysis.recommend import fit_rows

    db, _ = imported
    with Store(db, read_only=True) as store:
        rows = run_query(store.connection, "success_usage", {}).records()
    assert len(rows) == 517
    on = ["steps", "model_calls", "tool_calls"]
    at2 = fit_rows("airline", rows, on, target=0.02)
    assert len(at2.items) == 8 and at2.fit.needed == 655
    at5 = fit_rows("airline", rows, on, target=0.05)
    assert (at5.fit.values["steps"], at5.fit.values["model_calls"]) == (6.0, 6.0)
    assert at5.fit.values["tool_calls"] == 5.0 and at5.fit.cut_share == pytest.approx(9 / 517)
    assert at5.backtest is not None and at5.backtest.fit.needed == 260
    at10 = fit_rows("airline", rows, on, target=0.1)
    bt = at10.backtest
    assert bt is not None and bt.fit.values["steps"] == 4.0 and bt.fit.values["tool_calls"] == 3.0
    assert bt.fit.cut_share == pytest.approx(6 / 258) and bt.test_runs == 259
    assert bt.test_share == pytest.approx(9 / 259) and bt.test_share < 0.1
    for detector in ("repeated_tool_call", "repeated_error", "tool_failures", "no_progress"):
        assert at10.threshold(detector) == 2 and bt.item_share(detector) == 0.0
