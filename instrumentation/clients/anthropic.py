"""A model client over the official ``anthropic`` SDK: the Messages API.

``pip install 'loopwatch[anthropic]'``::

    from loopwatch.instrumentation.clients.anthropic import AnthropicClient
    model = AnthropicClient("claude-sonnet-4-5", max_tokens=4096)
    result = run(model, registry, "Where is order A-17?")

System messages become the ``system`` parameter; tool results become ``tool_result`` blocks of
one user turn (parallel calls answered together, an ``{"error": ..., "code": ...}`` result marked
``is_error``). Blocks a ``Message`` cannot hold (thinking with its signature, server-tool blocks
of a ``pause_turn``) are remembered per assistant message and sent back exactly, so a paused turn
resumes and extended thinking keeps working across tool calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..runtime.retry import CircuitBreaker, RetryPolicy
from ..runtime.types import Message, ModelResponse, ToolCall, Usage
from ..runtime.validate import check_int
from .base import (
    ModelPrice,
    ModelRetryEvent,
    RawHistory,
    annotate_response,
    cost_of,
    int_or_zero,
    looks_like_error,
    malformed,
    not_json,
    str_or_none,
    tool_call_arguments,
)
from .sdk import SDKClient

__all__ = ["AnthropicClient", "anthropic_messages", "anthropic_response", "anthropic_tools"]

PROVIDER = "anthropic"
_PLAIN_BLOCKS = frozenset({"text", "tool_use"})


def anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Registry tool specs (Chat Completions shape) as Messages API tools."""
    out: list[dict[str, Any]] = []
    for spec in tools:
        fn = spec.get("function")
        if spec.get("type") == "function" and isinstance(fn, Mapping):
            out.append(
                {
                    "name": fn.get("name"),
                    "description": fn.get("description", ""),
                    "input_schema": fn.get("parameters", {"type": "object", "properties": {}}),
                }
            )
        else:  # already in the Messages shape (or a server tool): sent as given
            out.append(dict(spec))
    return out


def _input_of(arguments: Mapping[str, Any] | str) -> dict[str, Any]:
    parsed = tool_call_arguments(arguments)
    # A tool_use input must be an object; what the model sent that was not one is kept visible.
    return parsed if isinstance(parsed, dict) else {"raw_arguments": parsed}


def anthropic_messages(
    messages: Sequence[Message], raw: RawHistory | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` in the Messages wire format; consecutive turns of one role merge."""
    systems: list[str] = []
    out: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": list(blocks)})

    for m in messages:
        if m.role == "system":
            if m.content:
                systems.append(m.content)
        elif m.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id or "",
                "content": m.content or "",
            }
            if looks_like_error(m.content):
                block["is_error"] = True
            push("user", [block])
        elif m.role == "assistant":
            kept = raw.get(m) if raw is not None else None
            if kept is not None:
                push("assistant", [dict(b) for b in kept])
                continue
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": _input_of(c.arguments),
                    }
                )
            push("assistant", blocks)
        elif m.content:
            push("user", [{"type": "text", "text": m.content}])
    return ("\n\n".join(systems) or None), out


def _has_tool_blocks(wire: list[dict[str, Any]]) -> bool:
    return any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result")
        for m in wire
        for b in m["content"]
    )


def anthropic_response(
    message: Any,
    model: str,
    prices: Mapping[str, ModelPrice] | None = None,
    raw: RawHistory | None = None,
) -> ModelResponse:
    """A Messages API response as a ``ModelResponse``; ``stop_reason`` is kept as sent (the
    guard maps it: ``pause_turn`` resends, ``refusal`` stops ...)."""
    bad = not_json(PROVIDER, model, message)
    if bad is not None:
        raise bad
    content = getattr(message, "content", None)
    stop = getattr(message, "stop_reason", None)
    if not isinstance(content, list):
        raise malformed(PROVIDER, model, "the message has no content list")
    if not isinstance(stop, str):
        raise malformed(PROVIDER, model, "the message has no stop_reason")
    texts: list[str] = []
    calls: list[ToolCall] = []
    special = False
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(getattr(block, "text", "") or ""))
        elif kind == "tool_use":
            name = getattr(block, "name", None)
            if not isinstance(name, str) or not name:
                raise malformed(PROVIDER, model, "a tool_use block has no name")
            calls.append(
                ToolCall(
                    str(getattr(block, "id", "") or ""), name, tool_call_arguments(block.input)
                )
            )
        else:
            special = True
    usage = getattr(message, "usage", None)
    plain_in = int_or_zero(getattr(usage, "input_tokens", 0))
    cache_read = int_or_zero(getattr(usage, "cache_read_input_tokens", 0))
    cache_write = int_or_zero(getattr(usage, "cache_creation_input_tokens", 0))
    input_tokens = plain_in + cache_read + cache_write
    output_tokens = int_or_zero(getattr(usage, "output_tokens", 0))
    response_model = annotate_response(PROVIDER, message)
    cost = cost_of(
        prices,
        (response_model, model),
        input_tokens,
        output_tokens,
        cached_input_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    result = Message("assistant", "".join(texts) or None, tuple(calls))
    if special and raw is not None:
        dumped = [
            b.model_dump(mode="json", exclude_none=True) if hasattr(b, "model_dump") else dict(b)
            for b in content
        ]
        raw.put(result, dumped)
    return ModelResponse(
        result,
        stop,
        Usage(input_tokens, output_tokens, cost),
        response_model or model,
        str_or_none(getattr(message, "id", None)),
        PROVIDER,
    )


class AnthropicClient(SDKClient):
    """The Messages API (``client.messages.create``) as a loopwatch model.

    Args:
        model: the model to request.
        max_tokens: the output limit sent with every request (the API requires one); hitting it
            stops the run with ``output_truncated``.
        client: an ``anthropic.Anthropic`` (default: one made from the environment on first use).
        async_client: an ``anthropic.AsyncAnthropic`` for ``acomplete`` (default: made on first
            use; with only ``client`` given, ``acomplete`` runs it in a worker thread).
        prices: USD per million tokens by model name; without them cost stays 0.
        retry, breaker, on_retry: see :class:`~loopwatch.instrumentation.clients.base.ModelCaller`.
        request_options: extra keyword arguments for every request (``temperature``, ``thinking``).
    """

    provider = PROVIDER
    sdk = ("anthropic", "Anthropic", "AsyncAnthropic")

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = 4096,
        client: Any = None,
        async_client: Any = None,
        prices: Mapping[str, ModelPrice] | None = None,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | bool | None = True,
        on_retry: Callable[[ModelRetryEvent], None] | None = None,
        request_options: Mapping[str, Any] | None = None,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        super().__init__(
            model,
            client=client,
            async_client=async_client,
            prices=prices,
            retry=retry,
            breaker=breaker,
            on_retry=on_retry,
            request_options=request_options,
            sleep=sleep,
        )
        check_int("max_tokens", max_tokens, minimum=1)
        self.max_tokens = max_tokens
        self._tools: list[dict[str, Any]] = []
        self.raw = RawHistory()
        """Provider blocks kept for assistant messages that need them sent back exactly."""

    def _request(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        system, wire = anthropic_messages(messages, self.raw)
        kwargs: dict[str, Any] = {"max_tokens": self.max_tokens}
        kwargs.update(self.request_options)
        kwargs["model"] = self.model
        kwargs["messages"] = wire
        if system is not None:
            kwargs["system"] = system
        if tools:
            self._tools = anthropic_tools(tools)
            kwargs["tools"] = self._tools
        elif self._tools and _has_tool_blocks(wire):
            # A turn offered no tools (the last-step notice): the API still wants the tools
            # defined when the history holds tool_use blocks, so they go with tool_choice none.
            kwargs["tools"] = self._tools
            kwargs["tool_choice"] = {"type": "none"}
        return kwargs

    def _endpoint(self, client: Any) -> Any:
        return client.messages

    def _response(self, raw: Any) -> ModelResponse:
        return anthropic_response(raw, self.model, self.prices, self.raw)
