"""The span processors :func:`~loopwatch.instrumentation.telemetry.instrument` adds, and how
they are flushed and shut down together (docs/telemetry.md, *When telemetry fails*).

A provider cannot drop a processor once added, so ``instrument()`` adds one :class:`Fanout` per
provider and swaps what it forwards to; an output that could not start is replaced by an
:class:`Unavailable` that counts every span it would have written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ..runtime.drops import dropped, record_drop

__all__ = [
    "DROP_PROCESSOR_FAILED",
    "DROP_STORE_UNAVAILABLE",
    "Fanout",
    "Unavailable",
    "flush_all",
    "lost_spans",
    "shutdown_all",
]

_log = logging.getLogger(__name__)

DROP_PROCESSOR_FAILED: Final = "processor_failed"
"""A span processor raised on a span; that processor skipped it."""
DROP_STORE_UNAVAILABLE: Final = "store_unavailable"
"""The store could not be opened; every span meant for it is counted here."""


class Fanout(SpanProcessor):
    """The one processor loopwatch adds to a provider; it forwards to the active wiring.

    Calling ``instrument()`` again swaps what this forwards to instead of stacking a second set
    of exporters. A processor that raises is skipped for that span and counted.
    """

    def __init__(self) -> None:
        self.processors: tuple[SpanProcessor, ...] = ()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for p in self.processors:
            try:
                p.on_start(span, parent_context)
            except Exception:
                record_drop(DROP_PROCESSOR_FAILED)

    def on_end(self, span: ReadableSpan) -> None:
        for p in self.processors:
            try:
                p.on_end(span)
            except Exception:
                record_drop(DROP_PROCESSOR_FAILED)

    def shutdown(self) -> None:
        # The application shut its provider down: flush and close loopwatch's outputs with it.
        processors, self.processors = self.processors, ()
        shutdown_all(processors)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return flush_all(self.processors, timeout_millis)


class Unavailable(SpanProcessor):
    """Stands in for an output that could not start: counts every span it would have written."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def on_end(self, span: ReadableSpan) -> None:
        record_drop(self.reason)


def lost_spans() -> int:
    """Spans lost on the way out so far; observer errors lose no exported span."""
    return sum(n for reason, n in dropped().items() if reason != "observer_error")


def shutdown_all(processors: Sequence[SpanProcessor]) -> None:
    """Shut each processor down; one that raises is logged and the others still run."""
    for p in processors:
        try:
            p.shutdown()
        except Exception:
            _log.exception("loopwatch: shutting down %s failed", type(p).__name__)


def flush_all(processors: Sequence[SpanProcessor], timeout_millis: int) -> bool:
    """Flush each processor; True only when every one finished in time."""
    ok = True
    for p in processors:
        try:
            ok = p.force_flush(timeout_millis) and ok
        except Exception:
            _log.exception("loopwatch: flushing %s failed", type(p).__name__)
            ok = False
    return ok
