"""Model clients for the reference loop and the ``LoopGuard`` over the providers' official SDKs.

Each provider is its own module, imported only when used (its SDK is an optional extra)::

    from loopwatch.instrumentation.clients.openai import OpenAIChatClient, OpenAIResponsesClient
    from loopwatch.instrumentation.clients.anthropic import AnthropicClient

What they share (prices, retries and the circuit breaker, errors) is in
:mod:`loopwatch.instrumentation.clients.base` and re-exported here.
"""

from .base import (
    MalformedResponse,
    ModelCaller,
    ModelCallError,
    ModelCircuitOpen,
    ModelPrice,
    ModelRetryEvent,
)

__all__ = [
    "MalformedResponse",
    "ModelCallError",
    "ModelCaller",
    "ModelCircuitOpen",
    "ModelPrice",
    "ModelRetryEvent",
]
