"""The tuning loop on the Limits page, under Streamlit's AppTest over a real live store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard.app.source import clear_live_store, set_live_store, set_write_token
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store.database import Store
from loopwatch.queries.store.limit_versions import current_version, version_history

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app" / "streamlit_app.py"


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    store = Store(tmp_path / "live.duckdb")
    generate_fleet(store.connection, runs_per_type=60, seed=1, kinds=("tight", "loose"))
    monkeypatch.setenv("LOOPWATCH_DB", str(tmp_path / "elsewhere.duckdb"))
    set_live_store(store)
    yield store
    clear_live_store()
    store.close()


def limits_page() -> Any:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=90)
    at.query_params["window"] = "7d"
    at.switch_page("app_pages/limits.py")
    at.run()
    assert not at.exception, at.exception
    return at


def by_label(elements: Any, label: str) -> Any:
    return next(e for e in elements if e.label == label)


def click(at: Any, label: str) -> None:
    by_label(at.button, label).click()
    at.run()
    assert not at.exception, at.exception


def texts(at: Any) -> str:
    kinds = ("markdown", "success", "error", "info", "caption")
    return "\n".join(str(e.value) for k in kinds for e in getattr(at, k))


def test_apply_with_a_note_confirm_then_roll_back(live: Store) -> None:
    at = limits_page()
    by_label(at.text_input, "Note").input("first served limits")
    click(at, "Review the change")
    assert "Review: apply" in texts(at)
    assert current_version(live.cursor()) is None  # nothing before Confirm
    click(at, "Confirm")
    assert "Version 1 (apply) is now current." in texts(at)
    v1 = current_version(live.cursor())
    assert v1 is not None and v1.note == "first served limits" and v1.who == "dashboard"
    # A hand-edited value, then back to version 1.
    by_label(at.number_input, "Value").set_value(3)
    by_label(at.text_input, "Note").input("hand edit")
    click(at, "Review the change")
    click(at, "Confirm")
    assert "Version 2 (apply) is now current." in texts(at)
    by_label(at.selectbox, "Roll back to version").set_value(1)
    at.text_input(key="rollback-note").input("3 was too tight")
    click(at, "Review the roll back")
    assert "Review: rollback" in texts(at)
    click(at, "Confirm")
    versions = version_history(live.cursor())
    assert [(v.version, v.action, v.based_on) for v in versions][:1] == [(3, "rollback", 1)]
    assert versions[0].task_versions == v1.task_versions
    assert "History of versions" in texts(at)


def test_shadow_then_promote_and_a_cancelled_review_changes_nothing(live: Store) -> None:
    at = limits_page()
    by_label(at.radio, "How").set_value("Shadow first")
    by_label(at.text_input, "Note").input("try it in shadow")
    click(at, "Review the change")
    click(at, "Cancel")
    assert current_version(live.cursor()) is None
    by_label(at.radio, "How").set_value("Shadow first")
    by_label(at.text_input, "Note").input("try it in shadow")
    click(at, "Review the change")
    assert "(shadow candidate)" in str(at.dataframe[-1].value)
    click(at, "Confirm")
    shadowed = current_version(live.cursor())
    assert shadowed is not None and shadowed.action == "shadow" and shadowed.policy().shadow
    task = next(iter(shadowed.policy().shadow))
    assert "Shadow candidates" in texts(at)
    at.text_input(key=f"promote-note-{task}").input("it cut nothing")
    click(at, f"Review promoting {task}")
    click(at, "Confirm")
    final = current_version(live.cursor())
    assert final is not None and final.action == "promote" and not final.policy().shadow


def test_a_write_token_is_asked_for_and_checked(live: Store) -> None:
    set_write_token("s3cret")
    at = limits_page()
    by_label(at.text_input, "Note").input("needs the token")
    click(at, "Review the change")
    by_label(at.text_input, "Write token").input("wrong")
    click(at, "Confirm")
    assert "Wrong write token: nothing changed." in texts(at)
    assert current_version(live.cursor()) is None
    by_label(at.text_input, "Write token").input("s3cret")
    click(at, "Confirm")
    assert current_version(live.cursor()) is not None


def test_overview_marks_each_version_and_opens_its_before_after_report(live: Store) -> None:
    from loopwatch.instrumentation.limits import LimitPolicy
    from loopwatch.queries.store.limit_versions import append_version
    from streamlit.testing.v1 import AppTest

    # The synthetic runs recorded their own limits versions; version 1 changes one task type.
    (task,) = live.connection.execute(
        "SELECT task_type FROM runs GROUP BY 1 ORDER BY 1 LIMIT 1"
    ).fetchone()  # type: ignore[misc]
    policy = LimitPolicy.from_toml(f"[task_types.{task}]\nmax_steps = 4\n")
    append_version(live, policy, expected=0, action="apply", note="tighter", who="ana")
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.query_params["window"] = "7d"
    at.run()
    assert not at.exception, at.exception
    assert by_label(at.selectbox, "Before and after limits version").value == 1
    assert "v1 apply" in texts(at) and "tighter" in texts(at)
    # One table per task type whose limits changed: the one listed, and those the defaults of
    # version 1 changed (they ran under other limits before).
    tables = {str(d.value["task type"][0]): d.value for d in at.dataframe if "figure" in d.value}
    table = tables[task]
    assert list(table["figure"]) == [
        "runs", "hit the limit", "completed", "task success", "feedback score", "spend per run",
        "tokens per run",
    ]  # fmt: skip
    assert table["before"][0] != "0" and table["after"][0] == "0"  # no run under v1 yet


@pytest.fixture
def busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    store = Store(tmp_path / "busy.duckdb")  # enough successful runs to promise a spend rate
    generate_fleet(store.connection, runs_per_type=400, seed=2, kinds=("loose",))
    monkeypatch.setenv("LOOPWATCH_DB", str(tmp_path / "elsewhere.duckdb"))
    set_live_store(store)
    yield store
    clear_live_store()
    store.close()


def test_the_spend_rate_recommendation_is_shown_and_applied_with_a_note(busy: Store) -> None:
    live = busy
    at = limits_page()
    table = next(d.value for d in at.dataframe if "unit" in d.value)
    assert "Spend-rate stop" in texts(at)
    ready = [i for i, v in enumerate(table["recommended"]) if v == v and v is not None]
    assert ready, table
    task, value = str(table["task type"][ready[0]]), float(table["recommended"][ready[0]])
    assert "cuts at most 2% of successful runs" in str(table["promise"][ready[0]])
    at.text_input(key=f"rate-note-{task}").input("stop runaway spend")
    click(at, f"Review setting max_cost_per_min = {value:g} for {task}")
    assert "Review: apply" in texts(at) and "max_cost_per_min" in str(at.dataframe[-1].value)
    click(at, "Confirm")
    version = current_version(live.cursor())
    assert version is not None and version.recommendation["field"] == "max_cost_per_min"
    assert version.policy().for_task(task).max_cost_per_min == pytest.approx(value)
    # now on: the table shows it as current, and its file holds it
    current = next(d.value for d in at.dataframe if "unit" in d.value)
    row = list(current["task type"]).index(task)
    assert float(current["current"][row]) == pytest.approx(value)
