"""The before/after report of a limits change, on a real store file."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from loopwatch.instrumentation.limits import LimitPolicy
from loopwatch.queries.analysis.change_report import change_report
from loopwatch.queries.analysis.gateway import QueryGateway
from loopwatch.queries.analysis.limit_edits import with_values
from loopwatch.queries.store.database import Store
from loopwatch.queries.store.feedback import record_feedback
from loopwatch.queries.store.limit_versions import append_version


def add_runs(
    store: Store, task: str, version: str, at: datetime, n: int, *, limit_every: int,
    cost: float, labels: list[bool | None] | None = None,
) -> None:  # fmt: skip
    rows = []
    for i in range(n):
        started = at + timedelta(seconds=i)
        hit = i % limit_every == 0
        label = labels[i] if labels and i < len(labels) else None
        ns = int(started.timestamp() * 1e9)
        rows.append(
            (f"{task}-{version}-{at.timestamp()}-{i}", task, started, ns, ns + 1,
             "max_steps" if hit else "completed", "limit" if hit else "success",
             version, 3.0, cost, label)
        )  # fmt: skip
    store.connection.executemany(
        "INSERT INTO runs (run_id, task_type, started_at, start_ns, end_ns, stop_reason, outcome,"
        " limits_version, steps, cost_usd, task_success) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )


def test_a_change_report_compares_runs_under_old_and_new_limits(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    v1_policy = LimitPolicy.from_toml("[task_types.support]\nmax_steps = 12\n")
    v1 = append_version(store, v1_policy, expected=0, action="apply", note="start")
    v2_policy = with_values(v1_policy, "support", {"max_steps": 6})
    v2 = append_version(store, v2_policy, expected=1, action="apply", note="tighter")
    # Put the versions in the past, an hour apart, and runs around them.
    t1 = datetime(2026, 1, 1, 10, 0)
    t2 = t1 + timedelta(hours=1)
    store.connection.execute("UPDATE limit_versions SET created_at = ? WHERE version = 1", [t1])
    store.connection.execute("UPDATE limit_versions SET created_at = ? WHERE version = 2", [t2])
    old, new = v1.limits_version_for("support"), v2.limits_version_for("support")
    add_runs(store, "support", old, t1 + timedelta(minutes=5), 40, limit_every=20, cost=0.10,
             labels=[True] * 10 + [False] * 10)  # fmt: skip
    add_runs(store, "support", new, t2 + timedelta(minutes=5), 30, limit_every=5, cost=0.04)
    add_runs(store, "support", old, t2 + timedelta(seconds=1), 3, limit_every=99, cost=1.0)
    add_runs(store, "other", v2.limits_version_for("other"), t2, 10, limit_every=99, cost=0.01)
    # Feedback scores: shown as the mean with how many runs were scored (a label without a score
    # counts as labelled, not scored); a run on neither side adds to neither mean.
    first = f"support-{old}-{(t1 + timedelta(minutes=5)).timestamp()}"
    late = f"support-{old}-{(t2 + timedelta(seconds=1)).timestamp()}-0"
    for i, score in enumerate([0.5, 1.0, 0.0, 0.9, None]):
        record_feedback(store, f"{first}-{30 + i}", True, score=score, source="evaluator")
    record_feedback(store, late, False, score=-5.0)
    report = change_report(QueryGateway(store.cursor()), 2)
    assert report is not None and report.previous is not None
    assert [t.task_type for t in report.tasks] == ["support"]  # "other" did not change
    before, after = report.tasks[0].before, report.tasks[0].after
    assert before.runs == 40 and before.hit_rate == 2 / 40 and before.completed_share == 38 / 40
    assert before.labelled == 25 and before.task_success_rate == 15 / 25
    assert before.scored == 4 and abs((before.mean_score or 0) - 0.6) < 1e-9
    assert abs((before.cost_per_run or 0) - 0.10) < 1e-9
    # Runs that started after the change under the old limits count on neither side.
    assert after.runs == 30 and after.hit_rate == 6 / 30 and after.labelled == 0
    assert after.task_success_rate is None and abs((after.cost_per_run or 0) - 0.04) < 1e-9
    assert after.scored == 0 and after.mean_score is None
    assert change_report(QueryGateway(store.cursor()), 9) is None
    store.close()
