"""OTLP trace requests (protobuf or JSON) decoded into store columns, for ``loopwatch serve``.

:func:`decode_request` takes the body of one ``POST /v1/traces`` (already decompressed) and
gives the :class:`~loopwatch.queries.store.SpanColumns` of the spans that can be stored, plus
how many were rejected and why (OTLP's partial success). A body that is not an
``ExportTraceServiceRequest`` at all raises :class:`OtlpDecodeError` with the reason.

OTLP/JSON follows the OTLP specification, not the generic protobuf JSON mapping: trace and span
ids are hex strings, enums integers, 64-bit integers strings or numbers. It is mapped onto the
protobuf message and decoded by the same code as protobuf, so both encodings store the same rows.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from loopwatch.instrumentation.runtime.extras import MissingExtraError

try:
    import opentelemetry.proto  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("store", __name__, exc) from exc

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ..store.columns import EventRecord, SpanColumns

__all__ = [
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_PROTOBUF",
    "DecodedRequest",
    "OtlpDecodeError",
    "decode_request",
    "encode_response",
]

CONTENT_TYPE_PROTOBUF: Final = "application/x-protobuf"
"""OTLP/HTTP binary protobuf."""
CONTENT_TYPE_JSON: Final = "application/json"
"""OTLP/HTTP JSON."""

_KINDS: Final = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
"""SpanKind by number (0, unspecified, is stored as INTERNAL, as the SDK's default)."""
_STATUS: Final = ("UNSET", "OK", "ERROR")
_INT64_MAX: Final = 2**63 - 1
_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)
_MAX_DEPTH: Final = 32
_MAX_REASONS: Final = 3


class OtlpDecodeError(ValueError):
    """The body is not an OTLP ``ExportTraceServiceRequest``; the message says why."""


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    """One decoded request: the spans to store, and those refused with the reasons."""

    columns: SpanColumns
    """The spans that can be stored, in the order received."""
    rejected: int
    """Spans refused (no valid ids, times out of range)."""
    reasons: tuple[str, ...]
    """Up to three distinct reasons for the refusals, for the partial-success message."""


def decode_request(body: bytes, content_type: str) -> DecodedRequest:
    """Decode an uncompressed OTLP trace request body of ``content_type`` (protobuf or JSON).

    Raises :class:`OtlpDecodeError` when the body cannot be read at all.
    """
    request = ExportTraceServiceRequest()
    if content_type == CONTENT_TYPE_JSON:
        _parse_json(body, request)
    else:
        try:
            request.ParseFromString(body)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise OtlpDecodeError(
                f"not an OTLP protobuf ExportTraceServiceRequest ({exc})"
            ) from exc
    return _columns(request)


def encode_response(content_type: str, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse`` in ``content_type``: partial success only when spans
    were rejected (the specification says to leave it out otherwise)."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if content_type == CONTENT_TYPE_JSON:
        if not rejected:
            return b"{}"
        return json.dumps(
            {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}
        ).encode()
    return bytes(response.SerializeToString())


# --- JSON -----------------------------------------------------------------------------------

_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _parse_json(body: bytes, request: ExportTraceServiceRequest) -> None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise OtlpDecodeError(f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise OtlpDecodeError("an OTLP/JSON request must be a JSON object with resourceSpans")
    try:
        _hex_ids_to_base64(data, 0)
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except OtlpDecodeError:
        raise
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise OtlpDecodeError(f"not an OTLP/JSON ExportTraceServiceRequest ({exc})") from exc


def _hex_ids_to_base64(node: Any, depth: int) -> None:
    """OTLP/JSON sends ids as hex; the protobuf JSON mapping reads bytes as base64."""
    if depth > _MAX_DEPTH:
        raise OtlpDecodeError(f"OTLP/JSON nested deeper than {_MAX_DEPTH} levels")
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError:
                    raise OtlpDecodeError(
                        f"OTLP/JSON field {key!r} must be a hex string, got {value[:40]!r}"
                    ) from None
            elif isinstance(value, dict | list):
                _hex_ids_to_base64(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict | list):
                _hex_ids_to_base64(item, depth + 1)


# --- protobuf message -> columns --------------------------------------------------------------


def _value(v: Any, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` as the Python value the SDK would hold."""
    which = v.WhichOneof("value")
    if which == "string_value":
        return v.string_value
    if which == "int_value":
        return v.int_value
    if which == "double_value":
        return v.double_value
    if which == "bool_value":
        return v.bool_value
    if depth >= _MAX_DEPTH:
        return None
    if which == "array_value":
        return tuple(_value(item, depth + 1) for item in v.array_value.values)
    if which == "kvlist_value":
        return {kv.key: _value(kv.value, depth + 1) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return bytes(v.bytes_value)
    return None


def _attributes(key_values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in key_values:
        v = kv.value
        which = v.WhichOneof("value")
        # The common kinds inline: this loop runs once per attribute of every span.
        if which == "string_value":
            out[kv.key] = v.string_value
        elif which == "int_value":
            out[kv.key] = v.int_value
        elif which == "double_value":
            out[kv.key] = v.double_value
        elif which == "bool_value":
            out[kv.key] = v.bool_value
        else:
            out[kv.key] = _value(v)
    return out


def _service(resource_attributes: Mapping[str, Any]) -> str | None:
    name = resource_attributes.get("service.name")
    return name if isinstance(name, str) else None


def _columns(request: ExportTraceServiceRequest) -> DecodedRequest:
    cols = SpanColumns.empty()
    trace_ids, span_ids, parents = cols.trace_id, cols.span_id, cols.parent_span_id
    names, kinds, starts, ends = cols.name, cols.kind, cols.start_ns, cols.end_ns
    codes, messages, services = cols.status_code, cols.status_message, cols.service
    attributes, events = cols.attributes, cols.events
    rejected = 0
    reasons: dict[str, None] = {}
    hex_of: dict[bytes, str] = {}
    for resource_spans in request.resource_spans:
        service = _service(_attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id = span.trace_id
                span_id = span.span_id
                parent = span.parent_span_id
                start = span.start_time_unix_nano
                end = span.end_time_unix_nano
                problem = None
                if len(trace_id) != 16 or trace_id == _ZERO_TRACE:
                    problem = "a span without a valid 16-byte trace_id"
                elif len(span_id) != 8 or span_id == _ZERO_SPAN:
                    problem = "a span without a valid 8-byte span_id"
                elif parent and len(parent) != 8:
                    problem = "a span whose parent_span_id is not 8 bytes"
                elif start > _INT64_MAX or end > _INT64_MAX:
                    problem = "a span with a time beyond 2262 (int64 nanoseconds)"
                if problem is not None:
                    rejected += 1
                    if len(reasons) < _MAX_REASONS:
                        reasons[problem] = None
                    continue
                trace_hex = hex_of.get(trace_id)
                if trace_hex is None:
                    trace_hex = hex_of[trace_id] = trace_id.hex()
                trace_ids.append(trace_hex)
                span_ids.append(span_id.hex())
                parents.append(parent.hex() if parent and parent != _ZERO_SPAN else None)
                names.append(span.name)
                kind = span.kind
                kinds.append(_KINDS[kind] if 0 <= kind < len(_KINDS) else "INTERNAL")
                starts.append(start)
                ends.append(end if end else start)
                status = span.status
                code = status.code
                codes.append(_STATUS[code] if 0 <= code < len(_STATUS) else "UNSET")
                messages.append(status.message or None)
                services.append(service)
                attributes.append(_attributes(span.attributes))
                if span.events:
                    events.append(
                        tuple(
                            EventRecord(
                                e.name, min(e.time_unix_nano, _INT64_MAX), _attributes(e.attributes)
                            )
                            for e in span.events
                        )
                    )
                else:
                    events.append(())
    return DecodedRequest(cols, rejected, tuple(reasons))
