"""A batch span processor that bounds its memory and counts every span it loses.

The SDK's ``BatchSpanProcessor`` drops spans silently when its queue is full (one log line, no
count). :class:`CountingBatchSpanProcessor` batches the same way and reads the same settings,
but holds at most ``max_queue_size`` spans (the batch being exported included) and counts each
span it cannot take with :func:`~loopwatch.instrumentation.runtime.drops.record_drop`. It serves any
``SpanExporter``: the DuckDB store (file mode) and OTLP/HTTP (live mode). It imports neither
DuckDB nor Arrow, so a live-mode agent does not load them.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

from ..runtime.extras import MissingExtraError

try:
    import opentelemetry.sdk.trace  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("otel", __name__, exc) from exc

from opentelemetry.context import (
    _SUPPRESS_INSTRUMENTATION_KEY,
    Context,
    attach,
    detach,
    set_value,
)
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..runtime.drops import record_drop
from .batch_settings import (
    BATCH_SIZE_ENV,
    DEFAULT_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_SIZE,
    DEFAULT_SHUTDOWN_TIMEOUT_MS,
    EXPORT_TIMEOUT_ENV,
    QUEUE_SIZE_ENV,
    SCHEDULE_DELAY_ENV,
    SHUTDOWN_TIMEOUT_ENV,
    BatchSettings,
    PipelinedSpanExporter,
    QueueStats,
    env_int,
)

__all__ = [
    "BATCH_SIZE_ENV",
    "DEFAULT_MAX_EXPORT_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_SIZE",
    "DEFAULT_SHUTDOWN_TIMEOUT_MS",
    "DROP_EXPORT_FAILED",
    "DROP_QUEUE_FULL",
    "DROP_SHUTDOWN",
    "EXPORT_TIMEOUT_ENV",
    "QUEUE_SIZE_ENV",
    "SCHEDULE_DELAY_ENV",
    "SHUTDOWN_TIMEOUT_ENV",
    "CountingBatchSpanProcessor",
    "PipelinedSpanExporter",
    "QueueStats",
    "env_int",
]

_logger = logging.getLogger(__name__)

DROP_EXPORT_FAILED: Final = "export_failed"
"""An exporter refused or raised on a batch (or the store could not write it)."""
DROP_QUEUE_FULL: Final = "queue_full"
"""A span ended while the processor already held ``max_queue_size`` spans."""
DROP_SHUTDOWN: Final = "shutdown"
"""A span ended after ``shutdown()``, or was still queued when shutdown timed out."""

_YIELD_S: Final = 0.0
"""How long an agent thread sleeps after ending a span while the queue is over half full.

Zero: the point is only to release the GIL. An agent that ends spans in a tight loop and
releases the GIL itself every millisecond or so (``uuid4`` reads ``os.urandom``) starves the
export thread: CPython hands the GIL to a waiting thread only after 5 ms without a release,
so the exporter's Python work ran ~60x slower than alone and a fast batch job overflowed any
queue. A ``sleep(0)`` in the agent thread hands it over at once.
"""
_SHUTDOWN_GRACE_S: Final = 0.25
"""The last part of shutdown's wait (at most a quarter of it) that follows the exporter's own
shutdown, so an export it interrupts can still report its result."""


class CountingBatchSpanProcessor(SpanProcessor):
    """Batches ended spans to an exporter from a background thread, in bounded memory.

    Like the SDK's ``BatchSpanProcessor`` (and configured the same way: argument, else
    ``OTEL_BSP_MAX_QUEUE_SIZE`` / ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` / ``OTEL_BSP_SCHEDULE_DELAY``
    / ``OTEL_BSP_EXPORT_TIMEOUT``, else 2048 / 512 / 5000 ms / 30000 ms), with four differences:

    - at most ``max_queue_size`` spans are held at any time, *including* the batch being
      exported; a span that ends while the processor is full is refused at once (the agent never
      waits) and counted as a ``queue_full`` drop;
    - batches the exporter refuses are counted as ``export_failed`` drops, unless the exporter
      says it counts them itself (``counts_own_drops = True``, as ``DuckDBSpanExporter``);
    - while more than half the queue is held, the thread that ends a span releases the GIL
      (``time.sleep(0)``) before going on, so that an agent in a tight loop cannot starve the
      export thread (see :data:`_YIELD_S`); it never waits for the exporter;
    - ``shutdown`` waits at most ``shutdown_timeout_millis`` (argument, else
      ``LOOPWATCH_SHUTDOWN_TIMEOUT_MS``, else 5000) for the queue to drain, counts what is left
      as ``shutdown`` drops and shuts the exporter down, so an unreachable collector never holds
      the process at exit (docs/telemetry.md, *Shutdown*).

    A full batch is exported at once; a partial one after ``schedule_delay_millis``.
    ``force_flush`` waits until every span that ended before it was called has been exported.
    An exporter whose ``pipelined`` is ``True`` (a :class:`PipelinedSpanExporter`) is driven
    through ``begin_export``: the next batch is begun before the last one's answer is asked for,
    so at most two batches are held by the export at once (both count against the queue).
    """

    def __init__(
        self,
        exporter: SpanExporter,
        max_queue_size: int | None = None,
        schedule_delay_millis: float | None = None,
        max_export_batch_size: int | None = None,
        export_timeout_millis: float | None = None,
        shutdown_timeout_millis: float | None = None,
    ) -> None:
        settings = BatchSettings.resolve(
            max_queue_size,
            schedule_delay_millis,
            max_export_batch_size,
            export_timeout_millis,
            shutdown_timeout_millis,
        )
        self._exporter = exporter
        self.max_queue_size: int = settings.max_queue_size
        """The most spans held at once."""
        self.max_export_batch_size: int = settings.max_export_batch_size
        """The most spans per export call."""
        self.schedule_delay_millis: float = float(settings.schedule_delay_millis)
        """How long a partial batch may wait."""
        self.export_timeout_millis: float = float(settings.export_timeout_millis)
        """OTel's export timeout setting (the exporter's own timeout bounds one export)."""
        self.shutdown_timeout_millis: float = float(settings.shutdown_timeout_millis)
        """The longest ``shutdown`` waits for the queue to drain before counting the rest lost."""
        self._yield_above = self.max_queue_size // 2
        self._counts_own = bool(getattr(exporter, "counts_own_drops", False))
        self._init_state()
        self._pid = os.getpid()
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork)

            def after_in_child() -> None:
                method = ref()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=after_in_child)

    def _init_state(self, shutdown: bool = False) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._in_flight = 0
        self._received = 0
        self._done = 0  # spans whose export finished (either way), in arrival order
        self._flush_target = 0
        self._peak = 0
        self._refused = 0
        self._exported = 0
        self._failed = 0
        self._abandoned = False  # shutdown gave up waiting: in-flight spans already counted
        self._stop_taking = False  # shutdown's deadline is near: take no further batch
        self._shutdown = shutdown
        self._worker = threading.Thread(target=self._run, name="loopwatch-span-export", daemon=True)
        if not shutdown:
            self._worker.start()

    def _after_fork(self) -> None:
        # The parent's thread, lock and queued spans do not exist in the child.
        self._init_state(shutdown=self._shutdown)
        self._pid = os.getpid()

    # --- SpanProcessor ------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None or not ctx.trace_flags.sampled:
            return
        behind = False
        with self._cond:
            if self._shutdown:
                refused_reason: str | None = DROP_SHUTDOWN
            elif len(self._queue) + self._in_flight >= self.max_queue_size:
                refused_reason = DROP_QUEUE_FULL
                self._refused += 1
            else:
                refused_reason = None
                self._queue.append(span)
                self._received += 1
                held = len(self._queue) + self._in_flight
                if held > self._peak:
                    self._peak = held
                if len(self._queue) == self.max_export_batch_size:
                    self._cond.notify_all()
                behind = held > self._yield_above
        if refused_reason is not None:
            record_drop(refused_reason)
        elif behind:
            # Hand the GIL to the export thread before the queue overflows (see _YIELD_S).
            time.sleep(_YIELD_S)

    def shutdown(self) -> None:
        """Export what is queued, waiting at most ``shutdown_timeout_millis``; then shut the
        exporter down. Spans still held at the deadline are counted as ``shutdown`` drops.

        Near the deadline the exporter is shut down first (OTLP's exporter then stops waiting to
        retry), so an export that can still end does, and is counted by its own result; only a
        batch still in the exporter's hands at the deadline (a collector that does not answer)
        is counted here, at once, so the count is right when the process exits.
        """
        with self._cond:
            if self._shutdown:
                return
            self._shutdown = True
            self._cond.notify_all()
        total = self.shutdown_timeout_millis / 1000
        deadline = time.monotonic() + total
        self._worker.join(total - min(total / 4, _SHUTDOWN_GRACE_S))
        exporter_closed = self._worker.is_alive()
        if exporter_closed:
            with self._cond:
                self._stop_taking = True  # no further batch: what is queued is counted below
            self._exporter.shutdown()
            self._worker.join(max(deadline - time.monotonic(), 0.0))
        self._count_left_at_shutdown()
        if not exporter_closed:
            self._exporter.shutdown()

    def _count_left_at_shutdown(self) -> None:
        with self._cond:
            left = len(self._queue)
            self._queue.clear()
            if self._worker.is_alive() and not self._counts_own:
                # Still in the exporter's hands: counted now, and not again when that ends.
                left += self._in_flight
                self._abandoned = True
        if left:
            record_drop(DROP_SHUTDOWN, left)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every span that ended before this call; ``False`` if that took too long."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            target = self._received
            if target > self._flush_target:
                self._flush_target = target
            self._cond.notify_all()
            while self._done < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._cond.wait(remaining)
        left_ms = max(0, int((deadline - time.monotonic()) * 1000))
        # The SDK's base exporter answers None: it has nothing of its own to flush.
        return self._exporter.force_flush(left_ms) is not False

    # --- state -------------------------------------------------------------------------

    @property
    def held(self) -> int:
        """Spans held now: queued plus in the batch being exported."""
        with self._cond:
            return len(self._queue) + self._in_flight

    def stats(self) -> QueueStats:
        """The counters so far."""
        with self._cond:
            return QueueStats(
                received=self._received,
                held=len(self._queue) + self._in_flight,
                peak_held=self._peak,
                dropped_queue_full=self._refused,
                exported=self._exported,
                failed=self._failed,
            )

    # --- worker ------------------------------------------------------------------------

    def _next_batch(self, wait: bool = True) -> list[ReadableSpan] | None:
        """The next batch to export; ``None`` when shut down with nothing left, or, when not
        ``wait``-ing, when no batch is due now."""
        delay = self.schedule_delay_millis / 1000
        with self._cond:
            deadline = time.monotonic() + delay
            while True:
                if self._stop_taking:
                    return None
                queued = len(self._queue)
                flushing = self._flush_target > self._done + self._in_flight
                if queued and (queued >= self.max_export_batch_size or self._shutdown or flushing):
                    break
                if self._shutdown or not wait:
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if queued:
                        break
                    deadline = time.monotonic() + delay
                    remaining = delay
                self._cond.wait(remaining)
            n = min(queued, self.max_export_batch_size)
            popleft = self._queue.popleft
            batch = [popleft() for _ in range(n)]
            self._in_flight += n
            return batch

    def _run(self) -> None:
        begin = getattr(self._exporter, "begin_export", None)
        if getattr(self._exporter, "pipelined", False) is True and callable(begin):
            self._run_pipelined(begin)
            return
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._finished(batch, self._call(partial(self._exporter.export, batch), batch))

    def _run_pipelined(
        self, begin: Callable[[Sequence[ReadableSpan]], Callable[[], SpanExportResult]]
    ) -> None:
        """Begin the next batch's export before asking for the previous one's answer.

        For exporters with ``begin_export`` (a :class:`PipelinedSpanExporter`): the export
        thread prepares batch N+1 while batch N is written elsewhere. At most one batch waits
        for its answer; it is asked for as soon as no next batch is due.
        """
        pending: tuple[list[ReadableSpan], Callable[[], SpanExportResult] | None] | None = None
        while True:
            batch = self._next_batch(wait=pending is None)
            if batch is None and pending is None:
                return
            started = None
            if batch is not None:
                started = (batch, self._call(partial(begin, batch), batch))
            if pending is not None:
                done, answer = pending
                self._finished(done, None if answer is None else self._call(answer, done))
            pending = started

    def _call(self, fn: Callable[[], Any], batch: list[ReadableSpan]) -> Any:
        """``fn()`` with instrumentation suppressed; ``None`` if it raised (logged)."""
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            return fn()
        except Exception:
            _logger.exception("loopwatch: span exporter raised; %d spans lost", len(batch))
            return None
        finally:
            detach(token)

    def _finished(self, batch: list[ReadableSpan], result: Any) -> None:
        """Count one batch's outcome: ``result`` is the exporter's answer, ``None`` if it raised."""
        ok = result is SpanExportResult.SUCCESS
        with self._cond:
            counted = self._abandoned
        if not counted and (result is None or (not ok and not self._counts_own)):
            record_drop(DROP_EXPORT_FAILED, len(batch))
        with self._cond:
            self._in_flight -= len(batch)
            self._done += len(batch)
            if ok:
                self._exported += len(batch)
            else:
                self._failed += len(batch)
            self._cond.notify_all()
