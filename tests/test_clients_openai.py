"""The OpenAI clients against a local server speaking the Chat Completions and Responses formats,
through the real ``openai`` SDK (its HTTP stack included)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from loopwatch.instrumentation import (
    CircuitBreaker,
    RetryPolicy,
    ToolRegistry,
    arun,
    instrument,
    run,
)
from loopwatch.instrumentation.clients import ModelPrice, ModelRetryEvent
from loopwatch.instrumentation.clients.openai import OpenAIChatClient, OpenAIResponsesClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from wire_server import Reply, wire_server


def _registry() -> ToolRegistry:
    registry = ToolRegistry(breaker=None)

    @registry.tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        return f"order {order_id}: shipped"

    return registry


def _chat(
    content: str | None = None,
    *,
    calls: list[tuple[str, str, dict[str, Any] | str]] = (),  # type: ignore[assignment]
    finish: str = "stop",
    refusal: str | None = None,
    usage: tuple[int, int] = (10, 5),
    model: str = "gpt-4o-2024-08-06",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for cid, name, args in calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def _client(url: str, **kw: Any) -> OpenAIChatClient:
    sdk = openai.OpenAI(base_url=url + "/v1", api_key="test-key")
    return OpenAIChatClient("gpt-4o", client=sdk, **kw)


PRICES = {"gpt-4o": ModelPrice(input_per_mtok=2.5, output_per_mtok=10.0)}


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


def test_a_tool_calling_run_completes_with_parallel_calls_usage_and_cost(
    spans: tuple[TracerProvider, InMemorySpanExporter], tmp_path: Path
) -> None:
    from loopwatch.queries.store.database import connect_read_only

    tp, exporter = spans
    db = tmp_path / "runs.duckdb"
    handle = instrument(tracer_provider=tp, store=db)
    try:
        with wire_server(
            Reply(
                body=_chat(
                    calls=[
                        ("call_a", "lookup", {"order_id": "A-1"}),
                        ("call_b", "lookup", {"order_id": "B-2"}),
                    ],
                    finish="tool_calls",
                    usage=(100, 20),
                )
            ),
            Reply(body=_chat("Both shipped.", usage=(200, 10))),
        ) as server:
            result = run(
                _client(server.url, prices=PRICES),
                _registry(),
                "Where are A-1 and B-2?",
                system="You are a support agent.",
                run_id="chat-ok",
            )
        assert handle.force_flush()
    finally:
        handle.shutdown()
    assert result.stop_reason == "completed" and result.final == "Both shipped."
    assert (result.usage.input_tokens, result.usage.output_tokens) == (300, 30)
    # $2.5 / M input, $10 / M output, priced by the requested name (the response names a snapshot)
    assert result.usage.cost_usd == pytest.approx((300 * 2.5 + 30 * 10.0) / 1e6)
    first, second = server.bodies
    assert first["model"] == "gpt-4o"
    assert first["messages"][0] == {"role": "system", "content": "You are a support agent."}
    assert first["tools"][0]["function"]["name"] == "lookup"
    assert second["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "lookup", "arguments": '{"order_id": "A-1"}'}},
            {"id": "call_b", "type": "function",
             "function": {"name": "lookup", "arguments": '{"order_id": "B-2"}'}},
        ],
    }  # fmt: skip
    assert second["messages"][3:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "order A-1: shipped"},
        {"role": "tool", "tool_call_id": "call_b", "content": "order B-2: shipped"},
    ]
    # the SDK's own retries are off: exactly one HTTP request per model call
    assert len(server.requests) == 2
    chat_spans = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert len(chat_spans) == 2
    attrs = dict(chat_spans[0].attributes or {})
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.response.id"] == "chatcmpl-1"
    assert attrs["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    assert attrs["gen_ai.response.finish_reasons"] == ("tool_calls",)
    con = connect_read_only(db)
    try:
        row = con.execute(
            "SELECT stop_reason, outcome, input_tokens, output_tokens, cost_usd, model_calls"
            " FROM runs WHERE run_id = 'chat-ok'"
        ).fetchone()
    finally:
        con.close()
    assert row == ("completed", "success", 300, 30, pytest.approx(result.usage.cost_usd), 2)


@pytest.mark.parametrize(
    ("reply", "reason", "final"),
    [
        (_chat("The answer is", finish="length"), "output_truncated", "The answer is"),
        (_chat(None, refusal="I can't help with that."), "refusal", "I can't help with that."),
        (_chat("", finish="content_filter"), "refusal", None),
        (_chat("hm", finish="surprise"), "error", "hm"),
    ],
    ids=["length", "refusal", "content_filter", "unknown"],
)
def test_provider_stop_signals_map_to_stop_reasons(
    reply: dict[str, Any], reason: str, final: str | None
) -> None:
    with wire_server(Reply(body=reply)) as server:
        result = run(_client(server.url), _registry(), "hi", raise_on_stop=False)
    assert result.stop_reason == reason
    assert result.final == final
    if reason == "error":
        assert "'surprise'" in result.explanation


def test_a_429_with_retry_after_is_waited_out_then_the_call_succeeds() -> None:
    slept: list[float] = []
    heard: list[ModelRetryEvent] = []
    with wire_server(
        Reply(429, {"error": {"message": "slow down", "type": "rate_limit"}},
              {"Retry-After": "7"}),
        Reply(body=_chat("ok")),
    ) as server:  # fmt: skip
        client = _client(server.url, sleep=slept.append, on_retry=heard.append)
        result = run(client, _registry(), "hi")
    assert result.stop_reason == "completed" and result.final == "ok"
    assert slept == [7.0]
    assert [(e.attempt, e.error_code, e.delay_s) for e in heard] == [(1, "HTTP_429", 7.0)]
    assert len(server.requests) == 2


def test_a_timeout_is_transient_and_retried() -> None:
    heard: list[ModelRetryEvent] = []
    with wire_server(Reply(body=_chat("late"), delay_s=1.0), Reply(body=_chat("ok"))) as server:
        sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="k", timeout=0.2)
        client = OpenAIChatClient("gpt-4o", client=sdk, sleep=lambda s: None,
                                  on_retry=heard.append)  # fmt: skip
        result = run(client, _registry(), "hi")
    assert result.final == "ok"
    assert [e.error_code for e in heard] == ["TIMEOUT"]


def test_the_sdk_does_not_retry_behind_our_back() -> None:
    with wire_server(default=Reply(429, {"error": {"message": "slow down"}})) as server:
        client = _client(server.url, retry=RetryPolicy(max_attempts=1))
        result = run(client, _registry(), "hi", raise_on_stop=False)
    assert result.stop_reason == "error"
    assert len(server.requests) == 1  # the SDK's default would have made 3
    assert "HTTP_429" in result.explanation


def test_a_permanent_error_is_not_retried() -> None:
    with wire_server(default=Reply(401, {"error": {"message": "bad key"}})) as server:
        result = run(_client(server.url, sleep=lambda s: None), _registry(), "hi",
                     raise_on_stop=False)  # fmt: skip
    assert len(server.requests) == 1
    assert result.stop_reason == "error"
    assert "the model call raised ModelCallError: openai model 'gpt-4o' failed: HTTP_401" in (
        result.explanation
    )


def test_a_500_storm_opens_the_circuit_and_later_runs_fail_fast() -> None:
    with wire_server(default=Reply(500, {"error": {"message": "boom"}})) as server:
        client = _client(
            server.url,
            retry=RetryPolicy(max_attempts=3),
            breaker=CircuitBreaker(failure_threshold=4, cooldown_s=600),
            sleep=lambda s: None,
        )
        first = run(client, _registry(), "hi", raise_on_stop=False)
        assert len(server.requests) == 3
        assert "failed after 3 attempts: HTTP_500" in first.explanation
        second = run(client, _registry(), "hi", raise_on_stop=False)
        # the 4th failure opened the circuit: the retry was not made
        assert len(server.requests) == 4
        assert "ModelCircuitOpen" in second.explanation
        assert first.stop_reason == "error" and second.stop_reason == "circuit_open"
        third = run(client, _registry(), "hi", raise_on_stop=False)
        assert len(server.requests) == 4
    assert third.stop_reason == "circuit_open"
    assert "the circuit breaker is open after 4 failed calls in a row" in third.explanation
    assert client.caller.breaker is not None and client.caller.breaker.state("gpt-4o") == "open"


@pytest.mark.parametrize(
    ("reply", "what"),
    [
        (Reply(body={"id": "x", "object": "chat.completion", "model": "gpt-4o"}), "no choices"),
        (Reply(body={"id": "x", "choices": [{"index": 0, "finish_reason": "stop"}]}),
         "has no message"),
        (Reply(body="<html>bad gateway</html>"),
         "the body is not JSON: '<html>bad gateway</html>'"),
    ],
    ids=["no-choices", "no-message", "not-json"],
)  # fmt: skip
def test_a_malformed_response_stops_with_a_clear_error(reply: Reply, what: str) -> None:
    with wire_server(reply, default=Reply(body=_chat("never"))) as server:
        result = run(_client(server.url), _registry(), "hi", raise_on_stop=False)
    assert result.stop_reason == "error"
    assert what in result.explanation
    assert "Traceback" not in result.explanation
    assert len(server.requests) == 1  # not retried: the provider answered


def test_arun_drives_the_async_sdk_client() -> None:
    with wire_server(
        Reply(body=_chat(calls=[("c1", "lookup", {"order_id": "A-1"})], finish="tool_calls")),
        Reply(body=_chat("shipped")),
    ) as server:
        client = OpenAIChatClient(
            "gpt-4o",
            async_client=openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k"),
        )
        result = asyncio.run(arun(client, _registry(), "where is A-1?"))
    assert result.stop_reason == "completed" and result.final == "shipped"
    assert server.bodies[1]["messages"][-1]["tool_call_id"] == "c1"


def test_unparseable_tool_arguments_reach_the_model_as_an_invalid_arguments_error() -> None:
    with wire_server(
        Reply(body=_chat(calls=[("c1", "lookup", "{not json")], finish="tool_calls")),
        Reply(body=_chat("sorry")),
    ) as server:
        result = run(_client(server.url), _registry(), "hi")
    assert result.stop_reason == "completed"
    tool_msg = server.bodies[1]["messages"][-1]
    assert tool_msg["tool_call_id"] == "c1" and "INVALID_ARGUMENTS" in tool_msg["content"]
    assert server.bodies[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"] == (
        "{not json"
    )


# --- Responses API -------------------------------------------------------------------------------


def _resp(
    *items: dict[str, Any],
    status: str = "completed",
    incomplete: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-4.1-2025-04-14",
        "status": status,
        "output": list(items),
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "error": error,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 50,
            "output_tokens": 7,
            "total_tokens": 57,
            "input_tokens_details": {"cached_tokens": 40},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _text(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _fcall(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


def _responses_client(url: str, **kw: Any) -> OpenAIResponsesClient:
    sdk = openai.OpenAI(base_url=url + "/v1", api_key="test-key")
    return OpenAIResponsesClient("gpt-4.1", client=sdk, **kw)


def test_responses_tool_calling_run_completes_with_cached_tokens_priced() -> None:
    prices = {"gpt-4.1": ModelPrice(input_per_mtok=2.0, output_per_mtok=8.0,
                                    cached_input_per_mtok=0.5)}  # fmt: skip
    with wire_server(
        Reply(body=_resp(_fcall("c1", "lookup", {"order_id": "A-1"}),
                         _fcall("c2", "lookup", {"order_id": "B-2"}))),
        Reply(body=_resp(_text("Both shipped."))),
    ) as server:  # fmt: skip
        result = run(_responses_client(server.url, prices=prices), _registry(), "where?",
                     system="Be brief.")  # fmt: skip
    assert result.stop_reason == "completed" and result.final == "Both shipped."
    assert result.usage.cost_usd == pytest.approx(2 * (10 * 2.0 + 40 * 0.5 + 7 * 8.0) / 1e6)
    first, second = server.bodies
    assert first["store"] is False
    assert first["input"][0] == {"role": "system", "content": "Be brief."}
    assert first["tools"][0] == {
        "type": "function",
        "name": "lookup",
        "description": "Find an order.",
        "parameters": first["tools"][0]["parameters"],
        "strict": False,
    }
    assert second["input"][2:] == [
        {"type": "function_call", "call_id": "c1", "name": "lookup",
         "arguments": '{"order_id": "A-1"}'},
        {"type": "function_call", "call_id": "c2", "name": "lookup",
         "arguments": '{"order_id": "B-2"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "order A-1: shipped"},
        {"type": "function_call_output", "call_id": "c2", "output": "order B-2: shipped"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "reason", "final"),
    [
        (_resp(_text("partial"), status="incomplete", incomplete="max_output_tokens"),
         "output_truncated", "partial"),
        (_resp(status="incomplete", incomplete="content_filter"), "refusal", None),
        ({**_resp(), "output": [{"type": "message", "id": "m", "role": "assistant",
          "status": "completed", "content": [{"type": "refusal", "refusal": "No."}]}]},
         "refusal", "No."),
        (_resp(_text("x"), status="incomplete", incomplete="max_messages"), "error", "x"),
    ],
    ids=["max_output_tokens", "content_filter", "refusal-part", "unknown-incomplete"],
)  # fmt: skip
def test_responses_stop_signals(body: dict[str, Any], reason: str, final: str | None) -> None:
    with wire_server(Reply(body=body)) as server:
        result = run(_responses_client(server.url), _registry(), "hi", raise_on_stop=False)
    assert result.stop_reason == reason and result.final == final


def test_responses_failed_with_a_server_error_is_retried() -> None:
    with wire_server(
        Reply(body=_resp(status="failed", error={"code": "server_error", "message": "oops"})),
        Reply(body=_resp(_text("fine"))),
    ) as server:
        result = run(_responses_client(server.url, sleep=lambda s: None), _registry(), "hi")
    assert result.final == "fine" and len(server.requests) == 2


def test_responses_malformed_body_stops_with_error() -> None:
    with wire_server(Reply(body={"id": "r", "object": "response"})) as server:
        result = run(_responses_client(server.url), _registry(), "hi", raise_on_stop=False)
    assert result.stop_reason == "error"
    assert "malformed response: the response has no output list or no status" in (
        result.explanation
    )


def test_prices_validate_and_unpriced_models_cost_zero(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="input_per_mtok must be a finite number >= 0"):
        ModelPrice(input_per_mtok=-1, output_per_mtok=1)
    with wire_server(Reply(body=_chat("ok", model="gpt-5-unpriced"))) as server:
        client = OpenAIChatClient(
            "gpt-5-unpriced",
            client=openai.OpenAI(base_url=server.url + "/v1", api_key="k"),
            prices=PRICES,
        )
        result = run(client, _registry(), "hi")
    assert result.usage.cost_usd == 0.0
    assert "no price for model gpt-5-unpriced" in caplog.text
