"""The feedback a run gets after it ended, where a user looks for it (docs/queries.md, "Task
success on live runs"): the label decides "successful" and the promise of every recommendation
says which labels it used; the score is shown (Runs page, a run's header, the before/after report),
never deciding success."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard.app.pagekit import md_text
from loopwatch.queries.analysis.recommend import file_dict, file_summary
from loopwatch.queries.analysis.recommendations import analyze_file, analyze_limits
from loopwatch.queries.store.database import Store
from loopwatch.queries.store.feedback import record_feedback

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app" / "streamlit_app.py"


def write_runs(store: Store, n: int, *, at: datetime | None = None) -> list[str]:
    """``n`` completed runs under max_steps = 10, one step to ``n`` steps, a minute apart."""
    start = at or datetime.now() - timedelta(hours=2)
    rows, ids = [], []
    for i in range(n):
        started = start + timedelta(seconds=30 * i)
        ns = int(started.timestamp() * 1e9)
        ids.append(f"run-{i}")
        rows.append((f"run-{i}", "support", started, ns, ns + 10**9, "completed", "success",
                     float(1 + i % 9), 10.0, 0.01, 5.0))  # fmt: skip
    store.connection.executemany(
        "INSERT INTO runs (run_id, task_type, started_at, start_ns, end_ns, stop_reason, outcome,"
        " steps, limit_steps, cost_usd, wall_s) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )
    return ids


def steps_promise(store: Store) -> str:
    (steps,) = [a for a in analyze_limits(store.cursor()) if a.budget == "steps"]
    return steps.promise


def test_recommendations_say_which_labels_decided_successful(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    ids = write_runs(store, 400)
    assert "(from 400 successful runs (successful = completed: no task-success labels)" in (
        steps_promise(store)
    )
    for run_id in ids[:120]:
        record_feedback(store, run_id, True, score=0.9)
    for run_id in ids[120:130]:  # labelled failed: no longer successful at all
        record_feedback(store, run_id, False, score=0.1)
    promise = steps_promise(store)
    assert "390 successful runs (120 labelled successful, 270 completed unlabelled)" in promise
    # the file judged as a whole says it too (report, TOML header, Limits page)
    (fit,) = analyze_file(store.cursor())[1].values()
    summary = file_summary(file_dict(fit))
    assert "of the 390 fit on (120 labelled successful, 270 completed unlabelled)" in summary
    for run_id in ids[130:]:
        record_feedback(store, run_id, True)
    assert "390 successful runs (all labelled successful)" in steps_promise(store)
    store.close()


def test_the_runs_page_shows_each_runs_label_and_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamlit.testing.v1 import AppTest

    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        write_runs(store, 5)
        record_feedback(store, "run-4", True, score=0.8, comment="right answer",
                        source="evaluator")  # fmt: skip
        record_feedback(store, "run-3", False)
    monkeypatch.setenv("LOOPWATCH_DB", str(path))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["window"] = "7d"
    at.query_params["run"] = "run-4"
    at.switch_page("app_pages/runs.py")
    at.run()
    assert not at.exception, at.exception
    table: Any = at.dataframe[0].value
    by_id = {r: (s, f) for r, s, f in zip(table["run id"], table["task success"], table["score"],
                                          strict=True)}  # fmt: skip
    assert by_id["run-4"] == ("yes", 0.8) and by_id["run-3"][0] == "no"
    assert by_id["run-0"][0] == "" and by_id["run-0"][1] != by_id["run-0"][1]  # blank, NaN
    header = "\n".join(str(m.value) for m in at.markdown)
    shown = "task succeeded (label) · score 0.8 · from evaluator · “right answer”"
    assert md_text(shown) in header
