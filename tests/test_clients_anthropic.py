"""The Anthropic client against a local server speaking the Messages format, through the real
``anthropic`` SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from loopwatch.instrumentation import CircuitBreaker, RetryPolicy, ToolRegistry, arun, run
from loopwatch.instrumentation.clients import ModelPrice
from loopwatch.instrumentation.clients.anthropic import AnthropicClient
from loopwatch.instrumentation.runtime.types import Message
from wire_server import Reply, wire_server


def _registry() -> ToolRegistry:
    registry = ToolRegistry(breaker=None)

    @registry.tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        if order_id == "missing":
            return '{"error": "no such order", "code": "NOT_FOUND"}'
        return f"order {order_id}: shipped"

    return registry


def _msg(
    *blocks: dict[str, Any],
    stop: str | None = "end_turn",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-20261001",
        "content": list(blocks),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _use(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def _client(url: str, **kw: Any) -> AnthropicClient:
    sdk = anthropic.Anthropic(base_url=url, api_key="test-key")
    return AnthropicClient("claude-opus-5", client=sdk, max_tokens=1024, **kw)


def test_a_tool_calling_run_completes_with_system_parallel_results_and_cost() -> None:
    prices = {
        "claude-opus-5": ModelPrice(
            input_per_mtok=3.0, output_per_mtok=15.0,
            cached_input_per_mtok=0.3, cache_write_per_mtok=3.75,
        )
    }  # fmt: skip
    with wire_server(
        Reply(body=_msg(_text("Looking both up."), _use("tu_1", "lookup", order_id="A-1"),
                        _use("tu_2", "lookup", order_id="missing"), stop="tool_use",
                        usage={"input_tokens": 100, "output_tokens": 20,
                               "cache_read_input_tokens": 1000,
                               "cache_creation_input_tokens": 10})),
        Reply(body=_msg(_text("A-1 shipped; the other does not exist."))),
    ) as server:  # fmt: skip
        result = run(
            _client(server.url, prices=prices),
            _registry(),
            "Where are A-1 and the missing one?",
            system="You are a support agent.",
        )
    assert result.stop_reason == "completed"
    assert result.final == "A-1 shipped; the other does not exist."
    assert result.usage.input_tokens == 1110 + 10
    expected = (100 * 3.0 + 1000 * 0.3 + 10 * 3.75 + 20 * 15.0 + 10 * 3.0 + 5 * 15.0) / 1e6
    assert result.usage.cost_usd == pytest.approx(expected)
    first, second = server.bodies
    assert first["system"] == "You are a support agent."
    assert first["max_tokens"] == 1024 and first["model"] == "claude-opus-5"
    assert first["tools"][0]["name"] == "lookup" and "input_schema" in first["tools"][0]
    assert first["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Where are A-1 and the missing one?"}],
        }
    ]
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking both up."},
                {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"order_id": "A-1"}},
                {"type": "tool_use", "id": "tu_2", "name": "lookup",
                 "input": {"order_id": "missing"}},
            ],
        },
        {   # both results in one user turn; the error result marked as one
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "order A-1: shipped"},
                {"type": "tool_result", "tool_use_id": "tu_2",
                 "content": '{"error": "no such order", "code": "NOT_FOUND"}', "is_error": True},
            ],
        },
    ]  # fmt: skip


def test_pause_turn_resends_the_turn_with_the_server_tool_blocks_kept() -> None:
    server_use = {"type": "server_tool_use", "id": "srv_1", "name": "web_search",
                  "input": {"query": "order status"}}  # fmt: skip
    with wire_server(
        Reply(body=_msg(_text("Searching."), server_use, stop="pause_turn")),
        Reply(body=_msg(_text("Found it."))),
    ) as server:
        result = run(_client(server.url), _registry(), "search")
    assert result.stop_reason == "completed" and result.final == "Found it."
    assert result.counters["model_calls"] == 2
    resent = server.bodies[1]["messages"]
    assert resent[-1] == {"role": "assistant", "content": [_text("Searching."), server_use]}


@pytest.mark.parametrize(
    ("body", "reason", "final"),
    [
        (_msg(_text("The answer is"), stop="max_tokens"), "output_truncated", "The answer is"),
        (_msg(_text("partial"), stop="model_context_window_exceeded"), "output_truncated",
         "partial"),
        (_msg(stop="refusal"), "refusal", None),
        (_msg(_text("done"), stop="stop_sequence"), "completed", "done"),
        (_msg(_text("eh"), stop="brand_new_reason"), "error", "eh"),
    ],
    ids=["max_tokens", "context_window", "refusal", "stop_sequence", "unknown"],
)  # fmt: skip
def test_stop_reasons_map(body: dict[str, Any], reason: str, final: str | None) -> None:
    with wire_server(Reply(body=body)) as server:
        result = run(_client(server.url), _registry(), "hi", raise_on_stop=False)
    assert result.stop_reason == reason and result.final == final
    if reason == "error":
        assert "'brand_new_reason'" in result.explanation


def test_a_429_with_retry_after_then_success() -> None:
    slept: list[float] = []
    with wire_server(
        Reply(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
              {"retry-after": "3"}),
        Reply(body=_msg(_text("ok"))),
    ) as server:  # fmt: skip
        result = run(_client(server.url, sleep=slept.append), _registry(), "hi")
    assert result.final == "ok" and slept == [3.0] and len(server.requests) == 2


def test_an_overload_storm_opens_the_circuit() -> None:
    overloaded = Reply(529, {"type": "error", "error": {"type": "overloaded_error",
                                                         "message": "Overloaded"}})  # fmt: skip
    with wire_server(default=overloaded) as server:
        client = _client(
            server.url,
            retry=RetryPolicy(max_attempts=2),
            breaker=CircuitBreaker(failure_threshold=2, cooldown_s=600),
            sleep=lambda s: None,
        )
        first = run(client, _registry(), "hi", raise_on_stop=False)
        second = run(client, _registry(), "hi", raise_on_stop=False)
    assert len(server.requests) == 2
    assert "HTTP_529" in first.explanation
    assert first.stop_reason == "error"  # the failures themselves
    assert second.stop_reason == "circuit_open" and "circuit breaker is open" in second.explanation
    assert second.outcome == "error"


def test_a_bad_request_is_permanent() -> None:
    bad = Reply(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                 "message": "messages: bad"}})  # fmt: skip
    with wire_server(default=bad) as server:
        result = run(_client(server.url), _registry(), "hi", raise_on_stop=False)
    assert len(server.requests) == 1 and "HTTP_400" in result.explanation


@pytest.mark.parametrize(
    ("reply", "what"),
    [
        (Reply(body={"id": "m", "type": "message", "role": "assistant"}),
         "the message has no content list"),
        (Reply(body={**_msg(_text("x")), "stop_reason": None}), "the message has no stop_reason"),
        (Reply(body="upstream connect error"), "the body is not JSON"),
    ],
    ids=["no-content", "no-stop", "not-json"],
)  # fmt: skip
def test_malformed_responses_stop_with_a_clear_error(reply: Reply, what: str) -> None:
    with wire_server(reply) as server:
        result = run(_client(server.url), _registry(), "hi", raise_on_stop=False)
    assert result.stop_reason == "error"
    assert f"returned a malformed response: {what}" in result.explanation


def test_arun_with_the_async_sdk_client() -> None:
    with wire_server(
        Reply(body=_msg(_use("tu_1", "lookup", order_id="A-1"), stop="tool_use")),
        Reply(body=_msg(_text("shipped"))),
    ) as server:
        client = AnthropicClient(
            "claude-opus-5",
            async_client=anthropic.AsyncAnthropic(base_url=server.url, api_key="k"),
        )
        result = asyncio.run(arun(client, _registry(), "where?"))
    assert result.final == "shipped"
    assert server.bodies[1]["messages"][-1]["content"][0]["tool_use_id"] == "tu_1"


def test_consecutive_user_turns_merge_and_empty_ones_are_dropped() -> None:
    from loopwatch.instrumentation.clients.anthropic import anthropic_messages

    system, wire = anthropic_messages(
        [
            Message("system", "a"),
            Message("system", "b"),
            Message("user", "one"),
            Message("user", ""),
            Message("user", "two"),
        ]
    )
    assert system == "a\n\nb"
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": "one"},
                                     {"type": "text", "text": "two"}]}
    ]  # fmt: skip


def test_the_last_step_offers_no_tools_but_keeps_them_defined() -> None:
    from loopwatch.instrumentation import LoopLimits

    with wire_server(
        Reply(body=_msg(_use("tu_1", "lookup", order_id="A-1"), stop="tool_use")),
        Reply(body=_msg(_text("A-1 shipped."))),
    ) as server:
        limits = LoopLimits(max_steps=2, answer_on_last_step=True)
        result = run(_client(server.url), _registry(), "where?", limits=limits)
    assert result.final == "A-1 shipped."
    last = server.bodies[1]
    assert last["tool_choice"] == {"type": "none"}
    assert [t["name"] for t in last["tools"]] == ["lookup"]
