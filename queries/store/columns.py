"""Finished spans as Arrow tables: the ``spans`` and ``runs`` rows of one batch.

Two front ends meet here: finished SDK spans (:func:`records_from_spans`) and already-decoded
spans (:class:`SpanRecord`, e.g. from OTLP). The store inserts what this module builds; nothing
here touches DuckDB.

A typed column holds an attribute only when its value has the column's type; otherwise the
column is NULL and the raw value goes, as it was, into the row's ``attributes`` JSON.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter, eq, itemgetter, methodcaller
from typing import TYPE_CHECKING, Any, Final

from loopwatch.instrumentation.runtime.extras import MissingExtraError

try:
    import opentelemetry.sdk.trace  # noqa: F401 (fail early, naming the extra)
    import pyarrow  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("store", __name__, exc) from exc

import pyarrow as pa
from loopwatch.instrumentation.runtime import semconv as sc
from loopwatch.instrumentation.runtime.detectors import DETECTORS
from loopwatch.instrumentation.runtime.reasons import OUTCOME_OF, StopReason
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from .plaingenai import fill_plain_genai, lacks_genai_fields

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "RUNS_SCHEMA",
    "RUN_COLUMNS",
    "SPANS_SCHEMA",
    "SPAN_COLUMNS",
    "SPAN_TYPED_COLUMNS",
    "UNKNOWN",
    "EventRecord",
    "SpanBatch",
    "SpanColumns",
    "SpanRecord",
    "record_from_span",
    "records_from_spans",
    "runs_table",
    "spans_table",
]

UNKNOWN: Final = "unknown"
"""Stored in the ``runs`` columns that may not be NULL when the run span lacks the attribute."""

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
    rows = _rows_of_spans(spans if isinstance(spans, Sequence) else list(spans))
    return [rows.record(i) for i in range(len(rows))]


# The SDK span fields the column-wise conversion reads, fetched by C-level attrgetters (a
# Python loop over spans costs ~2 us per span).
_G_FIELDS: Final = attrgetter(
    "_context",
    "_parent",
    "_name",
    "_kind",
    "_status",
    "_start_time",
    "_end_time",
    "_resource",
    "_attributes",
    "_events",
)
_G_CODE: Final = attrgetter("_status_code")
_G_DESCRIPTION: Final = attrgetter("_description")
_G_DICT: Final = attrgetter("_dict")
_G_DEQUE: Final = attrgetter("_dq")
# SpanContext is a tuple (trace_id, span_id, ...); its properties are Python calls.
_G_TRACE_ID: Final = itemgetter(0)
_G_SPAN_ID: Final = itemgetter(1)
_HEX16: Final = "%016x".__mod__
_HEX32: Final = "%032x".__mod__
_CONTEXT_IS_TUPLE: Final = tuple(SpanContext(3, 5, False)[:2]) == (3, 5)


def _rows_of_spans(spans: Sequence[ReadableSpan]) -> SpanColumns:
    """Finished SDK spans as column lists (spans without a context skipped).

    Reads the SDK span's fields when it has the layout of the SDK this was written against,
    else goes through :func:`records_from_spans` (its public properties).
    """
    try:
        return _rows_of_sdk_spans(spans)
    except (AttributeError, KeyError, TypeError, IndexError):
        records = [r for r in map(_record_public, spans) if r is not None]
        return _rows_of_records(records)


def _rows_of_sdk_spans(spans: Sequence[ReadableSpan]) -> SpanColumns:
    if not _CONTEXT_IS_TUPLE:
        raise TypeError("SpanContext is not a tuple in this OpenTelemetry API")
    # One pass over the spans (a batch of them outgrows the CPU caches: a pass per field would
    # fetch every span from memory again), then columns by zip().
    fields = list(map(_G_FIELDS, spans))
    if any(row[0] is None for row in fields):
        fields = [row for row in fields if row[0] is not None]
    if not fields:
        return _rows_of_records([])
    (
        contexts,
        parents,
        names,
        kinds,
        statuses,
        starts,
        ends,
        resources,
        raw_attributes,
        raw_events,
    ) = map(list, zip(*fields, strict=True))
    trace_ids = list(map(_G_TRACE_ID, contexts))
    trace_hex = {t: _HEX32(t) for t in set(trace_ids)}  # a run's spans share one trace
    distinct = dict(zip(map(id, resources), resources, strict=True))
    service_of = {key: _service_of(resource) for key, resource in distinct.items()}
    if None in starts:
        starts = [s or 0 for s in starts]
    if None in ends:
        ends = [s if e is None else e for s, e in zip(starts, ends, strict=True)]
    if set(map(type, raw_attributes)) == {BoundedAttributes}:
        attributes = list(map(_G_DICT, raw_attributes))
    else:
        attributes = [dict(_plain(a)) for a in raw_attributes]
    if set(map(type, raw_events)) == {BoundedList}:
        # Its __len__ and __iter__ run Python code under a lock.
        raw_events = list(map(_G_DEQUE, raw_events))
    events: list[Sequence[EventRecord]] = [()] * len(raw_events)
    for i in compress(range(len(raw_events)), raw_events):
        events[i] = _events_of(raw_events[i])
    return SpanColumns(
        trace_id=list(map(trace_hex.__getitem__, trace_ids)),
        span_id=list(map(_HEX16, map(_G_SPAN_ID, contexts))),
        parent_span_id=[None if p is None else _HEX16(p[1]) for p in parents],
        name=names,
        kind=list(map(_KIND_NAMES.__getitem__, map(id, kinds))),
        start_ns=starts,
        end_ns=ends,
        status_code=list(map(_STATUS_NAMES.__getitem__, map(id, map(_G_CODE, statuses)))),
        status_message=list(map(_G_DESCRIPTION, statuses)),
        service=list(map(service_of.__getitem__, map(id, resources))),
        attributes=attributes,
        events=events,
    )


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
    ("conversation_id", sc.GEN_AI_CONVERSATION_ID, _STR),
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
    # what the replay of an imported run found (queries read these, not the span's JSON)
    ("replay_decision", sc.REPLAY_STOP_REASON, _STR),
    ("replay_step", sc.REPLAY_STEP, _INT32),
    ("replay_saved_tokens", sc.REPLAY_SAVED_PREFIX + "tokens", _FLOAT),
    ("replay_saved_model_calls", sc.REPLAY_SAVED_PREFIX + "model_calls", _FLOAT),
    *((f"peak_{d.value}", sc.REPLAY_PEAK_PREFIX + d.value, _INT32) for d in DETECTORS),
    # what a live run's shadow limits would have done
    ("shadow_decision", sc.SHADOW_STOP_REASON, _STR),
    ("shadow_limits_version", sc.SHADOW_LIMITS_VERSION, _STR),
    ("shadow_step", sc.SHADOW_STEP, _INT32),
    ("shadow_saved_tokens", sc.SHADOW_SAVED_PREFIX + "tokens", _FLOAT),
    ("shadow_saved_cost_usd", sc.SHADOW_SAVED_PREFIX + "cost_usd", _FLOAT),
    ("shadow_saved_model_calls", sc.SHADOW_SAVED_PREFIX + "model_calls", _FLOAT),
    # how often the run's detectors nudged the model before it ended
    ("nudges", sc.NUDGES, _INT32),
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

SPANS_SCHEMA: Final = pa.schema(
    [
        *SPAN_BASE_COLUMNS,
        *((column, _ARROW_TYPE[kind]) for column, _, kind in SPAN_TYPED_COLUMNS),
        ("attributes", _JSON),
        ("events", _JSON),
    ]
)
"""The Arrow schema of a batch's ``spans`` rows: the one definition of what a span row holds."""

RUNS_SCHEMA: Final = pa.schema(
    [
        ("run_id", pa.string()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("service", pa.string()),
        ("task_type", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("stop_reason", pa.string()),
        ("outcome", pa.string()),
        ("source", pa.string()),
        *((column, _ARROW_TYPE[kind]) for column, _, kind in RUN_ATTRIBUTE_COLUMNS),
    ]
)
"""The Arrow schema of a batch's ``runs`` rows (``started_at`` is derived from ``start_ns``)."""

_ROW_DEFAULTS: Final = {"attributes": "{}", "events": "[]"}


def _rows_table(
    rows: Sequence[Mapping[str, Any]], schema: pa.Schema, what: str, required: tuple[str, ...]
) -> pa.Table:
    known = set(schema.names)
    for row in rows:
        unknown = row.keys() - known
        if unknown:
            raise ValueError(f"{what} rows have no column {sorted(unknown)[0]!r}")
        for name in required:
            if row.get(name) is None:
                raise ValueError(f"{what} row {dict(row)!r} lacks {name!r}")
    columns = {}
    for f in schema:
        default = _ROW_DEFAULTS.get(f.name) if what == "spans" else None
        values = [row.get(f.name, default) for row in rows]
        if pa.types.is_floating(f.type):
            values = [None if v is None else float(v) for v in values]
        try:
            columns[f.name] = pa.array(values, f.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"{what} column {f.name!r} cannot hold these values ({exc})") from exc
    return pa.table(columns, schema=schema)


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
    to_float = kind == _FLOAT
    for i, value in enumerate(values):
        if value is None or _valid(value, kind):
            # Arrow refuses an int a double cannot hold exactly (above 2**53): round it here.
            clean.append(float(value) if to_float and value is not None else value)
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
_RAW_KEPT: Final = {
    c: _COLUMN_OF_KEY[k]
    for c, k in (
        ("operation", sc.GEN_AI_OPERATION_NAME),
        ("task_type", sc.TASK_TYPE),
        ("tool_status", sc.TOOL_STATUS),
    )
}
"""The typed columns whose raw values ``_table`` reads (run spans; what plain GenAI spans lack)."""
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


def _base_array(
    values: list[Any],
    name: str,
    arrow_type: pa.DataType,
    span_ids: list[Any],
    order: list[int] | None = None,
) -> pa.Array:
    """One base column, its rows in ``order`` (positions; ``None``: as given);
    :class:`ValueError` naming the first span whose value cannot be stored."""
    allowed = _BASE_ALLOWED[name]
    if set(map(type, values)) <= allowed:
        try:
            # Reordered here, not by Array.take: that imports pyarrow.compute (~0.08 CPU s, in
            # each import worker process), for about the same time as this list.
            return pa.array(values if order is None else list(map(values.__getitem__, order)),
                            arrow_type)  # fmt: skip
        except (pa.ArrowException, OverflowError, ValueError, TypeError):
            pass  # an int out of range: find it below
    bad = next(
        (
            i
            for i, v in enumerate(values)
            if type(v) not in allowed or (type(v) is int and not _INT64_MIN <= v <= _INT64_MAX)
        ),
        0,
    )
    raise ValueError(
        f"span record {span_ids[bad]!r} has a missing or ill-typed {name}: "
        "decode spans into SpanRecord's field types"
    )


_INT64_MIN, _INT64_MAX = _INT_RANGE[_INT64]
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


# Value types whose equal values always have the same JSON: 1 == 1.0 == True and 0.0 == -0.0,
# so columns mixing numbers, or holding floats, are encoded row by row.
_MEMO_SAFE: Final = (frozenset({str, _NONE}), frozenset({int, _NONE}), frozenset({bool, _NONE}))


def _memo_safe(values: Sequence[Any]) -> bool:
    types = set(map(type, values))
    if types == {tuple}:
        types = set(map(type, chain.from_iterable(values))) or {str}
    return any(types <= safe for safe in _MEMO_SAFE)


def _rest_json(pairs: tuple[tuple[int, str], ...], by_position: list[tuple[Any, ...]]) -> list[str]:
    """The ``attributes`` JSON of one key-set group: its attributes without a typed column."""
    keys = [k for _, k in pairs]
    columns = [by_position[p] for p, _ in pairs]
    rows = list(zip(*columns, strict=True))
    if all(map(_memo_safe, columns)):
        # Rows of one kind often repeat these values (finish reasons, agent names): encode
        # each distinct combination once.
        memo = dict.fromkeys(rows, "")
        for row in memo:
            memo[row] = _to_json(dict(zip(keys, row, strict=True)))
        return list(map(memo.__getitem__, rows))
    return [_to_json(dict(zip(keys, row, strict=True))) for row in rows]


def _attribute_columns(
    grouped: Sequence[tuple[tuple[str, ...], Sequence[tuple[Any, ...]]]],
) -> tuple[dict[str, pa.Array], dict[str, list[Any]]]:
    """The typed attribute columns and the ``attributes`` JSON column of rows grouped by key set,
    and each row's raw value of the :data:`_RAW_KEPT` columns (``None`` when it has none; a
    value its column refused is kept here).

    ``grouped`` holds, in row order, each key set with its rows' attribute values, in key order.
    """
    # Spans of one kind share their attribute keys. Grouping rows by key set lets one plan
    # route a whole group's values, transposed in C by zip(), instead of one key at a time.
    n_typed = len(SPAN_TYPED_COLUMNS)
    values: list[list[Any]] = [[] for _ in range(n_typed)]
    present = [False] * n_typed
    rest: list[str] = []
    for keys, group_values in grouped:
        plan = _plan(keys)
        size = len(group_values)
        by_position = list(zip(*group_values, strict=True)) if keys else []
        for position, index in plan.typed:
            values[index].extend(by_position[position])
            present[index] = True
        if plan.missing:
            nones = [None] * size
            for index in plan.missing:
                values[index].extend(nones)
        if plan.rest:
            rest.extend(_rest_json(plan.rest, by_position))
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
        flat = [(keys, v) for keys, group_values in grouped for v in group_values]
        for row, raw in kept.items():
            # Rare: rebuild this row's JSON with the values its typed columns refused.
            keys, row_values = flat[row]
            extra = {
                k: v
                for k, v in zip(keys, row_values, strict=True)
                if k not in _COLUMN_OF_KEY or k in raw
            }
            rest[row] = _to_json(extra)
    columns["attributes"] = pa.array(rest, _JSON)
    raw = {
        column: values[index] if present[index] else [None] * n
        for column, index in _RAW_KEPT.items()
    }
    return columns, raw


@dataclass(slots=True, kw_only=True)
class SpanColumns:
    """One batch of spans as column lists, in arrival order: what every front end produces.

    Each list has one entry per span; the field names and value types are those of
    :class:`SpanRecord`. The OTLP decoder fills these lists directly (no record per span);
    :meth:`from_records` and :meth:`from_sdk_spans` build them from the other front ends.
    """

    trace_id: list[Any]
    span_id: list[Any]
    parent_span_id: list[Any]
    name: list[Any]
    kind: list[Any]
    start_ns: list[Any]
    end_ns: list[Any]
    status_code: list[Any]
    status_message: list[Any]
    service: list[Any]
    attributes: list[dict[str, Any]]
    events: list[Sequence[EventRecord]]

    def __len__(self) -> int:
        return len(self.span_id)

    @classmethod
    def empty(cls) -> SpanColumns:
        """Columns holding no span, to append to."""
        return cls(**{name: [] for name in _COLUMN_FIELDS})

    @classmethod
    def from_records(cls, records: Sequence[SpanRecord]) -> SpanColumns:
        """The columns of already-decoded records."""
        return _rows_of_records(records)

    @classmethod
    def from_sdk_spans(cls, spans: Iterable[ReadableSpan]) -> SpanColumns:
        """The columns of finished SDK spans (spans without a span context are skipped)."""
        return _rows_of_spans(spans if isinstance(spans, Sequence) else list(spans))

    def record(self, i: int) -> SpanRecord:
        """Row ``i`` as a record."""
        return SpanRecord(
            self.trace_id[i],
            self.span_id[i],
            self.name[i],
            self.start_ns[i],
            self.end_ns[i],
            self.parent_span_id[i],
            self.kind[i],
            self.status_code[i],
            self.status_message[i],
            self.service[i],
            self.attributes[i],
            self.events[i],
        )


def _rows_of_records(records: Sequence[SpanRecord]) -> SpanColumns:
    def column(name: str) -> list[Any]:
        return list(map(attrgetter(name), records))

    return SpanColumns(
        trace_id=column("trace_id"),
        span_id=column("span_id"),
        parent_span_id=column("parent_span_id"),
        name=column("name"),
        kind=column("kind"),
        start_ns=column("start_ns"),
        end_ns=column("end_ns"),
        status_code=column("status_code"),
        status_message=column("status_message"),
        service=column("service"),
        attributes=[a if type(a) is dict else dict(a) for a in column("attributes")],
        events=column("events"),
    )


def _table(rows: SpanColumns) -> tuple[pa.Table, list[int]]:
    """The ``spans`` Arrow table of ``rows``, and the positions of the run spans among them.

    Rows come out grouped by attribute key set, not in the order given (row order means
    nothing in the table). Raises :class:`ValueError` if a span's ids, name, kind, status or
    times are missing or ill-typed (such a span cannot be stored).
    """
    n = len(rows)
    # Each attribute dict read once for its keys and values together: a batch of them does
    # not fit the CPU caches, so a second pass would fetch each from memory again.
    keys, values = (
        zip(*[(tuple(a), tuple(a.values())) for a in rows.attributes], strict=True)
        if n
        else ((), ())
    )
    # Spans of one kind share their attribute keys: group rows by key set (see
    # _attribute_columns), numbering the key sets in order of first sight.
    number = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    group_of = list(map(number.__getitem__, keys))
    order = sorted(range(n), key=group_of.__getitem__) if len(number) > 1 else None
    sizes = Counter(group_of)
    ordered = list(values) if order is None else list(map(values.__getitem__, order))
    grouped = []
    start = 0
    for k, g in number.items():
        grouped.append((k, ordered[start : start + sizes[g]]))
        start += sizes[g]
    columns: dict[str, pa.Array] = {}
    for name, arrow_type in SPAN_BASE_COLUMNS:
        columns[name] = _base_array(getattr(rows, name), name, arrow_type, rows.span_id, order)
    attribute_columns, raw = _attribute_columns(grouped)
    operations = raw["operation"]
    columns.update(attribute_columns)
    events = rows.events if order is None else list(map(rows.events.__getitem__, order))
    columns["events"] = pa.array([_events_json(e) if e else "[]" for e in events], _JSON)
    if lacks_genai_fields(operations, raw["task_type"], raw["tool_status"]):
        fill_plain_genai(columns, UNKNOWN)
    table = pa.table({c: columns[c] for c in SPAN_COLUMNS})
    runs = set(compress(range(n), map(methodcaller("startswith", sc.SPAN_RUN), rows.name)))
    invoked = compress(range(n), map(eq, operations, repeat(sc.OP_INVOKE_AGENT)))
    runs.update(invoked if order is None else map(order.__getitem__, invoked))
    return table, sorted(runs)


_COLUMN_FIELDS: Final = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "status_code",
    "status_message",
    "service",
    "attributes",
    "events",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpanBatch:
    """One batch on its way into the store: the Arrow rows of ``spans`` and of ``runs``.

    Every writer builds one (finished SDK spans, decoded OTLP, records, synthetic rows) and
    hands it to :meth:`~loopwatch.queries.store.Store.write`, which stores it whole in one
    transaction. ``deliveries`` are the keys of the OTLP requests the batch holds, recorded in
    the same transaction so that a request retried after a lost acknowledgement is recognised
    and not stored twice.
    """

    spans: pa.Table | None
    """The ``spans`` rows (columns :data:`SPAN_COLUMNS`, types :data:`SPANS_SCHEMA`)."""
    runs: pa.Table | None
    """The ``runs`` rows (columns :data:`RUN_COLUMNS`), ``None`` when there are none."""
    count: int
    """How many spans the batch holds."""
    deliveries: tuple[str, ...] = ()
    """Keys of the deliveries (OTLP requests) this batch holds."""
    new_runs: bool = False
    """Whether its writer knows that none of its runs is stored yet (synthetic data; an import,
    which removes the runs it replaces itself): the store then skips looking for them."""

    @classmethod
    def from_columns(
        cls, columns: SpanColumns, *, source: str = "otel", deliveries: Sequence[str] = ()
    ) -> SpanBatch:
        """The batch of spans given as columns; every run span also gives its ``runs`` row
        (``source`` in its ``source`` column). Raises :class:`ValueError` for a span whose ids,
        name, kind, status or times are missing or ill-typed (nothing of the batch is kept)."""
        table, run_positions = _table(columns)
        runs = _runs_table([columns.record(i) for i in run_positions], source)
        return cls(spans=table, runs=runs, count=len(columns), deliveries=tuple(deliveries))

    @classmethod
    def from_records(
        cls, records: Sequence[SpanRecord], *, source: str = "otel", deliveries: Sequence[str] = ()
    ) -> SpanBatch:
        """The batch of already-decoded records (see :meth:`from_columns`)."""
        return cls.from_columns(
            SpanColumns.from_records(records), source=source, deliveries=deliveries
        )

    @classmethod
    def from_sdk_spans(cls, spans: Iterable[ReadableSpan]) -> SpanBatch:
        """The batch of finished SDK spans (spans without a span context are skipped)."""
        return cls.from_columns(SpanColumns.from_sdk_spans(spans))

    @classmethod
    def from_rows(
        cls,
        *,
        spans: Sequence[Mapping[str, Any]] = (),
        runs: Sequence[Mapping[str, Any]] = (),
    ) -> SpanBatch:
        """A batch of rows already in the store's column shape (keys: column names of
        :data:`SPANS_SCHEMA` / :data:`RUNS_SCHEMA`; columns left out are NULL, ``attributes``
        ``{}`` and ``events`` ``[]``). For synthetic data and imports that compute the columns
        themselves; ``runs`` rows are stored as given, not derived from the spans. Raises
        :class:`ValueError` naming an unknown column or a value its column cannot hold."""
        span_table = _rows_table(spans, SPANS_SCHEMA, "spans", _SPAN_REQUIRED) if spans else None
        run_table = _rows_table(runs, RUNS_SCHEMA, "runs", _RUN_REQUIRED) if runs else None
        return cls(spans=span_table, runs=run_table, count=len(spans))

    @classmethod
    def concat(cls, batches: Sequence[SpanBatch]) -> SpanBatch:
        """One batch holding all of ``batches`` (to commit them in one transaction)."""
        if len(batches) == 1:
            return batches[0]
        spans = [b.spans for b in batches if b.spans is not None and b.spans.num_rows]
        runs = [b.runs for b in batches if b.runs is not None and b.runs.num_rows]
        return cls(
            spans=pa.concat_tables(spans) if spans else None,
            runs=_latest_runs(pa.concat_tables(runs)) if runs else None,
            count=sum(b.count for b in batches),
            deliveries=tuple(chain.from_iterable(b.deliveries for b in batches)),
            new_runs=all(b.new_runs for b in batches),
        )


_SPAN_REQUIRED: Final = (
    "trace_id", "span_id", "name", "kind", "start_ns", "end_ns", "status_code"
)  # fmt: skip
_RUN_REQUIRED: Final = (
    "run_id", "task_type", "start_ns", "end_ns", "stop_reason", "outcome", "source"
)  # fmt: skip


def _latest_runs(runs: pa.Table) -> pa.Table:
    """``runs`` with one row per run id, the last one given (as the store keeps it)."""
    ids = runs.column("run_id").to_pylist()
    last = {run_id: i for i, run_id in enumerate(ids)}
    if len(last) == len(ids):
        return runs
    return runs.take(pa.array(sorted(last.values()), pa.int64()))


def spans_table(records: Sequence[SpanRecord]) -> pa.Table:
    """The Arrow table of ``spans`` rows for ``records`` (columns :data:`SPAN_COLUMNS`).

    A value that does not fit its typed column leaves the column NULL and goes, as it was,
    into the row's ``attributes`` JSON. Rows come out grouped by attribute key set, not in the
    order given. Raises :class:`ValueError` for a record whose ids, name, kind, status or
    times are missing or ill-typed.
    """
    return _table(SpanColumns.from_records(records))[0]


_STOP_REASONS: Final = frozenset(r.value for r in StopReason)
_RUN_TYPES: Final = {c: _ARROW_TYPE[k] for c, _, k in RUN_ATTRIBUTE_COLUMNS}
# Columns filled from elsewhere when the run span lacks their attribute (input + output tokens
# for tokens, the span name for the agent, the call-cost attribute for cost, the span's own
# duration for wall_s).
_RUN_FILLED: Final = (
    "agent_name", "conversation_id", "cost_usd", "tokens", "input_tokens", "output_tokens",
    "wall_s",
)  # fmt: skip
# Where a run's conversation id may be, after gen_ai.conversation.id: OpenInference's session
# id, and loopwatch's own key of earlier versions (spans recorded before, `loopwatch import`).
_CONVERSATION_FALLBACKS: Final = (sc.OI_SESSION_ID, sc.CONVERSATION_ID)


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
        array, _ = _typed_array(column_values, kind)
        if column in _RUN_FILLED:
            raw[column] = array.to_pylist()  # as stored: refused values None, big ints rounded
        else:
            columns[column] = array
    # Fill what a run span lacks, so that the NOT NULL columns always hold something.
    task_types = [a.get(sc.TASK_TYPE) for a in attrs]
    stop_reasons = [a.get(sc.STOP_REASON) for a in attrs]
    outcomes = [a.get(sc.OUTCOME) for a in attrs]
    agent_names, costs, tokens = raw["agent_name"], raw["cost_usd"], raw["tokens"]
    walls, conversations = raw["wall_s"], raw["conversation_id"]
    for i, record in enumerate(runs):
        if conversations[i] is None:
            for key in _CONVERSATION_FALLBACKS:
                value = attrs[i].get(key)
                if type(value) is str and value:
                    conversations[i] = value
                    break
        if walls[i] is None and record.end_ns >= record.start_ns:
            walls[i] = (record.end_ns - record.start_ns) / 1e9
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
            costs[i] = float(cost) if cost is not None and _valid(cost, _FLOAT) else None
        if tokens[i] is None:
            tin, tout = raw["input_tokens"][i], raw["output_tokens"][i]
            if tin is not None or tout is not None:
                tokens[i] = float((tin or 0) + (tout or 0))
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
