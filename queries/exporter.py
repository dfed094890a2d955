"""File mode (DESIGN §6): finished spans straight into a DuckDB store.

Wire it as::

    exporter = DuckDBSpanExporter("loopwatch.duckdb")
    provider.add_span_processor(store_processor(exporter))

:class:`DuckDBSpanExporter` is a standard ``SpanExporter``: ``export`` answers ``SUCCESS`` only
once the batch is committed, ``FAILURE`` on any error, and never raises; lost spans are counted
with :func:`~loopwatch.instrumentation.drops.record_drop`. :func:`store_processor` gives it a
:class:`~loopwatch.instrumentation.processor.CountingBatchSpanProcessor` (bounded memory, every
refused span counted) with defaults fit for a batch job. That processor and its drop reasons are
re-exported here, where they used to live.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Final

from loopwatch.instrumentation.drops import record_drop
from loopwatch.instrumentation.processor import (
    BATCH_SIZE_ENV,
    DROP_EXPORT_FAILED,
    DROP_QUEUE_FULL,
    DROP_SHUTDOWN,
    QUEUE_SIZE_ENV,
    CountingBatchSpanProcessor,
    QueueStats,
    env_int,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .store import Store, StoreError, resolve_db_path

__all__ = [
    "DROP_EXPORT_FAILED",
    "DROP_QUEUE_FULL",
    "DROP_SHUTDOWN",
    "STORE_CHECKPOINT_MB",
    "STORE_MAX_EXPORT_BATCH_SIZE",
    "STORE_MAX_QUEUE_SIZE",
    "STORE_THREADS",
    "CountingBatchSpanProcessor",
    "DuckDBSpanExporter",
    "QueueStats",
    "store_processor",
]

_logger = logging.getLogger(__name__)

STORE_THREADS: Final = 1
"""DuckDB threads of the exporter's store: batches are small, and the agent needs the cores."""
STORE_CHECKPOINT_MB: Final = 64
"""WAL size before a checkpoint: 4x DuckDB's default ingests ~20% faster at 200k spans."""
STORE_MAX_EXPORT_BATCH_SIZE: Final = 2048
"""File mode's batch size: DuckDB's fixed cost per batch (a few ms) paid 4x less than at 512."""
STORE_MAX_QUEUE_SIZE: Final = 8192
"""File mode's queue: room for a batch job's burst while one batch is written (~25 MB)."""


class DuckDBSpanExporter(SpanExporter):
    """Writes each exported batch of spans to a loopwatch DuckDB store in one transaction.

    ``path`` defaults to ``$LOOPWATCH_DB``, else ``./loopwatch.duckdb``. The file is opened
    (and locked: no other process may open it until :meth:`shutdown`) when the exporter is
    made; if that fails, the error is logged and kept in :attr:`open_error`, and each
    ``export`` tries again, answering ``FAILURE`` until it succeeds. Export failures are
    counted as ``export_failed`` drops, so processors must not count them again
    (:attr:`counts_own_drops`).
    """

    counts_own_drops: Final = True
    """Tells :class:`CountingBatchSpanProcessor` that this exporter counts the spans it loses."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = resolve_db_path(path)
        """The store file."""
        self.open_error: StoreError | None = None
        """Why the store could not be opened the last time it was tried; ``None`` once open."""
        self._store: Store | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._shutdown = False
        self._warned: set[str] = set()
        self._open()

    def _open(self) -> Store | None:
        if self._store is not None and self._pid != os.getpid():
            # A forked child shares the parent's connection but not its file lock: writing
            # through it could corrupt the file. The child's spans are counted as lost.
            self._warn(
                StoreError(
                    f"{self.path} belongs to process {self._pid}; this forked process cannot "
                    "write it: give the child its own store path, or use live mode "
                    "(`loopwatch serve`)."
                )
            )
            return None
        if self._store is None:
            try:
                self._store = Store(
                    self.path, threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB
                )
                self._pid = os.getpid()
                self.open_error = None
            except StoreError as exc:
                self.open_error = exc
                self._warn(exc)
            else:
                try:
                    # The first write pays one-time costs (pyarrow loads pandas, DuckDB sets up
                    # its Arrow scan): ~0.3-0.6 s that, paid inside the first export, overflow
                    # the queue of a fast batch job. Pay them here, at start-up, instead.
                    self._store.warm_up()
                except Exception as exc:
                    self._warn(exc)
        return self._store

    def _warn(self, exc: Exception) -> None:
        # One log line per distinct problem, not one per batch.
        text = str(exc)
        if text not in self._warned:
            if len(self._warned) >= 64:  # messages vary (batch sizes): keep this bounded
                self._warned.clear()
            self._warned.add(text)
            _logger.warning("loopwatch: spans not stored: %s", text)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Store the batch; ``SUCCESS`` once committed, else ``FAILURE`` with the loss counted."""
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            with self._lock:
                if self._shutdown:
                    record_drop(DROP_EXPORT_FAILED, len(spans))
                    return SpanExportResult.FAILURE
                store = self._open()
                if store is None:
                    record_drop(DROP_EXPORT_FAILED, len(spans))
                    return SpanExportResult.FAILURE
                store.write_spans(spans)
            return SpanExportResult.SUCCESS
        except Exception as exc:  # telemetry never raises into the agent
            self._warn(exc)
            record_drop(DROP_EXPORT_FAILED, len(spans))
            return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """Close the store (checkpointed); later exports fail and are counted."""
        with self._lock:
            self._shutdown = True
            store, self._store = self._store, None
        if store is not None and self._pid == os.getpid():
            try:
                store.close()
            except Exception as exc:
                self._warn(exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing to flush: every export is committed before it returns."""
        return True


def store_processor(
    exporter: SpanExporter,
    *,
    max_queue_size: int | None = None,
    schedule_delay_millis: float | None = None,
    max_export_batch_size: int | None = None,
    export_timeout_millis: float | None = None,
) -> CountingBatchSpanProcessor:
    """A :class:`CountingBatchSpanProcessor` with file mode's defaults, for a store exporter.

    Settings as for the processor (argument, else ``OTEL_BSP_*``), but the defaults fit a batch
    job writing to DuckDB: batches of :data:`STORE_MAX_EXPORT_BATCH_SIZE` (DuckDB's fixed cost
    per batch paid less often) and a queue of :data:`STORE_MAX_QUEUE_SIZE` (room for the spans
    a fast agent ends while one batch is written). The batch never defaults above the queue.
    """
    if max_queue_size is None:
        max_queue_size = env_int(QUEUE_SIZE_ENV, STORE_MAX_QUEUE_SIZE)
    if max_export_batch_size is None:
        default_batch = min(STORE_MAX_EXPORT_BATCH_SIZE, max(max_queue_size, 1))
        max_export_batch_size = env_int(BATCH_SIZE_ENV, default_batch)
    return CountingBatchSpanProcessor(
        exporter,
        max_queue_size=max_queue_size,
        schedule_delay_millis=schedule_delay_millis,
        max_export_batch_size=max_export_batch_size,
        export_timeout_millis=export_timeout_millis,
    )
