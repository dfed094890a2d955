"""Model clients over the official ``openai`` SDK: Chat Completions and the Responses API.

``pip install 'loopwatch[openai]'``. Both fit the reference loop and the ``LoopGuard``
(``complete`` / ``acomplete``)::

    from loopwatch.instrumentation.clients.openai import OpenAIChatClient
    model = OpenAIChatClient("gpt-4o", prices={"gpt-4o": ModelPrice(input_per_mtok=2.5,
                                                                    output_per_mtok=10)})
    result = run(model, registry, "Where is order A-17?")

The SDK client's own retries are switched off (``with_options(max_retries=0)``): retries and the
circuit breaker are the :class:`~loopwatch.instrumentation.clients.base.ModelCaller`'s, so attempts
are counted once and each retry is an event on the ``chat`` span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..runtime.retry import ErrorInfo
from ..runtime.types import Message, ModelResponse, ToolCall, Usage
from .base import (
    ModelCallError,
    ModelPrice,
    annotate_response,
    arguments_json,
    cost_of,
    int_or_zero,
    malformed,
    not_json,
    str_or_none,
    tool_call_arguments,
)
from .sdk import SDKClient

__all__ = [
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "chat_messages",
    "chat_response",
    "responses_input",
    "responses_message_text",
    "responses_response",
    "responses_tools",
]

PROVIDER = "openai"


def chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the Chat Completions wire format."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content or ""}
            )
        elif m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": arguments_json(c.arguments)},
                    }
                    for c in m.tool_calls
                ]
            out.append(entry)
        else:
            out.append({"role": m.role, "content": m.content or ""})
    return out


def chat_response(
    completion: Any, model: str, prices: Mapping[str, ModelPrice] | None = None
) -> ModelResponse:
    """A Chat Completions response as a ``ModelResponse``.

    A refusal (``message.refusal``) stops with ``refusal`` whatever the finish reason says; raises
    :class:`~loopwatch.instrumentation.clients.base.MalformedResponse` when the body is not a chat
    completion.
    """
    bad = not_json(PROVIDER, model, completion)
    if bad is not None:
        raise bad
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise malformed(PROVIDER, model, "the chat completion has no choices")
    choice = choices[0]
    msg = getattr(choice, "message", None)
    if msg is None:
        raise malformed(PROVIDER, model, "the first choice has no message")
    calls: list[ToolCall] = []
    for tc in getattr(msg, "tool_calls", None) or ():
        fn = getattr(tc, "function", None)
        name = getattr(fn, "name", None)
        if not isinstance(name, str) or not name:
            raise malformed(PROVIDER, model, "a tool call has no function name")
        calls.append(
            ToolCall(
                str(getattr(tc, "id", "") or ""),
                name,
                tool_call_arguments(getattr(fn, "arguments", None)),
            )
        )
    content = getattr(msg, "content", None)
    if content is not None and not isinstance(content, str):
        raise malformed(PROVIDER, model, "the message content is not text")
    stop = getattr(choice, "finish_reason", None)
    refusal = getattr(msg, "refusal", None)
    if refusal:
        stop = "refusal"
        content = content or str(refusal)
    usage = getattr(completion, "usage", None)
    input_tokens = int_or_zero(getattr(usage, "prompt_tokens", 0))
    output_tokens = int_or_zero(getattr(usage, "completion_tokens", 0))
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int_or_zero(getattr(details, "cached_tokens", 0))
    response_model = annotate_response(PROVIDER, completion)
    cost = cost_of(prices, (response_model, model), input_tokens, output_tokens,
                   cached_input_tokens=cached)  # fmt: skip
    return ModelResponse(
        Message("assistant", content, tuple(calls)),
        stop if isinstance(stop, str) or stop is None else str(stop),
        Usage(input_tokens, output_tokens, cost),
        response_model or model,
        str_or_none(getattr(completion, "id", None)),
        PROVIDER,
    )


def responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as Responses API input items."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": m.tool_call_id or "",
                    "output": m.content or "",
                }
            )
        elif m.role == "assistant":
            if m.content:
                out.append({"role": "assistant", "content": m.content})
            for c in m.tool_calls:
                out.append(
                    {
                        "type": "function_call",
                        "call_id": c.id,
                        "name": c.name,
                        "arguments": arguments_json(c.arguments),
                    }
                )
        else:
            out.append({"role": m.role, "content": m.content or ""})
    return out


def responses_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Registry tool specs (Chat Completions shape) as Responses API function tools."""
    out: list[dict[str, Any]] = []
    for spec in tools:
        fn = spec.get("function")
        if spec.get("type") == "function" and isinstance(fn, Mapping):
            out.append(
                {
                    "type": "function",
                    "name": fn.get("name"),
                    "description": fn.get("description", ""),
                    "parameters": fn.get("parameters", {"type": "object", "properties": {}}),
                    "strict": False,
                }
            )
        else:  # already in the Responses shape (or a built-in tool): sent as given
            out.append(dict(spec))
    return out


def responses_message_text(item: Any, texts: list[str]) -> bool:
    """Appends the text of a Responses ``message`` output item's parts to ``texts`` (a refusal's
    too); True when one of them is a refusal."""
    refused = False
    for part in getattr(item, "content", None) or ():
        ptype = getattr(part, "type", None)
        if ptype == "output_text":
            texts.append(str(getattr(part, "text", "") or ""))
        elif ptype == "refusal":
            refused = True
            texts.append(str(getattr(part, "refusal", "") or ""))
    return refused


def responses_response(
    response: Any, model: str, prices: Mapping[str, ModelPrice] | None = None
) -> ModelResponse:
    """A Responses API response as a ``ModelResponse``.

    The stop signal is the response's ``status``; an ``incomplete`` one is replaced by its
    reason (``max_output_tokens`` → ``output_truncated``, ``content_filter`` → ``refusal``,
    anything else stops with ``error`` naming it); a refusal part gives ``refusal``; a ``failed``
    response raises :class:`~loopwatch.instrumentation.clients.base.ModelCallError` (retried when
    the provider calls it a server error or a rate limit).
    """
    bad = not_json(PROVIDER, model, response)
    if bad is not None:
        raise bad
    status = getattr(response, "status", None)
    output = getattr(response, "output", None)
    if not isinstance(output, list) or not isinstance(status, str):
        raise malformed(PROVIDER, model, "the response has no output list or no status")
    if status == "failed":
        error = getattr(response, "error", None)
        code = str(getattr(error, "code", None) or "failed")
        text = str(getattr(error, "message", None) or "the response failed")
        transient = code in ("server_error", "rate_limit_exceeded")
        raise ModelCallError(
            f"{PROVIDER} model {model!r} failed: {code} {text}",
            provider=PROVIDER,
            model=model,
            info=ErrorInfo(code.upper(), text, transient),
        )
    texts: list[str] = []
    calls: list[ToolCall] = []
    refused = False
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "message":
            refused = responses_message_text(item, texts) or refused
        elif kind == "function_call":
            name = getattr(item, "name", None)
            if not isinstance(name, str) or not name:
                raise malformed(PROVIDER, model, "a function call has no name")
            call_id = getattr(item, "call_id", None) or getattr(item, "id", None) or ""
            calls.append(ToolCall(str(call_id), name, tool_call_arguments(item.arguments)))
    stop: str = status
    if status == "incomplete":
        details = getattr(response, "incomplete_details", None)
        stop = str(getattr(details, "reason", None) or "incomplete")
    elif refused and not calls:
        stop = "refusal"
    usage = getattr(response, "usage", None)
    input_tokens = int_or_zero(getattr(usage, "input_tokens", 0))
    output_tokens = int_or_zero(getattr(usage, "output_tokens", 0))
    cached = int_or_zero(getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", 0))
    response_model = annotate_response(PROVIDER, response)
    cost = cost_of(prices, (response_model, model), input_tokens, output_tokens,
                   cached_input_tokens=cached)  # fmt: skip
    return ModelResponse(
        Message("assistant", "".join(texts) or None, tuple(calls)),
        stop,
        Usage(input_tokens, output_tokens, cost),
        response_model or model,
        str_or_none(getattr(response, "id", None)),
        PROVIDER,
    )


class OpenAIChatClient(SDKClient):
    """Chat Completions (``client.chat.completions.create``) as a loopwatch model.

    Args:
        model: the model to request.
        client: an ``openai.OpenAI`` (default: one made from the environment on first use).
        async_client: an ``openai.AsyncOpenAI`` for ``acomplete`` (default: made on first use;
            with only ``client`` given, ``acomplete`` runs it in a worker thread).
        prices: USD per million tokens by model name; without them cost stays 0.
        retry, breaker, on_retry: see :class:`~loopwatch.instrumentation.clients.base.ModelCaller`.
        request_options: extra keyword arguments for every request.
    """

    provider = PROVIDER
    sdk = ("openai", "OpenAI", "AsyncOpenAI")

    def _request(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.request_options)
        kwargs["model"] = self.model
        kwargs["messages"] = chat_messages(messages)
        if tools:
            kwargs["tools"] = [dict(t) for t in tools]
        return kwargs

    def _endpoint(self, client: Any) -> Any:
        return client.chat.completions

    def _response(self, raw: Any) -> ModelResponse:
        return chat_response(raw, self.model, self.prices)


class OpenAIResponsesClient(SDKClient):
    """The Responses API (``client.responses.create``) as a loopwatch model.

    Stateless: every call sends the whole conversation with ``store=False`` unless
    ``request_options`` says otherwise. Arguments as for :class:`OpenAIChatClient`.
    """

    provider = PROVIDER
    sdk = ("openai", "OpenAI", "AsyncOpenAI")

    def _request(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"store": False}
        kwargs.update(self.request_options)
        kwargs["model"] = self.model
        kwargs["input"] = responses_input(messages)
        if tools:
            kwargs["tools"] = responses_tools(tools)
        return kwargs

    def _endpoint(self, client: Any) -> Any:
        return client.responses

    def _response(self, raw: Any) -> ModelResponse:
        return responses_response(raw, self.model, self.prices)
