"""The tuning loop's endpoints of ``loopwatch serve`` (docs/serve.md, "Limits held by serve" and
"Task-success feedback"), on the OTLP port next to the read-only API:

- ``GET /api/v1/limits``: the current limits version (``ETag``; ``If-None-Match`` → 304; 404
  before the first version); ``GET /api/v1/limits/history``; ``GET /api/v1/limits/{version}``;
- ``POST /api/v1/limits`` (apply), ``/limits/shadow``, ``/limits/promote``, ``/limits/rollback``:
  a new version if ``expected_version`` is still the current one (else 409, nothing changed);
- ``POST /api/v1/runs/{run_id}/feedback``: a run's task-success label;
- ``GET /api/v1/spend-alerts``: the spend alert per task type (docs/queries.md, "Alerts").

Reads need the read token (``--token``) when there is one. Writes need the write token
(``--write-token``, else ``--token``): 401 without it, nothing changed; with no token at all they
are taken only from loopback clients (403 otherwise).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from typing import Any, Final

from loopwatch.instrumentation.runtime.limits import LimitPolicy
from loopwatch.queries.analysis.limit_edits import promoted, with_shadow, with_values
from loopwatch.queries.analysis.spend_alerts import spend_alerts
from loopwatch.queries.store.database import Store
from loopwatch.queries.store.errors import StoreError
from loopwatch.queries.store.feedback import record_feedback
from loopwatch.queries.store.limit_versions import (
    LimitVersion,
    VersionMoved,
    append_version,
    current_version,
    diff_policies,
    get_version,
    parse_document,
    version_history,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .hosts import is_loopback
from .receiver import authorized

__all__ = ["MAX_WRITE_BODY_BYTES", "routes", "write_refusal"]

MAX_WRITE_BODY_BYTES: Final = 1 << 20
"""Largest body a write endpoint reads (a limits file is a few kilobytes)."""

_Endpoint = Callable[[Request], Awaitable[Response]]


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def write_refusal(request: Request, token: str | None) -> Response | None:
    """Why this request may not write (a 401 or 403 answer), or ``None`` when it may."""
    if token is not None:
        given = request.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return None
        return JSONResponse({"error": "missing or wrong write token"}, status_code=401)
    client = request.client.host if request.client is not None else ""
    if is_loopback(client):
        return None
    return JSONResponse(
        {
            "error": "writes are taken only from this machine when serve has no token: set "
            "--write-token (or --token) to write from elsewhere"
        },
        status_code=403,
    )


async def _body(request: Request) -> dict[str, Any]:
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_WRITE_BODY_BYTES:
            raise _BadRequest(f"body over {MAX_WRITE_BODY_BYTES} bytes", 413)
    try:
        body = json.loads(bytes(data) or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _BadRequest("the body must be a JSON object")
    return body


def _text(body: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = body.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise _BadRequest(f"{key!r} is required (say why: it is kept with the version)")
        return None
    if not isinstance(value, str) or len(value) > 4000:
        raise _BadRequest(f"{key!r} must be a string of at most 4000 characters")
    return value


def _int(body: Mapping[str, Any], key: str) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _BadRequest(f"{key!r} is required: a version number (0 before the first version)")
    return value


def _new_policy(store: Store, action: str, body: Mapping[str, Any]) -> tuple[LimitPolicy, Any]:
    """The policy a write asks for, over the current one; (policy, based_on)."""
    cur = store.cursor()
    try:
        current = current_version(cur)
        target = None
        if action == "rollback":
            target = get_version(cur, _int(body, "to_version"))
    finally:
        cur.close()
    base = current.policy() if current is not None else LimitPolicy()
    task_type = body.get("task_type")
    needs_task = action in ("shadow", "promote") or "values" in body
    if needs_task and (not isinstance(task_type, str) or not task_type):
        raise _BadRequest("'task_type' is required (a task type, or '*' for the defaults)")
    if action == "rollback":
        if target is None:
            raise _BadRequest(f"there is no version {body.get('to_version')!r}", 404)
        return target.policy(), target.version
    if action == "promote":
        return promoted(base, str(task_type)), None
    if action == "shadow":
        overrides = body.get("overrides")
        if overrides is not None and not isinstance(overrides, dict):
            raise _BadRequest("'overrides' must be an object of limit values, or null")
        return with_shadow(base, str(task_type), overrides), None
    if "values" in body:
        values = body["values"]
        if not isinstance(values, dict):
            raise _BadRequest("'values' must be an object of limit values")
        return with_values(base, str(task_type), values), None
    document = body.get("toml", body.get("limits"))
    if document is None:
        raise _BadRequest("give the limits: 'toml' (text), 'limits' (an object) or 'values'")
    return parse_document(document), None


def _write(store: Store, action: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    expected = _int(body, "expected_version")
    note = _text(body, "note", required=True)
    who = _text(body, "who") or "api"
    try:
        policy, based_on = _new_policy(store, action, body)
    except ValueError as exc:
        raise _BadRequest(f"refused, the current version stays: {exc}") from None
    cur = store.cursor()
    try:
        current = current_version(cur)
    finally:
        cur.close()
    changes = [asdict(c) for c in diff_policies(current.policy() if current else None, policy)]
    if body.get("dry_run") is True:
        return 200, {"dry_run": True, "changes": changes, "expected_version": expected}
    try:
        version = append_version(
            store,
            policy,
            expected=expected,
            action=action,
            who=who,
            note=note,
            recommendation=body.get("recommendation"),
            based_on=based_on,
        )
    except VersionMoved as exc:
        return 409, {"error": str(exc), "current_version": exc.current}
    return 200, {**version.to_dict(), "changes": changes}


def _answer(status: int, data: Any, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse(data, status_code=status, headers=dict(headers or {}))


async def _guard(work: Callable[[], Awaitable[Response]]) -> Response:
    try:
        return await work()
    except _BadRequest as exc:
        return _answer(exc.status, {"error": str(exc)})
    except StoreError as exc:
        return _answer(
            503, {"error": f"the store is unavailable, retry: {exc}"}, {"Retry-After": "1"}
        )


def _read(store: Store, work: Callable[[Any], Any]) -> Any:
    cur = store.cursor()
    try:
        return work(cur)
    finally:
        cur.close()


def _feedback(store: Store, writer_token: str | None) -> _Endpoint:
    """``POST /api/v1/runs/{run_id}/feedback``."""

    async def feedback(request: Request) -> Response:
        refused = write_refusal(request, writer_token)
        if refused is not None:
            return refused

        async def work() -> Response:
            body = await _body(request)
            run_id = request.path_params["run_id"]
            try:
                stored = await asyncio.to_thread(
                    record_feedback,
                    store,
                    run_id,
                    body.get("success"),  # type: ignore[arg-type]  # checked there
                    score=body.get("score"),
                    comment=body.get("comment"),
                    source=_text(body, "source"),
                )
            except ValueError as exc:
                raise _BadRequest(str(exc)) from None
            return _answer(200, asdict(stored))

        return await _guard(work)

    return feedback


def routes(store: Store, *, token: str | None, write_token: str | None) -> list[Route]:
    """The tuning endpoints over ``store``: reads need ``token``, writes ``write_token`` (else
    ``token``; with neither, a loopback client)."""
    writer_token = write_token if write_token is not None else token

    def reading(endpoint: _Endpoint) -> _Endpoint:
        async def call(request: Request) -> Response:
            if not authorized(request, token):
                return _answer(401, {"error": "missing or wrong bearer token"})
            return await _guard(lambda: endpoint(request))

        return call

    def writing(action: str) -> _Endpoint:
        async def call(request: Request) -> Response:
            refused = write_refusal(request, writer_token)
            if refused is not None:
                return refused

            async def work() -> Response:
                body = await _body(request)
                status, data = await asyncio.to_thread(_write, store, action, body)
                return _answer(status, data)

            return await _guard(work)

        return call

    async def current(request: Request) -> Response:
        found: LimitVersion | None = await asyncio.to_thread(_read, store, current_version)
        if found is None:
            return _answer(404, {"error": "no limits set yet", "version": 0})
        headers = {"ETag": found.etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == found.etag:
            return Response(status_code=304, headers=headers)
        return _answer(200, found.to_dict(), headers)

    async def spend(request: Request) -> Response:
        found = await asyncio.to_thread(_read, store, spend_alerts)
        return _answer(200, {"items": [asdict(a) for a in found]})

    async def history(request: Request) -> Response:
        found = await asyncio.to_thread(_read, store, version_history)
        return _answer(200, {"items": [v.to_dict() for v in found]})

    async def one(request: Request) -> Response:
        number = request.path_params["version"]
        found = await asyncio.to_thread(_read, store, lambda cur: get_version(cur, number))
        if found is None:
            return _answer(404, {"error": f"there is no version {number}"})
        return _answer(200, found.to_dict())

    prefix = "/api/v1"
    return [
        Route(f"{prefix}/limits", reading(current), methods=["GET"]),
        Route(f"{prefix}/limits", writing("apply"), methods=["POST"]),
        Route(f"{prefix}/limits/history", reading(history), methods=["GET"]),
        Route(f"{prefix}/spend-alerts", reading(spend), methods=["GET"]),
        Route(f"{prefix}/limits/shadow", writing("shadow"), methods=["POST"]),
        Route(f"{prefix}/limits/promote", writing("promote"), methods=["POST"]),
        Route(f"{prefix}/limits/rollback", writing("rollback"), methods=["POST"]),
        Route(f"{prefix}/limits/{{version:int}}", reading(one), methods=["GET"]),
        Route(
            f"{prefix}/runs/{{run_id}}/feedback", _feedback(store, writer_token), methods=["POST"]
        ),
    ]
