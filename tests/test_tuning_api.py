"""Limits held by serve and task-success feedback, through a real ``loopwatch serve`` process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation.limits import LimitPolicy
from loopwatch.instrumentation.runtime.feedback import FeedbackError, send_feedback
from loopwatch.queries.store.database import Store
from loopwatch.queries.store.feedback import record_feedback
from starlette.requests import Request

from tests.serving import ServeProcess, get, post_traces, request, store_rows
from tests.test_serve import make_spans, protobuf_body

TOML = "[defaults]\nmax_steps = 8\n[task_types.support]\nmax_steps = 12\n"


def call(
    port: int, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, dict[str, str], Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    status, head, raw = request(port, method, path, data, headers)
    return status, head, json.loads(raw) if raw else None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path / "live.duckdb")
    yield process
    process.kill()


def test_limits_versions_apply_shadow_promote_roll_back(server: ServeProcess) -> None:
    port = server.otlp
    status, _, body = call(port, "GET", "/api/v1/limits")
    assert status == 404 and body["version"] == 0
    # Refused: no note, no expected version, a document that does not validate.
    assert call(port, "POST", "/api/v1/limits", {"toml": TOML, "expected_version": 0})[0] == 400
    assert call(port, "POST", "/api/v1/limits", {"toml": TOML, "note": "x"})[0] == 400
    status, _, body = call(
        port,
        "POST",
        "/api/v1/limits",
        {"toml": "[defaults]\nmax_steps = 0\n", "note": "bad", "expected_version": 0},
    )
    assert status == 400 and "max_steps must be a positive integer" in body["error"]
    assert call(port, "GET", "/api/v1/limits")[0] == 404  # nothing was stored
    # Apply, then a second writer who saw version 0 is told the version moved.
    first = {"toml": TOML, "note": "first limits", "who": "ana", "expected_version": 0}
    status, _, v1 = call(port, "POST", "/api/v1/limits", first)
    assert status == 200 and v1["version"] == 1 and v1["who"] == "ana"
    status, _, moved = call(port, "POST", "/api/v1/limits", {**first, "who": "bo"})
    assert status == 409 and moved["current_version"] == 1
    status, head, current = call(port, "GET", "/api/v1/limits")
    assert status == 200 and current["version"] == 1 and current["note"] == "first limits"
    assert LimitPolicy.from_toml(current["toml"]).for_task("support").max_steps == 12
    status, _, _ = request(port, "GET", "/api/v1/limits", headers={"If-None-Match": head["etag"]})
    assert status == 304
    # A shadow candidate, then promoted; the diff says what changed.
    rec = {"task_type": "support", "field": "max_steps", "value": 6}
    status, _, v2 = call(
        port,
        "POST",
        "/api/v1/limits/shadow",
        {
            "task_type": "support",
            "overrides": {"max_steps": 6},
            "note": "try 6",
            "recommendation": rec,
            "expected_version": 1,
        },
    )
    assert status == 200 and v2["version"] == 2 and v2["recommendation"] == rec
    assert v2["changes"] == [
        {"task_type": "support", "field": "max_steps", "before": None, "after": 6, "shadow": True}
    ]
    shadowed = LimitPolicy.from_toml(v2["toml"])
    assert shadowed.for_task("support").max_steps == 12
    assert shadowed.shadow_for("support").max_steps == 6  # type: ignore[union-attr]
    status, _, v3 = call(
        port,
        "POST",
        "/api/v1/limits/promote",
        {"task_type": "support", "note": "it cut nothing", "expected_version": 2},
    )
    assert status == 200 and v3["action"] == "promote"
    promoted = LimitPolicy.from_toml(v3["toml"])
    assert promoted.for_task("support").max_steps == 6 and promoted.shadow_for("support") is None
    assert v3["task_versions"]["support"] == promoted.for_task("support").version
    # Promoting again: no candidate left, refused with the reason, version 3 stays.
    status, _, body = call(
        port, "POST", "/api/v1/limits/promote",
        {"task_type": "support", "note": "again", "expected_version": 3},
    )  # fmt: skip
    assert status == 400 and "no shadow candidate" in body["error"]
    # Roll back to version 1: a new version with version 1's limits.
    status, _, v4 = call(
        port,
        "POST",
        "/api/v1/limits/rollback",
        {"to_version": 1, "note": "back", "expected_version": 3},
    )
    assert status == 200 and v4["version"] == 4 and v4["based_on"] == 1
    assert v4["task_versions"] == v1["task_versions"]
    status, _, history = call(port, "GET", "/api/v1/limits/history")
    assert [v["version"] for v in history["items"]] == [4, 3, 2, 1]
    assert [v["action"] for v in history["items"]] == ["rollback", "promote", "shadow", "apply"]
    status, _, one = call(port, "GET", "/api/v1/limits/2")
    assert status == 200 and one["note"] == "try 6"
    assert call(port, "GET", "/api/v1/limits/99")[0] == 404
    assert call(port, "GET", "/api/v1/spend-alerts")[2] == {"items": []}
    # A dry run shows the diff and stores nothing.
    status, _, dry = call(
        port,
        "POST",
        "/api/v1/limits",
        {"task_type": "support", "values": {"max_steps": 20}, "note": "n", "expected_version": 4,
         "dry_run": True},
    )  # fmt: skip
    assert status == 200 and dry["changes"][0]["after"] == 20
    assert call(port, "GET", "/api/v1/limits")[2]["version"] == 4
    assert server.stop() == 0
    rows = store_rows(server.db, "SELECT version, action FROM limit_versions ORDER BY version")
    assert rows == [(1, "apply"), (2, "shadow"), (3, "promote"), (4, "rollback")]


def test_writes_need_the_write_token(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "t.duckdb", "--token", "read-t", "--write-token", "write-t")
    try:
        port = server.otlp
        apply = {"toml": TOML, "note": "n", "expected_version": 0}
        assert call(port, "POST", "/api/v1/limits", apply)[0] == 401
        assert call(port, "POST", "/api/v1/limits", apply, token="read-t")[0] == 401
        assert call(port, "POST", "/api/v1/runs/r1/feedback", {"success": True})[0] == 401
        assert call(port, "GET", "/api/v1/limits", token="read-t")[0] == 404  # nothing changed
        assert call(port, "GET", "/api/v1/limits")[0] == 401  # reads need the read token
        assert call(port, "POST", "/api/v1/limits", apply, token="write-t")[0] == 200
        assert call(port, "GET", "/api/v1/limits", token="read-t")[2]["version"] == 1
    finally:
        server.kill()
    assert store_rows(tmp_path / "t.duckdb", "SELECT count(*) FROM run_feedback") == [(0,)]


def _request_from(client: str, headers: dict[str, str] | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": raw,
             "client": (client, 5000), "query_string": b""}  # fmt: skip
    return Request(scope)


def test_without_a_token_writes_come_only_from_this_machine() -> None:
    from loopwatch.dashboard.server.tuning_api import write_refusal

    assert write_refusal(_request_from("127.0.0.1"), None) is None
    assert write_refusal(_request_from("::1"), None) is None
    refused = write_refusal(_request_from("10.1.2.3"), None)
    assert refused is not None and refused.status_code == 403
    with_token = write_refusal(_request_from("10.1.2.3", {"Authorization": "Bearer s"}), "s")
    assert with_token is None
    assert write_refusal(_request_from("127.0.0.1"), "s").status_code == 401  # type: ignore[union-attr]


def test_feedback_before_and_after_the_run_twice_and_unknown(server: ServeProcess) -> None:
    port = server.otlp
    url = f"http://127.0.0.1:{port}"
    # Before the run's spans arrive: kept, and joined when they arrive.
    early = send_feedback("early-0", True, comment="right answer", url=url)
    assert early == {"run_id": "early-0", "run_known": False, "changed": True}
    again = send_feedback("early-0", True, comment="right answer", url=url)
    assert again["changed"] is False  # the same label twice: stored once
    assert post_traces(port, protobuf_body(make_spans(3, prefix="early")))[0] == 200
    # After: labels the stored run at once.
    late = send_feedback("early-1", False, score=0.2, url=url)
    assert late["run_known"] is True and late["changed"] is True
    # Bad labels: refused with the reason, nothing stored.
    status, _, body = call(port, "POST", "/api/v1/runs/early-2/feedback", {"success": "yes"})
    assert status == 400 and "success must be true or false" in body["error"]
    with pytest.raises(FeedbackError) as refused:
        send_feedback("early-2", True, score=float("inf"), url=url)
    assert refused.value.status == 400
    # Unknown id: kept, waiting for a run that may come.
    assert send_feedback("never-seen", True, url=url)["run_known"] is False
    status, body_bytes = get(port, "/api/v1/queries/runs_by_source")
    rows = json.loads(body_bytes)["rows"]
    assert (
        sum(r["task_successes"] for r in rows) == 1 and sum(r["task_failures"] for r in rows) == 1
    )
    assert server.stop() == 0
    labels = store_rows(
        server.db, "SELECT run_id, task_success FROM runs WHERE run_id LIKE 'early-%' ORDER BY 1"
    )
    assert labels == [("early-0", True), ("early-1", False), ("early-2", None)]
    kept = store_rows(server.db, "SELECT run_id, success FROM run_feedback ORDER BY 1")
    assert kept == [("early-0", True), ("early-1", False), ("never-seen", True)]


def test_a_label_waiting_in_a_reopened_store_joins_its_run(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        assert record_feedback(store, "early-1", True).run_known is False
    server = ServeProcess(path)  # a new process: the label waits in the file
    try:
        assert post_traces(server.otlp, protobuf_body(make_spans(2, prefix="early")))[0] == 200
    finally:
        assert server.stop() == 0
    assert store_rows(path, "SELECT run_id, task_success FROM runs ORDER BY 1") == [
        ("early-0", None),
        ("early-1", True),
    ]
