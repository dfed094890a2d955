"""What every model client shares: prices, the retry and circuit-breaker runner, its errors.

The runner and its errors live in :mod:`.caller`, the span annotations in :mod:`.spans`; this
module keeps their public names where clients have always imported them.

A client turns one provider SDK call into a :class:`~loopwatch.instrumentation.ModelResponse`.
The SDK's own retries are switched off (``max_retries=0``) so that attempts are counted once, here:
transient failures (408, 429 with ``Retry-After``, 5xx, timeouts, connection errors, as
:func:`~loopwatch.instrumentation.runtime.retry.classify` decides) are retried under a
:class:`~loopwatch.instrumentation.runtime.retry.RetryPolicy`; a per-model
:class:`~loopwatch.instrumentation.runtime.retry.CircuitBreaker` fails fast once a model keeps
failing.
A call that fails for good raises :class:`ModelCallError` (a subclass says which way), so the
reference loop and the ``LoopGuard`` stop the run with ``error`` and an explanation naming it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..runtime.arguments import InvalidArguments, parse_arguments
from ..runtime.types import Message
from ..runtime.validate import check_number
from .caller import (
    DEFAULT_COOLDOWN_S,
    DEFAULT_FAILURE_THRESHOLD,
    MalformedResponse,
    ModelCaller,
    ModelCallError,
    ModelCircuitOpen,
    ModelRetryEvent,
    malformed,
    not_json,
)
from .spans import annotate_model_span, annotate_response

__all__ = [
    "DEFAULT_COOLDOWN_S",
    "DEFAULT_FAILURE_THRESHOLD",
    "MalformedResponse",
    "ModelCallError",
    "ModelCaller",
    "ModelCircuitOpen",
    "ModelPrice",
    "ModelRetryEvent",
    "RawHistory",
    "annotate_model_span",
    "annotate_response",
    "arguments_json",
    "cost_of",
    "int_or_zero",
    "looks_like_error",
    "malformed",
    "not_json",
    "parse_arguments",
    "str_or_none",
    "tool_call_arguments",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """What one model costs, in USD per million tokens. Prices change: pass your own.

    ``cached_input_per_mtok`` prices input tokens read from the provider's prompt cache and
    ``cache_write_per_mtok`` input tokens written to it (Anthropic); ``None`` prices them as
    ordinary input.
    """

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "input_per_mtok",
            "output_per_mtok",
            "cached_input_per_mtok",
            "cache_write_per_mtok",
        ):
            value = getattr(self, name)
            if value is None and name.startswith("cache"):
                continue
            check_number(name, value)

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cached_input_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """USD for one call; ``input_tokens`` counts every input token, cached ones included."""
        cached = min(max(cached_input_tokens, 0), input_tokens)
        written = min(max(cache_write_tokens, 0), input_tokens - cached)
        plain = input_tokens - cached - written
        cached_price = (
            self.input_per_mtok
            if self.cached_input_per_mtok is None
            else self.cached_input_per_mtok
        )
        write_price = self.cache_write_per_mtok
        if write_price is None:
            write_price = self.input_per_mtok
        total = (
            plain * self.input_per_mtok
            + cached * cached_price
            + written * write_price
            + output_tokens * self.output_per_mtok
        )
        return total / 1_000_000


_warned_unpriced: set[str] = set()
_warn_lock = threading.Lock()


def cost_of(
    prices: Mapping[str, ModelPrice] | None,
    models: tuple[str | None, ...],
    input_tokens: int,
    output_tokens: int,
    *,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float:
    """The call's cost from ``prices``, looked up by exact name: the response's model first (a
    dated snapshot such as ``gpt-4o-2024-08-06``), then the requested one. No prices: 0. Prices
    given but none for this model: 0, and one warning per model, so a gap does not go unseen."""
    if not prices:
        return 0.0
    for name in models:
        if name and name in prices:
            return prices[name].cost(
                input_tokens,
                output_tokens,
                cached_input_tokens=cached_input_tokens,
                cache_write_tokens=cache_write_tokens,
            )
    key = "/".join(m for m in models if m)
    with _warn_lock:
        first = key not in _warned_unpriced
        _warned_unpriced.add(key)
    if first:
        _log.warning("loopwatch: no price for model %s; its calls are costed at 0", key)
    return 0.0


def int_or_zero(value: Any) -> int:
    """A token count as sent, or 0 when it is missing or not an int (a bool is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def str_or_none(value: object) -> str | None:
    """A non-empty string as is, else None (a response id the provider left out)."""
    return value if isinstance(value, str) and value else None


def tool_call_arguments(raw: object) -> dict[str, Any] | str:
    """A tool call's arguments as a ``ToolCall`` holds them: what :func:`parse_arguments` makes
    of ``raw`` (the one parser), else the text the model sent, kept as sent (the registry
    rejects it with ``INVALID_ARGUMENTS`` and the model sees why)."""
    try:
        return parse_arguments(raw)
    except InvalidArguments as exc:
        return exc.text


def arguments_json(arguments: Mapping[str, Any] | str) -> str:
    """Arguments as the JSON string the wire formats carry (a raw string is sent back as is)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def looks_like_error(content: str | None) -> bool:
    """A tool result in the ``{"error": ..., "code": ...}`` convention (docs/tools.md)."""
    if not content or not content.startswith("{") or '"error"' not in content:
        return False
    try:
        data = json.loads(content)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data


class RawHistory:
    """Provider blocks of assistant messages that ``Message`` cannot hold (thinking with its
    signature, server-tool blocks of a ``pause_turn``), so they are sent back exactly.

    Keyed by the message object itself, bounded (least recently made dropped first).
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._items: OrderedDict[int, tuple[Message, list[dict[str, Any]]]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, message: Message, blocks: list[dict[str, Any]]) -> None:
        with self._lock:
            self._items[id(message)] = (message, blocks)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def get(self, message: Message) -> list[dict[str, Any]] | None:
        with self._lock:
            found = self._items.get(id(message))
        if found is None or found[0] is not message:
            return None
        return found[1]
