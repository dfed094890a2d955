"""The DuckDB store (DESIGN §6): one file holding ``spans``, ``runs`` and ``schema_version``.

Spans arrive in batches, from the SDK (finished ``ReadableSpan`` objects, through
:class:`~loopwatch.queries.exporter.DuckDBSpanExporter`) or already decoded (the ``serve``
process turns OTLP into the same :class:`SpanRecord` shape). Both paths meet in
:meth:`Store.write_records`, which turns the batch into Arrow tables and inserts each in one
statement inside one transaction: a batch is stored whole or not at all, and once the call
returns it is committed.

DuckDB lets one process write a file and, meanwhile, no other process open it. Opening a file
another process holds raises :class:`StoreLockedError`, naming that process.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from operator import attrgetter
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import duckdb
import pyarrow as pa
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.reasons import OUTCOME_OF, StopReason
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanKind, StatusCode

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "EventRecord",
    "SchemaVersionError",
    "SpanRecord",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "connect_read_only",
    "record_from_span",
    "records_from_spans",
    "resolve_db_path",
    "runs_table",
    "spans_table",
]

SCHEMA_VERSION: Final = 1
"""The only schema version this code reads and writes."""
DEFAULT_DB: Final = "loopwatch.duckdb"
"""The store file used when neither an argument nor ``LOOPWATCH_DB`` names one."""
DB_ENV: Final = "LOOPWATCH_DB"
"""Environment variable naming the store file."""

UNKNOWN: Final = "unknown"
"""Stored in the ``runs`` columns that may not be NULL when the run span lacks the attribute."""


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The store path: the argument, else ``$LOOPWATCH_DB``, else ``./loopwatch.duckdb``."""
    if path is None:
        path = os.environ.get(DB_ENV) or DEFAULT_DB
    return Path(path)


# --- errors ----------------------------------------------------------------------------


class StoreError(Exception):
    """The store could not be opened, read or written. The message says what to do."""

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


class StoreLockedError(StoreError):
    """Another process has the file open (DuckDB allows one writer and no one else meanwhile)."""

    def __init__(
        self, path: str | os.PathLike[str], pid: int | None = None, program: str | None = None
    ) -> None:
        if pid is not None:
            holder = f"another process ({program}, PID {pid})" if program else f"PID {pid}"
        else:
            holder = "another process"
        super().__init__(
            f"{path} is locked by {holder}: DuckDB lets one process write a store and no other "
            "process open it meanwhile. Send spans to that process instead (live mode: "
            "`loopwatch serve`), or open the file read-only after it finishes.",
            path,
        )
        self.pid = pid
        """The holder's process id, when DuckDB named it."""
        self.program = program
        """The holder's executable, when DuckDB named it."""


class StoreCorruptError(StoreError):
    """The file exists but is not a readable DuckDB database."""

    def __init__(self, path: str | os.PathLike[str], detail: str) -> None:
        super().__init__(
            f"{path} is not a readable DuckDB store ({_one_line(detail)}): move it aside and "
            "let loopwatch create a new store there, or point --db/LOOPWATCH_DB at another file.",
            path,
        )


class SchemaVersionError(StoreError):
    """The file is a DuckDB database, but not one with the schema this loopwatch reads."""

    def __init__(self, path: str | os.PathLike[str], found: int | None) -> None:
        if found is None:
            message = (
                f"{path} is a DuckDB file but not a loopwatch store (it has no schema_version "
                "table): point --db/LOOPWATCH_DB at a loopwatch store or at a new file."
            )
        elif found > SCHEMA_VERSION:
            message = (
                f"{path} has store schema version {found}, newer than the {SCHEMA_VERSION} this "
                "loopwatch reads: upgrade loopwatch, or point --db/LOOPWATCH_DB at another file."
            )
        else:
            message = (
                f"{path} has unknown store schema version {found} (this loopwatch reads "
                f"{SCHEMA_VERSION}): open it with the loopwatch that wrote it, or point "
                "--db/LOOPWATCH_DB at another file."
            )
        super().__init__(message, path)
        self.found = found
        """The version in the file; ``None`` when it has no ``schema_version`` table."""


class StoreNotFoundError(StoreError):
    """A read-only open of a file that does not exist."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(
            f"{path} does not exist: check --db/LOOPWATCH_DB, or create the store first by "
            "running agents with instrument(store=...) or `loopwatch serve`.",
            path,
        )


def _one_line(text: str) -> str:
    return " ".join(text.split())


_LOCK_RE: Final = re.compile(r"held in (?P<program>.+?) \(PID (?P<pid>\d+)\)")
_CORRUPT_MARKS: Final = (
    "not a valid duckdb database file",
    "corrupt",
    "checksum",
    "too small",
    "failed to read database header",
    "invalid database header",
)


def _open_error(exc: duckdb.Error, path: Path, read_only: bool) -> StoreError:
    """Translate DuckDB's error on opening ``path`` into the store's own family."""
    text = str(exc)
    lower = text.lower()
    if "could not set lock" in lower or "conflicting lock" in lower:
        match = _LOCK_RE.search(text)
        if match:
            return StoreLockedError(path, int(match["pid"]), match["program"])
        return StoreLockedError(path)
    if read_only and "does not exist" in lower:
        return StoreNotFoundError(path)
    if any(mark in lower for mark in _CORRUPT_MARKS):
        return StoreCorruptError(path, text)
    if "different configuration" in lower:
        return StoreError(
            f"{path} is already open in this process in another mode: use that Store's "
            "connection (Store.cursor()), or close it first.",
            path,
        )
    mode = "read-only" if read_only else "for writing"
    return StoreError(
        f"cannot open {path} {mode} ({_one_line(text)}): check that the directory exists and "
        "is writable, or choose another path with --db/LOOPWATCH_DB.",
        path,
    )


# --- records ---------------------------------------------------------------------------


@dataclass(slots=True)
class EventRecord:
    """One span event."""

    name: str
    """The event name, e.g. ``loopwatch.retry``."""
    time_ns: int
    """When it happened, Unix nanoseconds."""
    attributes: Mapping[str, Any] = field(default_factory=dict)
    """The event's attributes."""


@dataclass(slots=True)
class SpanRecord:
    """One finished span, in the shape the store writes. Both ingest paths produce it.

    Attribute values are what OpenTelemetry allows (str, bool, int, float, sequences of one of
    those); anything else is still stored, as JSON text.
    """

    trace_id: str
    """32 lowercase hex digits."""
    span_id: str
    """16 lowercase hex digits."""
    name: str
    """The span name, e.g. ``invoke_agent support-bot``."""
    start_ns: int
    """Start, Unix nanoseconds."""
    end_ns: int
    """End, Unix nanoseconds."""
    parent_span_id: str | None = None
    """16 hex digits, ``None`` for a root span."""
    kind: str = "INTERNAL"
    """``INTERNAL``, ``SERVER``, ``CLIENT``, ``PRODUCER`` or ``CONSUMER``."""
    status_code: str = "UNSET"
    """``UNSET``, ``OK`` or ``ERROR``."""
    status_message: str | None = None
    """The status description, if any."""
    service: str | None = None
    """The resource's ``service.name``."""
    attributes: Mapping[str, Any] = field(default_factory=dict)
    """The span's attributes. Not copied: do not change it after handing the record over."""
    events: Sequence[EventRecord] = ()
    """The span's events, in order."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpanRecord:
        """A record from a decoded span dict whose keys are this class's field names.

        ``events`` may hold :class:`EventRecord` objects or dicts with ``name``, ``time_ns``
        and ``attributes``. Raises :class:`ValueError` naming the first missing or ill-typed
        required field.
        """
        for key, kinds in _REQUIRED_FIELDS:
            value = data.get(key)
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise ValueError(
                    f"span dict field {key!r} must be {kinds[0].__name__}, got {value!r}"
                )
        events: list[EventRecord] = []
        for event in data.get("events") or ():
            if isinstance(event, EventRecord):
                events.append(event)
            else:
                events.append(
                    EventRecord(
                        str(event.get("name", "")),
                        int(event.get("time_ns") or 0),
                        event.get("attributes") or {},
                    )
                )
        end_ns = data.get("end_ns")
        return cls(
            trace_id=data["trace_id"],
            span_id=data["span_id"],
            name=data["name"],
            start_ns=data["start_ns"],
            end_ns=end_ns if isinstance(end_ns, int) else data["start_ns"],
            parent_span_id=data.get("parent_span_id") or None,
            kind=data.get("kind") or "INTERNAL",
            status_code=data.get("status_code") or "UNSET",
            status_message=data.get("status_message") or None,
            service=data.get("service"),
            attributes=data.get("attributes") or {},
            events=tuple(events),
        )


_REQUIRED_FIELDS: Final[tuple[tuple[str, tuple[type, ...]], ...]] = (
    ("trace_id", (str,)),
    ("span_id", (str,)),
    ("name", (str,)),
    ("start_ns", (int,)),
)


def _plain(attributes: Any) -> Mapping[str, Any]:
    """A plain dict view of an SDK attribute mapping, without copying when possible.

    The SDK keeps attributes in ``BoundedAttributes``, whose item access runs Python code under
    a lock; reading its inner dict is an order of magnitude faster. A finished span's
    attributes are immutable, so sharing the dict is safe.
    """
    if attributes is None:
        return {}
    if type(attributes) is dict:
        return attributes
    inner = getattr(attributes, "_dict", None)
    if type(inner) is dict:
        return inner
    return dict(attributes)


def _service_of(resource: Any) -> str | None:
    if resource is None:
        return None
    name = _plain(getattr(resource, "attributes", None)).get("service.name")
    return name if isinstance(name, str) else None


def _events_of(raw: Any) -> tuple[EventRecord, ...]:
    return tuple(
        EventRecord(e.name, e.timestamp, _plain(getattr(e, "_attributes", None) or e.attributes))
        for e in raw
    )


def _record_public(span: ReadableSpan) -> SpanRecord | None:
    """The conversion through the SDK's public properties only (the fallback)."""
    ctx = span.context
    if ctx is None:
        return None
    parent = span.parent
    status = span.status
    start = span.start_time or 0
    end = span.end_time
    return SpanRecord(
        f"{ctx.trace_id:032x}",
        f"{ctx.span_id:016x}",
        span.name,
        start,
        end if end is not None else start,
        f"{parent.span_id:016x}" if parent is not None else None,
        span.kind.name,
        status.status_code.name,
        status.description,
        _service_of(span.resource),
        _plain(span.attributes),
        _events_of(span.events),
    )


# Enum members are singletons: naming them through their id avoids the Enum machinery.
_KIND_NAMES: Final = {id(k): k.name for k in SpanKind}
_STATUS_NAMES: Final = {id(c): c.name for c in StatusCode}


def records_from_spans(spans: Iterable[ReadableSpan]) -> list[SpanRecord]:
    """Turn finished SDK spans into :class:`SpanRecord` objects (spans without a context skipped).

    Reads the SDK span's fields directly when it has the layout of the SDK this was written
    against (an order of magnitude faster than its properties), else its public properties.
    """
    out: list[SpanRecord] = []
    append = out.append
    kind_names = _KIND_NAMES
    status_names = _STATUS_NAMES
    last_resource: object = None
    service: str | None = None
    last_trace = -1
    trace_hex = ""
    for span in spans:
        try:
            ctx = span._context
            resource = span._resource
            status = span._status
            parent = span._parent
            events = span._events
            attributes = span._attributes
            kind = kind_names[id(span._kind)]
            code = status_names[id(status.status_code)]
            name = span._name
            start = span._start_time
            end = span._end_time
        except (AttributeError, KeyError):
            record = _record_public(span)
            if record is not None:
                append(record)
            continue
        if ctx is None:
            continue
        if resource is not last_resource:
            last_resource = resource
            service = _service_of(resource)
        trace_id = ctx.trace_id
        if trace_id != last_trace:
            last_trace = trace_id
            trace_hex = trace_id.to_bytes(16, "big").hex()
        start = start or 0
        if type(events) is BoundedList:
            # Its __len__ and __iter__ run Python code under a lock.
            events = events._dq  # type: ignore[attr-defined]
        append(
            SpanRecord(
                trace_hex,
                ctx.span_id.to_bytes(8, "big").hex(),
                name,
                start,
                end if end is not None else start,
                parent.span_id.to_bytes(8, "big").hex() if parent is not None else None,
                kind,
                code,
                status.description,
                service,
                attributes._dict if type(attributes) is BoundedAttributes else _plain(attributes),
                _events_of(events) if events else (),
            )
        )
    return out


def record_from_span(span: ReadableSpan) -> SpanRecord:
    """One finished SDK span as a :class:`SpanRecord`."""
    records = records_from_spans((span,))
    if not records:
        raise ValueError(f"span {span.name!r} has no span context")
    return records[0]


# --- columns ---------------------------------------------------------------------------

# Kinds of typed column: the Python types a value may have, and the Arrow type it becomes.
_STR: Final = "str"
_INT64: Final = "int64"
_INT32: Final = "int32"
_FLOAT: Final = "float"
_BOOL: Final = "bool"

_ARROW_TYPE: Final[dict[str, pa.DataType]] = {
    _STR: pa.string(),
    _INT64: pa.int64(),
    _INT32: pa.int32(),
    _FLOAT: pa.float64(),
    _BOOL: pa.bool_(),
}
_NONE: Final = type(None)
# Arrow's JSON type maps to DuckDB's JSON: no cast from VARCHAR into the JSON columns.
_JSON: Final = pa.json_()
_ALLOWED: Final[dict[str, frozenset[type]]] = {
    _STR: frozenset({str, _NONE}),
    _INT64: frozenset({int, _NONE}),
    _INT32: frozenset({int, _NONE}),
    _FLOAT: frozenset({float, int, _NONE}),
    _BOOL: frozenset({bool, _NONE}),
}
_INT_RANGE: Final[dict[str, tuple[int, int]]] = {
    _INT64: (-(2**63), 2**63 - 1),
    _INT32: (-(2**31), 2**31 - 1),
}

# (column, attribute, kind) for every typed attribute column of `spans`.
SPAN_TYPED_COLUMNS: Final[tuple[tuple[str, str, str], ...]] = (
    ("operation", sc.GEN_AI_OPERATION_NAME, _STR),
    ("run_id", sc.RUN_ID, _STR),
    ("task_type", sc.TASK_TYPE, _STR),
    ("step", sc.STEP_INDEX, _INT32),
    ("model", sc.GEN_AI_REQUEST_MODEL, _STR),
    ("tool_name", sc.GEN_AI_TOOL_NAME, _STR),
    ("tool_call_id", sc.GEN_AI_TOOL_CALL_ID, _STR),
    ("tool_status", sc.TOOL_STATUS, _STR),
    ("tool_fingerprint", sc.TOOL_FINGERPRINT, _STR),
    ("result_fingerprint", sc.RESULT_FINGERPRINT, _STR),
    ("error_type", sc.ERROR_TYPE, _STR),
    ("error_code", sc.ERROR_CODE, _STR),
    ("error_fingerprint", sc.ERROR_FINGERPRINT, _STR),
    ("guard_decision", sc.GUARD_DECISION, _STR),
    ("stop_reason", sc.STOP_REASON, _STR),
    ("outcome", sc.OUTCOME, _STR),
    ("limit_name", sc.LIMIT, _STR),
    ("limits_version", sc.LIMITS_VERSION, _STR),
    ("input_tokens", sc.GEN_AI_USAGE_INPUT_TOKENS, _INT64),
    ("output_tokens", sc.GEN_AI_USAGE_OUTPUT_TOKENS, _INT64),
    ("cost_usd", sc.COST_USD, _FLOAT),
    ("max_utilization", sc.BUDGET_MAX_UTILIZATION, _FLOAT),
    *((f"used_{b}", sc.budget_used(b), _FLOAT) for b in sc.BUDGETS),
    *((f"limit_{b}", sc.budget_limit(b), _FLOAT) for b in sc.BUDGETS),
    ("tool_retries", sc.TOOL_RETRIES, _INT32),
)
"""Which attribute fills which typed column of ``spans``; every other attribute goes to JSON."""

_TYPED_KEYS: Final = frozenset(key for _, key, _ in SPAN_TYPED_COLUMNS)

SPAN_BASE_COLUMNS: Final[tuple[tuple[str, pa.DataType], ...]] = (
    ("trace_id", pa.string()),
    ("span_id", pa.string()),
    ("parent_span_id", pa.string()),
    ("name", pa.string()),
    ("kind", pa.string()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("status_code", pa.string()),
    ("status_message", pa.string()),
    ("service", pa.string()),
)

SPAN_COLUMNS: Final[tuple[str, ...]] = (
    *(c for c, _ in SPAN_BASE_COLUMNS),
    *(c for c, _, _ in SPAN_TYPED_COLUMNS),
    "attributes",
    "events",
)
"""The ``spans`` columns the writer fills, in the order of its Arrow tables."""

# (column, attribute, kind) for the `runs` columns read straight from one run-span attribute.
RUN_ATTRIBUTE_COLUMNS: Final[tuple[tuple[str, str, str], ...]] = (
    ("parent_run_id", sc.PARENT_RUN_ID, _STR),
    ("conversation_id", sc.CONVERSATION_ID, _STR),
    ("agent_name", sc.GEN_AI_AGENT_NAME, _STR),
    ("limit_name", sc.LIMIT, _STR),
    ("explanation", sc.STOP_EXPLANATION, _STR),
    ("limits_version", sc.LIMITS_VERSION, _STR),
    *((b, sc.budget_used(b), _FLOAT) for b in sc.BUDGETS),
    ("input_tokens", sc.GEN_AI_USAGE_INPUT_TOKENS, _INT64),
    ("output_tokens", sc.GEN_AI_USAGE_OUTPUT_TOKENS, _INT64),
    *((f"limit_{b}", sc.budget_limit(b), _FLOAT) for b in sc.BUDGETS),
    ("max_utilization", sc.BUDGET_MAX_UTILIZATION, _FLOAT),
    ("recent_new_calls", sc.PROGRESS_RECENT_NEW_CALLS, _INT32),
    ("max_same_error", sc.PROGRESS_MAX_SAME_ERROR, _INT32),
    ("max_same_call", sc.PROGRESS_MAX_SAME_CALL, _INT32),
    ("task_success", sc.TASK_SUCCESS, _BOOL),
)

RUN_COLUMNS: Final[tuple[str, ...]] = (
    "run_id",
    "trace_id",
    "span_id",
    "service",
    "task_type",
    "start_ns",
    "end_ns",
    "stop_reason",
    "outcome",
    "source",
    *(c for c, _, _ in RUN_ATTRIBUTE_COLUMNS),
)
"""The ``runs`` columns the writer fills from its Arrow table (``started_at`` is derived)."""


def _valid(value: Any, kind: str) -> bool:
    """Whether one attribute value fits a typed column of ``kind`` (bools are not numbers)."""
    t = type(value)
    if kind == _STR:
        return t is str
    if kind == _BOOL:
        return t is bool
    if kind == _FLOAT:
        if t is float:
            return True
        if t is int:
            try:
                float(value)
            except OverflowError:
                return False
            return True
        return False
    if t is not int:
        return False
    lo, hi = _INT_RANGE[kind]
    return bool(lo <= value <= hi)


def _typed_array(values: list[Any], kind: str) -> tuple[pa.Array, list[int]]:
    """The Arrow array of a typed column, and the rows whose value did not fit (now NULL)."""
    arrow_type = _ARROW_TYPE[kind]
    # Arrow refuses every non-str for a string column, so only numbers need the type scan:
    # Arrow would truncate 3.5 into an int column and take True as 1.0 in a float one.
    if kind == _STR or set(map(type, values)) <= _ALLOWED[kind]:
        try:
            return pa.array(values, arrow_type), []
        except (pa.ArrowException, OverflowError, ValueError, TypeError):
            pass  # a wrong type or an int out of range: find it below
    bad: list[int] = []
    clean: list[Any] = []
    for i, value in enumerate(values):
        if value is None or _valid(value, kind):
            clean.append(value)
        else:
            clean.append(None)
            bad.append(i)
    return pa.array(clean, arrow_type), bad


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return list(value)
    return str(value)


_encode: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_json_default, check_circular=False
).encode
_safe_encode: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_json_default
).encode


def _to_json(value: Any) -> str:
    try:
        return _encode(value)
    except (ValueError, RecursionError):
        # check_circular is off on the fast path; a cyclic value gets the checked encoder's
        # error, then its text.
        try:
            return _safe_encode(value)
        except (ValueError, RecursionError):
            return _encode(str(value))


def _events_json(events: Sequence[EventRecord]) -> str:
    return _to_json(
        [{"name": e.name, "time_ns": e.time_ns, "attributes": e.attributes} for e in events]
    )


def _is_run_span(record: SpanRecord) -> bool:
    return record.name.startswith(sc.SPAN_RUN) or (
        record.attributes.get(sc.GEN_AI_OPERATION_NAME) == sc.OP_INVOKE_AGENT
    )


def _base_ok(record: SpanRecord) -> bool:
    return (
        type(record.trace_id) is str
        and type(record.span_id) is str
        and type(record.name) is str
        and type(record.kind) is str
        and type(record.status_code) is str
        and type(record.start_ns) is int
        and type(record.end_ns) is int
        and -(2**63) <= record.start_ns < 2**63
        and -(2**63) <= record.end_ns < 2**63
        and (record.parent_span_id is None or type(record.parent_span_id) is str)
        and (record.status_message is None or type(record.status_message) is str)
        and (record.service is None or type(record.service) is str)
    )


@dataclass(frozen=True, slots=True)
class _Plan:
    """Where the attributes of one key set go: typed columns, or the JSON rest."""

    typed: tuple[tuple[int, int], ...]
    """(position among the attributes, typed column index)."""
    missing: tuple[int, ...]
    """Typed column indexes this key set has no attribute for."""
    rest: tuple[tuple[int, str], ...]
    """(position, key) of the attributes that go to JSON."""


_COLUMN_OF_KEY: Final = {key: i for i, (_, key, _) in enumerate(SPAN_TYPED_COLUMNS)}
_PLANS: dict[tuple[str, ...], _Plan] = {}
_MAX_PLANS: Final = 4096


def _plan(keys: tuple[str, ...]) -> _Plan:
    plan = _PLANS.get(keys)
    if plan is None:
        typed = tuple((p, _COLUMN_OF_KEY[k]) for p, k in enumerate(keys) if k in _COLUMN_OF_KEY)
        have = {c for _, c in typed}
        plan = _Plan(
            typed,
            tuple(c for c in range(len(SPAN_TYPED_COLUMNS)) if c not in have),
            tuple((p, k) for p, k in enumerate(keys) if k not in _COLUMN_OF_KEY),
        )
        if len(_PLANS) >= _MAX_PLANS:  # arbitrary user attributes must not grow this forever
            _PLANS.clear()
        _PLANS[keys] = plan
    return plan


def _base_array(records: list[SpanRecord], name: str, arrow_type: pa.DataType) -> pa.Array:
    values = list(map(attrgetter(name), records))
    allowed = _BASE_ALLOWED[name]
    if set(map(type, values)) <= allowed:
        try:
            return pa.array(values, arrow_type)
        except (pa.ArrowException, OverflowError, ValueError, TypeError):
            pass
    bad = next((r for r in records if not _base_ok(r)), None)
    raise ValueError(
        f"span record {getattr(bad, 'span_id', '?')!r} has a missing or ill-typed {name}: "
        "decode spans into SpanRecord's field types"
    )


_BASE_ALLOWED: Final[dict[str, frozenset[type]]] = {
    "trace_id": frozenset({str}),
    "span_id": frozenset({str}),
    "parent_span_id": frozenset({str, _NONE}),
    "name": frozenset({str}),
    "kind": frozenset({str}),
    "start_ns": frozenset({int}),
    "end_ns": frozenset({int}),
    "status_code": frozenset({str}),
    "status_message": frozenset({str, _NONE}),
    "service": frozenset({str, _NONE}),
}


def _attribute_columns(
    grouped: Sequence[tuple[tuple[str, ...], Sequence[dict[str, Any]]]],
) -> dict[str, pa.Array]:
    """The typed attribute columns and the ``attributes`` JSON column of rows grouped by key set.

    ``grouped`` holds, in row order, each key set with the attribute dicts of its rows.
    """
    # Spans of one kind share their attribute keys. Grouping rows by key set lets one plan
    # route a whole group's values, transposed in C by zip(), instead of one key at a time.
    n_typed = len(SPAN_TYPED_COLUMNS)
    values: list[list[Any]] = [[] for _ in range(n_typed)]
    present = [False] * n_typed
    rest: list[str] = []
    for keys, rows in grouped:
        plan = _plan(keys)
        size = len(rows)
        group_values = [tuple(a.values()) for a in rows]
        by_position = list(zip(*group_values, strict=True)) if keys else []
        for position, index in plan.typed:
            values[index].extend(by_position[position])
            present[index] = True
        if plan.missing:
            nones = [None] * size
            for index in plan.missing:
                values[index].extend(nones)
        if plan.rest:
            pairs = plan.rest
            try:
                rest.extend([_encode({k: v[p] for p, k in pairs}) for v in group_values])
            except (ValueError, RecursionError):
                rest.extend(_to_json({k: v[p] for p, k in pairs}) for v in group_values)
        else:
            rest.extend(["{}"] * size)
    n = len(rest)
    columns: dict[str, pa.Array] = {}
    kept: dict[int, dict[str, Any]] = {}  # row -> raw values that did not fit their column
    for index, (column, key, kind) in enumerate(SPAN_TYPED_COLUMNS):
        if not present[index]:
            columns[column] = pa.nulls(n, _ARROW_TYPE[kind])
            continue
        column_values = values[index]
        array, bad = _typed_array(column_values, kind)
        columns[column] = array
        for row in bad:
            kept.setdefault(row, {})[key] = column_values[row]
    if kept:
        flat = [a for _, rows in grouped for a in rows]
        for row, raw in kept.items():
            # Rare: rebuild this row's JSON with the values its typed columns refused.
            extra = {k: v for k, v in flat[row].items() if k not in _COLUMN_OF_KEY or k in raw}
            rest[row] = _to_json(extra)
    columns["attributes"] = pa.array(rest, _JSON)
    return columns


def _build(records: Sequence[SpanRecord]) -> tuple[pa.Table, list[SpanRecord]]:
    """The ``spans`` Arrow table for ``records``, and the run spans among them.

    Rows come out grouped by attribute key set, not in the order given (row order means
    nothing in the table). Raises :class:`ValueError` if a record's ids, name, kind, status
    or times are missing or ill-typed (such a span cannot be stored).
    """
    groups: dict[tuple[str, ...], list[int]] = {}
    attrs: list[dict[str, Any]] = []
    for i, record in enumerate(records):
        a = record.attributes
        if type(a) is not dict:
            a = dict(a)
        attrs.append(a)
        keys = tuple(a)
        group = groups.get(keys)
        if group is None:
            groups[keys] = [i]
        else:
            group.append(i)
    order = [i for rows in groups.values() for i in rows]
    ordered = [records[i] for i in order]
    columns: dict[str, pa.Array] = {
        name: _base_array(ordered, name, arrow_type) for name, arrow_type in SPAN_BASE_COLUMNS
    }
    grouped = [(keys, [attrs[i] for i in rows]) for keys, rows in groups.items()]
    columns.update(_attribute_columns(grouped))
    columns["events"] = pa.array(
        [_events_json(r.events) if r.events else "[]" for r in ordered], _JSON
    )
    table = pa.table({c: columns[c] for c in SPAN_COLUMNS})
    # In the order given, so that of two spans for one run the later one wins.
    return table, [r for r in records if _is_run_span(r)]


def spans_table(records: Sequence[SpanRecord]) -> pa.Table:
    """The Arrow table of ``spans`` rows for ``records`` (columns :data:`SPAN_COLUMNS`).

    A value that does not fit its typed column leaves the column NULL and goes, as it was,
    into the row's ``attributes`` JSON. Rows come out grouped by attribute key set, not in the
    order given. Raises :class:`ValueError` for a record whose ids, name, kind, status or
    times are missing or ill-typed.
    """
    return _build(records)[0]


_STOP_REASONS: Final = frozenset(r.value for r in StopReason)
_RUN_TYPES: Final = {c: _ARROW_TYPE[k] for c, _, k in RUN_ATTRIBUTE_COLUMNS}
# Columns filled from elsewhere when the run span lacks their attribute (input + output tokens
# for tokens, the span name for the agent, the call-cost attribute for cost).
_RUN_FILLED: Final = ("agent_name", "cost_usd", "tokens", "input_tokens", "output_tokens")


def runs_table(records: Sequence[SpanRecord], source: str = "otel") -> pa.Table | None:
    """The Arrow table of ``runs`` rows for the run spans among ``records`` (``None`` if none).

    One row per run id; when a batch holds the same run twice, the later span wins. Values
    of the wrong type are left NULL (the span row keeps them).
    """
    return _runs_table([r for r in records if _is_run_span(r)], source)


def _runs_table(run_spans: Sequence[SpanRecord], source: str) -> pa.Table | None:
    by_run: dict[str, SpanRecord] = {}
    for record in run_spans:
        run_id = record.attributes.get(sc.RUN_ID)
        by_run[run_id if type(run_id) is str and run_id else record.span_id] = record
    if not by_run:
        return None
    runs = list(by_run.values())
    attrs = [r.attributes for r in runs]
    columns: dict[str, pa.Array] = {}
    raw: dict[str, list[Any]] = {}
    for column, key, kind in RUN_ATTRIBUTE_COLUMNS:
        column_values = [a.get(key) for a in attrs]
        array, bad = _typed_array(column_values, kind)
        if column in _RUN_FILLED:
            raw[column] = array.to_pylist() if bad else column_values
        else:
            columns[column] = array
    # Fill what a run span lacks, so that the NOT NULL columns always hold something.
    task_types = [a.get(sc.TASK_TYPE) for a in attrs]
    stop_reasons = [a.get(sc.STOP_REASON) for a in attrs]
    outcomes = [a.get(sc.OUTCOME) for a in attrs]
    agent_names, costs, tokens = raw["agent_name"], raw["cost_usd"], raw["tokens"]
    for i, record in enumerate(runs):
        if type(task_types[i]) is not str:
            task_types[i] = UNKNOWN
        reason = stop_reasons[i]
        if type(reason) is not str:
            reason = stop_reasons[i] = UNKNOWN
        if type(outcomes[i]) is not str:
            known = reason in _STOP_REASONS
            outcomes[i] = str(OUTCOME_OF[StopReason(reason)]) if known else UNKNOWN
        if agent_names[i] is None and " " in record.name:
            agent_names[i] = record.name.split(" ", 1)[1]
        if costs[i] is None:
            cost = attrs[i].get(sc.COST_USD)
            costs[i] = cost if cost is not None and _valid(cost, _FLOAT) else None
        if tokens[i] is None:
            tin, tout = raw["input_tokens"][i], raw["output_tokens"][i]
            if tin is not None or tout is not None:
                tokens[i] = (tin or 0) + (tout or 0)
    for column in _RUN_FILLED:
        columns[column] = pa.array(raw[column], _RUN_TYPES[column])
    columns["run_id"] = pa.array(list(by_run), pa.string())
    columns["trace_id"] = pa.array([r.trace_id for r in runs], pa.string())
    columns["span_id"] = pa.array([r.span_id for r in runs], pa.string())
    columns["service"] = pa.array([r.service for r in runs], pa.string())
    columns["task_type"] = pa.array(task_types, pa.string())
    columns["start_ns"] = pa.array([r.start_ns for r in runs], pa.int64())
    columns["end_ns"] = pa.array([r.end_ns for r in runs], pa.int64())
    columns["stop_reason"] = pa.array(stop_reasons, pa.string())
    columns["outcome"] = pa.array(outcomes, pa.string())
    columns["source"] = pa.array([source] * len(runs), pa.string())
    return pa.table({c: columns[c] for c in RUN_COLUMNS})


# BY NAME rather than two column lists: DuckDB binds it ~0.2 ms faster per statement. The
# Arrow tables hold exactly SPAN_COLUMNS / RUN_COLUMNS.
_INSERT_SPANS: Final = "INSERT INTO spans BY NAME SELECT * FROM _lw_spans_batch"
# A run seen again keeps its latest row. Plain INSERT first: an upsert costs twice as much,
# and a run id repeats only on a retried export or a re-import.
_INSERT_RUNS: Final = (
    "INSERT INTO runs BY NAME "
    "SELECT *, make_timestamp(start_ns // 1000) AS started_at FROM _lw_runs_batch"
)
_UPSERT_RUNS: Final = _INSERT_RUNS.replace("INSERT INTO", "INSERT OR REPLACE INTO", 1)


# Spans shaped like a loop's (a run span, a tool span with an event and an untyped attribute)
# so that Store.warm_up touches every kind of column conversion once.
_WARM_UP_RECORDS: Final = (
    SpanRecord(
        "0" * 31 + "1",
        "0" * 15 + "1",
        f"{sc.SPAN_RUN} warm-up",
        1,
        2,
        attributes={
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.RUN_ID: "warm-up",
            sc.TASK_TYPE: "warm-up",
            sc.STOP_REASON: str(StopReason.COMPLETED),
            sc.STEP_INDEX: 1,
            sc.GEN_AI_USAGE_INPUT_TOKENS: 1,
            sc.COST_USD: 0.5,
            sc.budget_used("steps"): 1,
            sc.TASK_SUCCESS: True,
        },
    ),
    SpanRecord(
        "0" * 31 + "1",
        "0" * 15 + "2",
        "execute_tool warm-up",
        1,
        2,
        parent_span_id="0" * 15 + "1",
        kind="CLIENT",
        status_code="ERROR",
        status_message="warm-up",
        service="warm-up",
        attributes={sc.GEN_AI_TOOL_NAME: "warm-up", "warm.up": ["a"], sc.TOOL_RETRIES: 0},
        events=(EventRecord("warm-up", 1, {"n": 1}),),
    ),
)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One batch converted to Arrow, ready to insert."""

    spans: pa.Table
    """The ``spans`` rows."""
    runs: pa.Table | None
    """The ``runs`` rows, ``None`` when the batch holds no run span."""
    count: int
    """How many spans the batch holds."""


# --- the store -------------------------------------------------------------------------


def _schema_sql() -> str:
    return resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


def _check_schema(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
    """Create the schema in a new file; refuse a file with another schema."""
    try:
        tables = {
            row[0]
            for row in con.execute(
                "SELECT table_name FROM duckdb_tables() "
                "WHERE database_name = current_database() AND schema_name = 'main'"
            ).fetchall()
        }
        if "schema_version" in tables:
            row = con.execute("SELECT max(version) FROM schema_version").fetchone()
            found = None if row is None else row[0]
            if found != SCHEMA_VERSION:
                raise SchemaVersionError(path, int(found) if found is not None else None)
            return
        if tables or read_only:
            raise SchemaVersionError(path, None)
        con.begin()
        con.execute(_schema_sql())
        con.execute("INSERT INTO schema_version (version) VALUES (?)", [SCHEMA_VERSION])
        con.commit()
    except duckdb.Error as exc:
        raise _open_error(exc, path, read_only) from exc


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    if read_only and not path.exists():
        raise StoreNotFoundError(path)
    if not read_only and path.is_file() and path.stat().st_size == 0:
        # An empty file (e.g. made by mktemp) holds nothing to lose: start a store in it.
        path.unlink()
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise _open_error(exc, path, read_only) from exc
    try:
        _check_schema(con, path, read_only)
    except BaseException:
        con.close()
        raise
    return con


def connect_read_only(path: str | os.PathLike[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to a loopwatch store, its schema version checked.

    ``path`` defaults as in :func:`resolve_db_path`. The caller closes the connection. Raises
    :class:`StoreNotFoundError`, :class:`StoreLockedError` (a writer holds the file),
    :class:`StoreCorruptError` or :class:`SchemaVersionError`.
    """
    return _connect(resolve_db_path(path), read_only=True)


class Store:
    """A loopwatch DuckDB store, open for writing (the default) or read-only.

    A new file gets the schema and its ``schema_version``; an existing one must have version
    :data:`SCHEMA_VERSION`. ``threads`` caps DuckDB's threads for this database (``None``:
    DuckDB's default, one per core); ``checkpoint_mb`` is how much write-ahead log DuckDB lets
    grow before it folds it into the file (``None``: DuckDB's 16 MB; more is faster to ingest,
    and costs that much memory, WAL on disk and replay time after a crash). Writes are
    serialised by a lock, so one ``Store`` may be shared by threads; readers in the same
    process use :meth:`cursor`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        read_only: bool = False,
        threads: int | None = None,
        checkpoint_mb: int | None = None,
    ) -> None:
        self.path: Path = resolve_db_path(path)
        """The store file."""
        self.read_only: bool = read_only
        """Whether this store was opened read-only."""
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = _connect(self.path, read_only)
        settings: list[tuple[str, str, object]] = []
        if threads is not None:
            # A batch of a few thousand rows gains nothing from more threads, and a writer
            # inside an agent process should not compete with the agent for cores.
            settings.append(("threads", "SET threads = ?", threads))
        if checkpoint_mb is not None:
            settings.append(
                ("checkpoint_mb", "SET checkpoint_threshold = ?", f"{int(checkpoint_mb)}MB")
            )
        for name, sql, value in settings:
            try:
                self._con.execute(sql, [value])
            except (duckdb.Error, ValueError) as exc:
                self._con.close()
                raise StoreError(
                    f"cannot set {name}={value!r} on {self.path} ({_one_line(str(exc))}): "
                    "pass a positive integer or None.",
                    self.path,
                ) from exc
        # Writes go through their own connection, so a result left unread on `connection`
        # (or a transaction left open there) never blocks them.
        self._writer: duckdb.DuckDBPyConnection | None = None if read_only else self._con.cursor()
        if self._writer is not None:
            # The writer only runs INSERT ... SELECT from an Arrow table, which optimizing
            # cannot improve; the optimizer's passes cost ~0.5 ms per statement. A setting of
            # this connection only: `connection` and cursors keep it.
            with contextlib.suppress(duckdb.Error):
                self._writer.execute("PRAGMA disable_optimizer")

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The underlying connection. Use it from one thread at a time, or use :meth:`cursor`."""
        if self._con is None:
            raise StoreError(f"store {self.path} is closed: open a new Store.", self.path)
        return self._con

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the same database, for use in another thread."""
        return self.connection.cursor()

    def write_spans(self, spans: Iterable[ReadableSpan]) -> int:
        """Store finished SDK spans; see :meth:`write_records`."""
        return self.write_records(records_from_spans(spans))

    def write_dicts(self, spans: Iterable[Mapping[str, Any]], *, source: str = "otel") -> int:
        """Store already-decoded span dicts (see :meth:`SpanRecord.from_dict`)."""
        return self.write_records([SpanRecord.from_dict(d) for d in spans], source=source)

    def write_records(self, records: Sequence[SpanRecord], *, source: str = "otel") -> int:
        """Store one batch in one transaction and return how many spans it held.

        Every span goes to ``spans`` (unkeyed: a span written twice is there twice); every
        run span also upserts its row in ``runs``, with ``source`` in its ``source`` column.
        When this returns, the batch is committed. Records whose ids, name, kind, status or
        times are missing or ill-typed cannot be stored: they raise :class:`ValueError`
        before anything is written. Raises :class:`StoreError` if the write fails; then
        nothing of the batch is stored.
        """
        self._check_writable()
        if not records:
            return 0
        return self._commit(self._prepare(records, source))

    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreError(
                f"store {self.path} is open read-only: open it with Store(path) to write.",
                self.path,
            )

    @staticmethod
    def _prepare(records: Sequence[SpanRecord], source: str) -> _Prepared:
        """The Arrow tables of one batch of records."""
        spans, run_spans = _build(records)
        return _Prepared(spans, _runs_table(run_spans, source), len(records))

    def _commit(self, batch: _Prepared) -> int:
        """Insert one prepared batch in one transaction."""
        spans, runs = batch.spans, batch.runs
        with self._lock:
            con = self._open_writer()
            try:
                try:
                    self._insert(con, spans, runs, _INSERT_RUNS)
                except duckdb.ConstraintException:
                    if runs is None:
                        raise
                    self._insert(con, spans, runs, _UPSERT_RUNS)
            except duckdb.Error as exc:
                raise StoreError(
                    f"writing {batch.count} spans to {self.path} failed "
                    f"({_one_line(str(exc))}): check free disk space and file permissions.",
                    self.path,
                ) from exc
        return batch.count

    def warm_up(self) -> None:
        """Run the write path once on sample spans and roll it back: nothing is stored.

        The first write in a process pays one-time costs (pyarrow imports pandas on its first
        conversion, DuckDB prepares its Arrow scan) that take ~0.3-0.6 s, against ~35 ms for a
        later batch. Paying them when the store is opened keeps them out of the first batch a
        running agent sends (where they would let a fast producer fill the queue). Raises
        :class:`StoreError` when the write itself fails (then later writes would fail too).
        """
        if self.read_only:
            return
        spans, run_spans = _build(_WARM_UP_RECORDS)
        runs = _runs_table(run_spans, "otel")
        with self._lock:
            con = self._open_writer()
            try:
                self._insert(con, spans, runs, _UPSERT_RUNS, end="ROLLBACK")
            except duckdb.Error as exc:
                raise StoreError(
                    f"a trial write to {self.path} failed ({_one_line(str(exc))}): check free "
                    "disk space and file permissions.",
                    self.path,
                ) from exc

    def _open_writer(self) -> duckdb.DuckDBPyConnection:
        con = self._writer
        if con is None:
            raise StoreError(f"store {self.path} is closed: open a new Store.", self.path)
        return con

    @staticmethod
    def _insert(
        con: duckdb.DuckDBPyConnection,
        spans: pa.Table,
        runs: pa.Table | None,
        runs_sql: str,
        *,
        end: str = "COMMIT",
    ) -> None:
        """Insert one batch in one transaction ended by ``end`` (rolled back on any error)."""
        # DuckDB finds these tables by name among the caller's local variables (its
        # replacement scan): ~1 ms less per table than con.register/unregister, which change
        # the catalog each time.
        _lw_spans_batch = spans
        _lw_runs_batch = runs
        # One call for the whole transaction: each call into DuckDB has a fixed cost, and
        # gives the GIL up and takes it back (up to 5 ms when the agent's thread is busy).
        sql = f"{runs_sql}; {end}" if runs is not None else end
        try:
            con.execute(f"BEGIN TRANSACTION; {_INSERT_SPANS}; {sql}")
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # DuckDB may have ended it already
                con.rollback()
            raise

    def close(self) -> None:
        """Checkpoint and close the file (idempotent). Other processes may open it afterwards."""
        with self._lock:
            con, self._con = self._con, None
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if con is not None:
            con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        state = "closed" if self._con is None else mode
        return f"Store({str(self.path)!r}, {state})"
