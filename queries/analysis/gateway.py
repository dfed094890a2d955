"""The one gateway every query goes through.

Each question the dashboard, the CLI and the serve API ask is a named ``.sql`` file in
``queries/analysis/sql/``. Its header declares its parameters::

    -- stop_reason_mix: how runs ended, per task type.
    -- @param since TIMESTAMP = NULL          window start, inclusive (UTC)
    -- @param bucket_s BIGINT = 3600 min 1    bucket width in seconds

:func:`run_query` loads the file, checks and binds the parameters (DuckDB ``$name``
parameters, never string formatting), runs it on its own cursor under a time limit
(DuckDB has no statement timeout, so a timer thread calls ``interrupt()``), caps the rows
and times it.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any

from loopwatch.instrumentation.runtime.semconv import BUDGETS
from loopwatch.instrumentation.runtime.settings import env_str

from .fragments import FRAGMENTS, SUCCESSFUL_RUN_SQL
from .timelimit import (
    QueryError,
    QueryFailedError,
    QueryParameterError,
    QueryTimeoutError,
    UnknownQueryError,
    time_limited_cursor,
)

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_TIMEOUT_S",
    "MAX_DURATION",
    "SUCCESSFUL_RUN_SQL",
    "ParamSpec",
    "QueryError",
    "QueryFailedError",
    "QueryGateway",
    "QueryParameterError",
    "QueryResult",
    "QuerySpec",
    "QueryTimeoutError",
    "UnknownQueryError",
    "bind_params",
    "parse_duration",
    "parse_spec",
    "query_names",
    "query_spec",
    "run_query",
    "run_spec",
    "time_limited_cursor",
]

_log = logging.getLogger("loopwatch.queries")

DEFAULT_MAX_ROWS = 10_000
"""Rows returned when the caller names no cap (env ``LOOPWATCH_QUERY_MAX_ROWS``)."""
DEFAULT_TIMEOUT_S = 30.0
"""Seconds a query may run when the caller names no limit (env ``LOOPWATCH_QUERY_TIMEOUT_S``)."""

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")

_PARAM_RE = re.compile(
    r"^--\s*@param\s+(?P<name>[a-z][a-z0-9_]*)\s+(?P<type>[A-Z]+(?:\[\])?)"
    r"(?:\s*=\s*(?P<default>NULL|-?\d+(?:\.\d+)?))?"
    r"(?:\s+min\s+(?P<min>-?\d+(?:\.\d+)?))?"
    r"(?:\s+max\s+(?P<max>-?\d+(?:\.\d+)?))?"
    r"(?:\s+(?P<doc>.*))?$"
)
_TYPES = ("TIMESTAMP", "VARCHAR", "VARCHAR[]", "BIGINT", "DOUBLE", "DOUBLE[]", "BOOLEAN", "BUDGET")
_MAX_LIST = 10_000


# --- specs -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared parameter of a named query."""

    name: str
    type: str
    """One of TIMESTAMP, VARCHAR, VARCHAR[], BIGINT, DOUBLE, DOUBLE[], BOOLEAN, BUDGET."""
    required: bool
    """True when the header gives no default."""
    default: int | float | None = None
    minimum: float | None = None
    maximum: float | None = None
    doc: str = ""


@dataclass(frozen=True, slots=True)
class QuerySpec:
    """A named query: its SQL and what it takes."""

    name: str
    description: str
    """The header's first comment lines."""
    params: tuple[ParamSpec, ...]
    sql: str

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True, slots=True)
class QueryResult:
    """What a query returned."""

    name: str
    """The query's name."""
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    """At most the row cap."""
    elapsed_ms: float
    """Wall time of execute + fetch, in milliseconds."""
    truncated: bool
    """True when the query had more rows than the cap."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The parameters as bound (defaults filled in)."""

    def records(self) -> list[dict[str, Any]]:
        """Rows as dicts keyed by column name."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def column(self, name: str) -> list[Any]:
        """One column's values."""
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def __len__(self) -> int:
        return len(self.rows)


def _sql_dir() -> Any:
    return resources.files("loopwatch.queries.analysis").joinpath("sql")


@cache
def query_names() -> tuple[str, ...]:
    """Every named query, sorted."""
    names = [p.name[:-4] for p in _sql_dir().iterdir() if p.name.endswith(".sql")]
    return tuple(sorted(n for n in names if _NAME_RE.match(n)))


@cache
def query_spec(name: str) -> QuerySpec:
    """The parsed ``.sql`` file of a named query. Raises :class:`UnknownQueryError`."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or name not in query_names():
        known = ", ".join(query_names())
        raise UnknownQueryError(f"unknown query {name!r}; known queries: {known}")
    sql = _sql_dir().joinpath(name + ".sql").read_text(encoding="utf-8")
    return _parse_spec(name, sql)


def _parse_spec(name: str, sql: str) -> QuerySpec:
    description: list[str] = []
    params: list[ParamSpec] = []
    for raw in sql.splitlines():
        line = raw.strip()
        if not line.startswith("--"):
            break
        if "@param" in line:
            m = _PARAM_RE.match(line)
            if m is None or m["type"] not in _TYPES:
                raise QueryError(f"query {name!r}: cannot read parameter line {line!r}")
            default = m["default"]
            params.append(
                ParamSpec(
                    name=m["name"],
                    type=m["type"],
                    required=default is None,
                    default=None if default in (None, "NULL") else _number(default),
                    minimum=None if m["min"] is None else float(m["min"]),
                    maximum=None if m["max"] is None else float(m["max"]),
                    doc=(m["doc"] or "").strip(),
                )
            )
        elif not params:
            description.append(line.lstrip("-").strip())
    for fragment, text in FRAGMENTS.items():
        sql = sql.replace(fragment, text)
    return QuerySpec(name, " ".join(d for d in description if d), tuple(params), sql)


def _number(text: str) -> int | float:
    return float(text) if "." in text else int(text)


# --- parameter checking -----------------------------------------------------------------------
def _bad(query: str, p: ParamSpec, expected: str, value: Any) -> QueryParameterError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return QueryParameterError(
        f"query {query!r}: parameter {p.name!r} must be {expected}, got {shown}"
    )


def _to_utc_naive(value: datetime) -> datetime:
    # runs.started_at is a naive UTC TIMESTAMP; an aware value must not be shifted by the
    # session time zone on its way in.
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _check_value(query: str, p: ParamSpec, value: Any) -> Any:
    if value is None:
        if p.required:
            raise QueryParameterError(f"query {query!r}: parameter {p.name!r} is required")
        return None
    t = p.type
    if t == "TIMESTAMP":
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise _bad(query, p, "an ISO 8601 timestamp", value) from None
        elif isinstance(value, date) and not isinstance(value, datetime):
            value = datetime(value.year, value.month, value.day)
        if not isinstance(value, datetime):
            raise _bad(query, p, "a datetime", value)
        return _to_utc_naive(value)
    if t in ("VARCHAR", "BUDGET"):
        if not isinstance(value, str):
            raise _bad(query, p, "a string", value)
        if "\x00" in value:
            raise _bad(query, p, "a string without NUL characters", value)
        if t == "BUDGET" and value not in BUDGETS:
            raise _bad(query, p, "one of " + ", ".join(BUDGETS), value)
        return value
    if t == "BOOLEAN":
        if not isinstance(value, bool):
            raise _bad(query, p, "true or false", value)
        return value
    if t == "BIGINT":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(query, p, "an integer", value)
        _check_range(query, p, value)
        return value
    if t == "DOUBLE":
        return _check_double(query, p, value)
    # list types
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _bad(query, p, "a list", value)
    if len(value) > _MAX_LIST:
        raise _bad(query, p, f"a list of at most {_MAX_LIST} items", f"<{len(value)} items>")
    if t == "VARCHAR[]":
        for item in value:
            if not isinstance(item, str) or "\x00" in item:
                raise _bad(query, p, "a list of strings", value)
        return list(value)
    return [_check_double(query, p, item) for item in value]


def _check_double(query: str, p: ParamSpec, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(query, p, "a finite number", value)
    _check_range(query, p, value)
    return float(value)


def _check_range(query: str, p: ParamSpec, value: float) -> None:
    if p.minimum is not None and value < p.minimum:
        raise _bad(query, p, f"at least {p.minimum:g}", value)
    if p.maximum is not None and value > p.maximum:
        raise _bad(query, p, f"at most {p.maximum:g}", value)


def bind_params(spec: QuerySpec, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check ``params`` against the spec and fill defaults. Raises :class:`QueryParameterError`."""
    given = dict(params or {})
    declared = {p.name for p in spec.params}
    for key in given:
        if key not in declared:
            takes = ", ".join(p.name for p in spec.params) or "no parameters"
            raise QueryParameterError(
                f"query {spec.name!r}: unknown parameter {key!r}; it takes: {takes}"
            )
    bound: dict[str, Any] = {}
    for p in spec.params:
        value = given.get(p.name, p.default)
        bound[p.name] = _check_value(spec.name, p, value)
    return bound


# --- running -----------------------------------------------------------------------------------
def _env_number(name: str, default: float) -> float:
    text = env_str(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise QueryError(f"{name}={text!r} is not a number") from None
    if value <= 0:
        raise QueryError(f"{name}={text!r} must be positive")
    return value


def run_query(
    con: Any,
    name: str,
    params: Mapping[str, Any] | None = None,
    /,
    *,
    max_rows: int | None = None,
    timeout_s: float | None = None,
) -> QueryResult:
    """Run the named query on a DuckDB connection and return its (capped) rows.

    ``max_rows`` defaults to ``LOOPWATCH_QUERY_MAX_ROWS`` then :data:`DEFAULT_MAX_ROWS`;
    ``timeout_s`` to ``LOOPWATCH_QUERY_TIMEOUT_S`` then :data:`DEFAULT_TIMEOUT_S`.
    The query runs on its own cursor, so interrupting it never touches other queries
    sharing ``con``.
    """
    return run_spec(con, query_spec(name), params, max_rows=max_rows, timeout_s=timeout_s)


def run_spec(
    con: Any,
    spec: QuerySpec,
    params: Mapping[str, Any] | None = None,
    /,
    *,
    max_rows: int | None = None,
    timeout_s: float | None = None,
) -> QueryResult:
    """:func:`run_query` for a spec not loaded from ``queries/sql`` (tests, plug-ins)."""
    name = spec.name
    bound = bind_params(spec, params)
    if max_rows is None:
        max_rows = int(_env_number("LOOPWATCH_QUERY_MAX_ROWS", DEFAULT_MAX_ROWS))
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise QueryParameterError(f"query {name!r}: max_rows must be at least 1, got {max_rows!r}")
    if timeout_s is None:
        timeout_s = _env_number("LOOPWATCH_QUERY_TIMEOUT_S", DEFAULT_TIMEOUT_S)
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise QueryParameterError(f"query {name!r}: timeout_s must be positive, got {timeout_s!r}")

    start = time.perf_counter()
    with time_limited_cursor(con, name, timeout_s) as cur:
        cur.execute(spec.sql, bound)
        columns = tuple(d[0] for d in cur.description or ())
        rows = cur.fetchmany(max_rows + 1)
    elapsed_ms = (time.perf_counter() - start) * 1000.0
    truncated = len(rows) > max_rows
    if truncated:
        rows = rows[:max_rows]
    _log.debug(
        "query %s: %d rows in %.1f ms (truncated: %s)", name, len(rows), elapsed_ms, truncated
    )
    return QueryResult(name, columns, [tuple(r) for r in rows], elapsed_ms, truncated, bound)


def parse_spec(name: str, sql: str) -> QuerySpec:
    """A :class:`QuerySpec` from SQL text with the ``-- @param`` header (see the module doc)."""
    if not _NAME_RE.match(name):
        raise QueryError(f"invalid query name {name!r}: use lower-case letters, digits and _")
    return _parse_spec(name, sql)


class QueryGateway:
    """A connection plus default caps: ``gw.run("stop_reason_mix", since=...)``."""

    def __init__(
        self, con: Any, *, max_rows: int | None = None, timeout_s: float | None = None
    ) -> None:
        self.con = con
        self.max_rows = max_rows
        self.timeout_s = timeout_s

    def run(
        self,
        name: str,
        /,
        *,
        max_rows: int | None = None,
        timeout_s: float | None = None,
        **params: Any,
    ) -> QueryResult:
        """Run a named query; keyword arguments are its parameters."""
        return run_query(
            self.con,
            name,
            params,
            max_rows=max_rows if max_rows is not None else self.max_rows,
            timeout_s=timeout_s if timeout_s is not None else self.timeout_s,
        )


# --- durations --------------------------------------------------------------------------------
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


MAX_DURATION = timedelta(days=36_500)
"""The longest duration :func:`parse_duration` takes (100 years): any window back from now fits
in a date, and "all time" is said by leaving the window out."""


def parse_duration(text: str) -> timedelta:
    """``"15m"``, ``"6h"``, ``"7d"``, ``"1h30m"``, ``"90s"`` (Prometheus style) → timedelta.

    Raises ``ValueError`` naming the accepted form, or why the value is out of range (zero, or
    longer than :data:`MAX_DURATION`).
    """
    s = text.strip()
    pos = 0
    total = 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += float(m[1]) * _UNIT_S[m[2]]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(
            f"invalid duration {text!r}: use a number and a unit, like 30m, 6h, 7d or 1h30m"
        )
    if total <= 0:
        raise ValueError(f"invalid duration {text!r}: must be longer than zero")
    if total > MAX_DURATION.total_seconds():
        raise ValueError(
            f"invalid duration {text!r}: at most {MAX_DURATION.days}d (100 years); "
            "to cover all time, leave the window out"
        )
    return timedelta(seconds=total)
