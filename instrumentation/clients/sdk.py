"""What a client over a provider's SDK does whatever the wire format: the SDK clients made on
first use with the SDK's own retries off, and ``complete``/``acomplete`` run through the
:class:`~loopwatch.instrumentation.clients.base.ModelCaller` (retries, circuit breaker).

A provider's client subclasses :class:`SDKClient` and says only what is its own: which SDK
classes to make, the request's keyword arguments, the endpoint called and how its response
reads (:meth:`SDKClient._request`, :meth:`SDKClient._endpoint`, :meth:`SDKClient._response`).
"""

from __future__ import annotations

import asyncio
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..runtime.retry import CircuitBreaker, RetryPolicy
from ..runtime.types import Message, ModelResponse
from .base import ModelCaller, ModelPrice, ModelRetryEvent

__all__ = ["SDKClient", "no_sdk_retries"]


def no_sdk_retries(client: Any) -> Any:
    """``client`` with the SDK's own retries off (``with_options(max_retries=0)``), so that
    attempts are counted once, by the ``ModelCaller``; a client without ``with_options`` as is."""
    with_options = getattr(client, "with_options", None)
    return with_options(max_retries=0) if callable(with_options) else client


class SDKClient(ABC):
    """A loopwatch model over a provider's SDK (``complete`` / ``acomplete``).

    Args:
        model: the model to request.
        client: the SDK's sync client (default: one made from the environment on first use).
        async_client: the SDK's async client for ``acomplete`` (default: made on first use; with
            only ``client`` given, ``acomplete`` runs it in a worker thread).
        prices: USD per million tokens by model name; without them cost stays 0.
        retry, breaker, on_retry: see :class:`~loopwatch.instrumentation.clients.base.ModelCaller`.
        request_options: extra keyword arguments for every request.
        sleep: what waits between retries (tests pass a recorder).
    """

    provider: ClassVar[str]
    """``gen_ai.provider.name`` of this client's spans."""
    sdk: ClassVar[tuple[str, str, str]]
    """The SDK module and its sync and async client classes, e.g. ``("openai", "OpenAI",
    "AsyncOpenAI")``; imported on first use only."""

    def __init__(
        self,
        model: str,
        *,
        client: Any = None,
        async_client: Any = None,
        prices: Mapping[str, ModelPrice] | None = None,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | bool | None = True,
        on_retry: Callable[[ModelRetryEvent], None] | None = None,
        request_options: Mapping[str, Any] | None = None,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        self.model = model
        """The model requested on every call (also the ``chat {model}`` span's name)."""
        self.prices = dict(prices or {})
        self.request_options = dict(request_options or {})
        """Extra keyword arguments for every request (``temperature``, ``max_tokens`` ...)."""
        kw: dict[str, Any] = {"retry": retry, "breaker": breaker, "on_retry": on_retry}
        if sleep is not None:
            kw["sleep"] = sleep

            async def asleep(seconds: float) -> None:
                sleep(seconds)

            kw["asleep"] = asleep
        self.caller = ModelCaller(self.provider, **kw)
        """Retries and the circuit breaker (``caller.breaker``)."""
        self._client = no_sdk_retries(client) if client is not None else None
        self._aclient = no_sdk_retries(async_client) if async_client is not None else None

    @abstractmethod
    def _request(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The keyword arguments of one request."""

    @abstractmethod
    def _endpoint(self, client: Any) -> Any:
        """What ``create(**request)`` is called on, of the sync or the async SDK client."""

    @abstractmethod
    def _response(self, raw: Any) -> ModelResponse:
        """The SDK's response as a ``ModelResponse`` (raises ``MalformedResponse`` ...)."""

    def _sdk_client(self, index: int) -> Any:
        module, *classes = self.sdk
        return getattr(importlib.import_module(module), classes[index])(max_retries=0)

    def _sync(self) -> Any:
        if self._client is None:
            if self._aclient is not None:
                raise TypeError(
                    f"{type(self).__name__} was given only an async client: use acomplete/arun, "
                    "or pass client= too"
                )
            self._client = self._sdk_client(0)
        return self._client

    def _async(self) -> Any:
        if self._aclient is None and self._client is None:
            self._aclient = self._sdk_client(1)
        return self._aclient

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        """One model call, retried as the ``caller`` says."""
        client = self._sync()
        kwargs = self._request(messages, tools)
        return self.caller.call(
            self.model, lambda: self._response(self._endpoint(client).create(**kwargs))
        )

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        """Async :meth:`complete` (the sync client in a worker thread when only it was given)."""
        aclient = self._async()
        if aclient is None:
            return await asyncio.to_thread(self.complete, messages, tools)
        kwargs = self._request(messages, tools)

        async def once() -> ModelResponse:
            return self._response(await self._endpoint(aclient).create(**kwargs))

        return await self.caller.acall(self.model, once)
