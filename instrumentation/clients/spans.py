"""What the model clients add to the loop's ``chat`` span: what only the client knows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..runtime.drops import record_drop

__all__ = ["annotate_model_span", "annotate_response", "loop_chat_span"]


try:  # the OTel API comes with loopwatch's default install; the clients work without it
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover
    _trace = None  # type: ignore[assignment]


def loop_chat_span() -> Any:
    """The current span when it is a loopwatch ``chat`` span, else None."""
    if _trace is None:
        return None
    span = _trace.get_current_span()
    attrs = getattr(span, "attributes", None)
    if not attrs or not span.is_recording():
        return None
    if attrs.get("gen_ai.operation.name") != "chat" or "loopwatch.run_id" not in attrs:
        return None
    return span


def annotate_model_span(attributes: Mapping[str, Any]) -> None:
    """Add what only the client knows (provider, response id and model) to the loop's ``chat``
    span, when one is current; a span of the application's own is left alone."""
    try:
        span = loop_chat_span()
        if span is not None:
            span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    except Exception:
        record_drop("observer_error")


def annotate_response(provider: str, response: Any) -> str | None:
    """The model the provider says answered (``response.model`` when a string), after adding it,
    the provider and the response id to the loop's ``chat`` span (:func:`annotate_model_span`)."""
    model = getattr(response, "model", None)
    model = model if isinstance(model, str) else None
    annotate_model_span(
        {
            "gen_ai.provider.name": provider,
            "gen_ai.response.id": getattr(response, "id", None),
            "gen_ai.response.model": model,
        }
    )
    return model
