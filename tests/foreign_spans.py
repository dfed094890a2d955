"""Test helpers: OTLP/JSON bodies of spans in other instrumentations' conventions."""

from __future__ import annotations

import json
from typing import Any

T0 = 1_767_225_600_000_000_000  # 2026-01-01, ns


def value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    return {"stringValue": str(v)}


def span(
    trace: int,
    sid: int,
    parent: int | None,
    name: str,
    start_ms: int,
    end_ms: int,
    attrs: dict[str, Any] | None = None,
    *,
    error: str | None = None,
    exception: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """One OTLP/JSON span; ids from small ints, times in ms after T0."""
    out: dict[str, Any] = {
        "traceId": f"{trace:032x}",
        "spanId": f"{trace << 16 | sid:016x}",  # unique across traces, as real ids are
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + start_ms * 1_000_000),
        "endTimeUnixNano": str(T0 + end_ms * 1_000_000),
        "attributes": [{"key": k, "value": value(v)} for k, v in (attrs or {}).items()],
    }
    if parent is not None:
        out["parentSpanId"] = f"{trace << 16 | parent:016x}"
    if error is not None:
        out["status"] = {"code": 2, "message": error}
    if exception is not None:
        out["events"] = [
            {
                "name": "exception",
                "timeUnixNano": str(T0 + end_ms * 1_000_000),
                "attributes": [
                    {"key": "exception.type", "value": value(exception[0])},
                    {"key": "exception.message", "value": value(exception[1])},
                ],
            }
        ]
    return out


def body(spans: list[dict[str, Any]], service: str = "support-agent") -> bytes:
    """An ExportTraceServiceRequest in OTLP/JSON holding ``spans``."""
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": value(service)}]},
                    "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}],
                }
            ]
        }
    ).encode()


def genai_trace(
    trace: int, *, repeats: int = 3, exception: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """A GenAI-semconv agent run: invoke_agent, then per step a chat and a tool call that
    returns the same result each time (``repeats`` steps), then a final answer."""
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "refunds"}
    end = 100 * (repeats + 2)
    spans = [
        span(
            trace,
            1,
            None,
            "invoke_agent refunds",
            0,
            end,
            agent,
            error=exception[1] if exception else None,
            exception=exception,
        )
    ]
    sid = 2
    for k in range(repeats):
        t = 100 * k + 10
        spans.append(
            span(
                trace,
                sid,
                1,
                "chat gpt-4o",
                t,
                t + 40,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 100,
                    "gen_ai.usage.output_tokens": 20,
                    "gen_ai.response.finish_reasons": ["tool_calls"],
                },
            )
        )
        spans.append(
            span(
                trace,
                sid + 1,
                1,
                "execute_tool lookup_order",
                t + 50,
                t + 60,
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup_order",
                    "gen_ai.tool.call.id": f"call_{k}",
                    "gen_ai.tool.call.arguments": '{"order": 7}',
                    "gen_ai.tool.call.result": '{"status": "pending"}',
                },
            )
        )
        sid += 2
    if exception is None:
        t = 100 * repeats + 10
        spans.append(
            span(
                trace,
                sid,
                1,
                "chat gpt-4o",
                t,
                t + 40,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 150,
                    "gen_ai.usage.output_tokens": 30,
                    "gen_ai.response.finish_reasons": ["stop"],
                },
            )
        )
    return spans
