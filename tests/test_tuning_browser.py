"""The Limits page's tuning loop in a real headless Chromium, against a real ``loopwatch serve``:
apply a recommendation with a note, confirm, see the new version (also through the API), apply a
hand edit, roll back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store.database import Store

from tests.browsing import chromium_page, main_text, opened, settled
from tests.serving import ServeProcess, get


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServeProcess]:
    path = tmp_path / "live.duckdb"
    with Store(path) as store:
        generate_fleet(store.connection, runs_per_type=60, seed=1, kinds=("tight", "loose"))
    server = ServeProcess(path, ui=True)
    yield server
    server.kill()


@pytest.fixture
def page(served: ServeProcess) -> Iterator[Any]:
    with chromium_page() as page:
        yield page


def committed(page: Any, field: Any, text: str) -> None:
    # A text input reaches the script when it loses focus, and the rerun that follows redraws
    # the buttons: a click sent during that rerun can be lost. Commit first, then click.
    field.fill(text)
    field.press("Tab")
    settled(page)


def current(served: ServeProcess) -> dict[str, Any]:
    status, body = get(served.otlp, "/api/v1/limits")
    assert status == 200, body
    data: dict[str, Any] = json.loads(body)
    return data


def test_apply_a_recommendation_confirm_see_it_then_roll_back(
    served: ServeProcess, page: Any
) -> None:
    url = f"http://127.0.0.1:{served.ports['ui']}/limits?window=7d"
    errors = opened(page, url, ready="h1", shows="Change a limit")
    committed(page, page.get_by_label("Note").first, "the recommendation, from the chart")
    page.get_by_role("button", name="Review the change").click()
    main_text(page, "Review: apply")
    page.get_by_role("button", name="Confirm").click()
    main_text(page, "Version 1 (apply) is now current.")
    first = current(served)
    assert first["version"] == 1 and first["note"] == "the recommendation, from the chart"
    assert first["recommendation"] is not None  # the form was prefilled with it
    # A hand edit: version 2.
    settled(page)
    value = page.get_by_label("Value")
    value.fill("3")
    value.press("Tab")
    committed(page, page.get_by_label("Note").first, "hand edit")
    page.get_by_role("button", name="Review the change").click()
    main_text(page, "Review: apply")
    page.get_by_role("button", name="Confirm").click()
    main_text(page, "Version 2 (apply) is now current.")
    assert current(served)["version"] == 2
    # Roll back to version 1 (the only earlier one, picked by default).
    settled(page)
    committed(page, page.get_by_label("Note").last, "3 was too tight")
    page.get_by_role("button", name="Review the roll back").click()
    main_text(page, "Review: rollback")
    page.get_by_role("button", name="Confirm").click()
    main_text(page, "Version 3 (rollback) is now current.")
    back = current(served)
    assert back["version"] == 3 and back["based_on"] == 1
    assert back["task_versions"] == first["task_versions"]
    assert errors == []
