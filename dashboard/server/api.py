"""The read-only JSON API of ``loopwatch serve`` (on the OTLP port, under ``/api/v1/``).

Every answer comes through the query gateway (named ``.sql`` files, parameters checked and bound,
rows capped, a time limit), on a fresh cursor of the live store:

- ``GET /api/v1/queries``: the named queries and their parameters;
- ``GET /api/v1/queries/{name}?param=value``: one named query (list parameters repeat the key or
  separate values by commas; ``TIMESTAMP`` parameters take ISO 8601 or a duration back from now,
  like ``6h``; ``max_rows`` caps the rows, at most ``DEFAULT_MAX_ROWS`` of the gateway);
- ``GET /api/v1/runs``: ``recent_runs``; ``GET /api/v1/hit-rates``: ``limit_hit_rate``;
- ``GET /api/v1/recommendations``: limit verdicts and recommendations (``since``, ``task_types``);
- ``GET /api/v1/alerts``: the repeated_error alert per task type.

A bad parameter answers 400 with the gateway's message, an unknown query 404, a query past its
time limit 504. Answers are ``{"query", "columns", "rows", "truncated", "elapsed_ms"}`` (rows as
objects) or, for recommendations and alerts, ``{"items": [...]}``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from loopwatch.queries.analysis.alerts import repeated_error_alerts
from loopwatch.queries.analysis.gateway import (
    DEFAULT_MAX_ROWS,
    QueryError,
    QueryParameterError,
    QueryTimeoutError,
    UnknownQueryError,
    parse_duration,
    query_names,
    query_spec,
    run_query,
)
from loopwatch.queries.analysis.recommendations import analyze_limits
from loopwatch.queries.store.database import Store
from loopwatch.queries.store.errors import StoreError, is_fatal_store_error
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["PREFIX", "routes"]

PREFIX: Final = "/api/v1"

_ALIASES: Final = {"runs": "recent_runs", "hit-rates": "limit_hit_rate"}


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat() + "Z"
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date | timedelta | Decimal):
        return str(value) if not isinstance(value, Decimal) else float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def _bad(message: str, status: int = 400) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def _unavailable(message: str) -> Response:
    return JSONResponse(
        {"error": f"the store is unavailable, retry later: {message}"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


def _convert(name: str, kind: str, values: list[str]) -> Any:
    """One query-string parameter as the gateway's type (the gateway then checks it)."""
    if kind.endswith("[]"):
        items = [item for v in values for item in v.split(",") if item != ""]
        if kind == "DOUBLE[]":
            return [_number(name, item, float) for item in items]
        return items
    if len(values) > 1:
        raise QueryParameterError(f"parameter {name!r} given {len(values)} times")
    text = values[0]
    if kind == "TIMESTAMP":
        try:
            return datetime.now(UTC) - parse_duration(text)
        except ValueError:
            return text  # an ISO 8601 timestamp, checked by the gateway
    if kind == "BIGINT":
        return _number(name, text, int)
    if kind == "DOUBLE":
        return _number(name, text, float)
    if kind == "BOOLEAN":
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise QueryParameterError(f"parameter {name!r} must be true or false, got {text!r}")
        return lowered == "true"
    return text


def _number(name: str, text: str, kind: Callable[[str], Any]) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise QueryParameterError(f"parameter {name!r} must be a number, got {text!r}") from None


def _params(request: Request, types: Mapping[str, str]) -> tuple[dict[str, Any], int]:
    """The query string as typed parameters, and the row cap asked for."""
    grouped: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        grouped.setdefault(key, []).append(value)
    max_rows = DEFAULT_MAX_ROWS
    if "max_rows" in grouped:
        max_rows = _number("max_rows", grouped.pop("max_rows")[-1], int)
        if not 1 <= max_rows <= DEFAULT_MAX_ROWS:
            raise QueryParameterError(f"max_rows must be between 1 and {DEFAULT_MAX_ROWS}")
    params: dict[str, Any] = {}
    for key, values in grouped.items():
        kind = types.get(key)
        if kind is None:
            takes = ", ".join(types) or "no parameters"
            raise QueryParameterError(f"unknown parameter {key!r}; it takes: {takes}")
        params[key] = _convert(key, kind, values)
    return params, max_rows


async def _guarded(work: Callable[[], Any]) -> Response:
    try:
        return JSONResponse(_json_value(await asyncio.to_thread(work)))
    except UnknownQueryError as exc:
        return _bad(str(exc), 404)
    except QueryParameterError as exc:
        return _bad(str(exc))
    except QueryTimeoutError as exc:
        return _bad(str(exc), 504)
    except StoreError as exc:  # closed to be reopened (docs/serve.md, "When the store fails")
        return _unavailable(str(exc))
    except QueryError as exc:
        if is_fatal_store_error(exc.__cause__ or exc):
            return _unavailable(str(exc))
        return _bad(str(exc), 500)


def routes(store: Store, reader: Callable[[], Any] | None = None) -> list[Route]:
    """The API's routes over ``store``, read through cursors of ``reader`` (default the store's)."""
    api = _Endpoints(reader or store.cursor)
    return [
        Route(f"{PREFIX}/queries", api.index),
        Route(f"{PREFIX}/queries/{{name}}", api.named),
        Route(f"{PREFIX}/recommendations", api.recommendations),
        Route(f"{PREFIX}/alerts", api.alerts),
        *(Route(f"{PREFIX}/{path}", _fixed(api.named, path)) for path in _ALIASES),
    ]


class _Endpoints:
    """The API's endpoints; each reads through a fresh cursor, closed when its answer is built."""

    def __init__(self, cursor: Callable[[], Any]) -> None:
        self._cursor = cursor

    def _read(self, work: Callable[[Any], Any]) -> Any:
        cur = self._cursor()
        try:
            return work(cur)
        finally:
            cur.close()

    async def index(self, request: Request) -> Response:
        def work() -> Any:
            return {"queries": [_describe(name) for name in query_names()]}

        return await _guarded(work)

    async def named(self, request: Request) -> Response:
        name = request.path_params["name"]
        name = _ALIASES.get(name, name)
        if name not in query_names():
            return _bad(f"unknown query {name!r}; see {PREFIX}/queries", 404)
        spec = query_spec(name)
        try:
            params, max_rows = _params(request, {p.name: p.type for p in spec.params})
        except QueryParameterError as exc:
            return _bad(f"query {name!r}: {exc}")

        def work() -> Any:
            result = self._read(lambda cur: run_query(cur, name, params, max_rows=max_rows))
            return {
                "query": name,
                "params": result.params,
                "columns": list(result.columns),
                "rows": result.records(),
                "truncated": result.truncated,
                "elapsed_ms": round(result.elapsed_ms, 3),
            }

        return await _guarded(work)

    async def recommendations(self, request: Request) -> Response:
        try:
            params, _ = _params(
                request, {"since": "TIMESTAMP", "until": "TIMESTAMP", "task_types": "VARCHAR[]"}
            )
        except QueryParameterError as exc:
            return _bad(f"recommendations: {exc}")

        def work() -> Any:
            found = self._read(
                lambda cur: analyze_limits(
                    cur,
                    since=_timestamp(params.get("since")),
                    until=_timestamp(params.get("until")),
                    task_types=params.get("task_types"),
                )
            )
            return {"items": [asdict(a) for a in found]}

        return await _guarded(work)

    async def alerts(self, request: Request) -> Response:
        try:
            params, _ = _params(request, {"task_types": "VARCHAR[]"})
        except QueryParameterError as exc:
            return _bad(f"alerts: {exc}")

        def work() -> Any:
            found = self._read(
                lambda cur: repeated_error_alerts(cur, task_types=params.get("task_types"))
            )
            return {"items": [asdict(a) for a in found]}

        return await _guarded(work)


def _describe(name: str) -> dict[str, Any]:
    spec = query_spec(name)
    return {
        "name": name,
        "description": spec.description,
        "params": [
            {"name": p.name, "type": p.type, "required": p.required, "doc": p.doc}
            for p in spec.params
        ],
    }


def _fixed(endpoint: Callable[[Request], Any], name: str) -> Callable[[Request], Any]:
    async def call(request: Request) -> Response:
        request.scope.setdefault("path_params", {})["name"] = name
        response: Response = await endpoint(request)
        return response

    return call


def _timestamp(value: Any) -> datetime | None:
    """A parameter converted by :func:`_convert` as a naive-UTC datetime, checked."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise QueryParameterError(f"not an ISO 8601 timestamp: {value!r}") from None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    assert isinstance(value, datetime)
    return value
