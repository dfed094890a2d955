"""File mode (docs/store.md, "Two ways to run"): finished spans straight into a DuckDB store.

Wire it as::

    exporter = DuckDBSpanExporter("loopwatch.duckdb")
    provider.add_span_processor(store_processor(exporter))

:class:`DuckDBSpanExporter` is a standard ``SpanExporter``: ``export`` answers ``SUCCESS`` only
once the batch is committed, ``FAILURE`` on any error, and never raises; lost spans are counted
with :func:`~loopwatch.instrumentation.runtime.drops.record_drop`. :func:`store_processor` gives
it a :class:`~loopwatch.instrumentation.CountingBatchSpanProcessor` (bounded memory, every
refused span counted) with defaults fit for a batch job. That processor and its drop reasons are
re-exported here, where they used to live. ``DuckDBSpanExporter(path, writer="process")`` hands
the file to a writer process (:mod:`loopwatch.queries.store.writer`) and pipelines with that
processor.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from loopwatch.instrumentation.runtime.drops import record_drop
from loopwatch.instrumentation.runtime.extras import MissingExtraError
from loopwatch.instrumentation.runtime.settings import env_int as env_int_strict
from loopwatch.instrumentation.runtime.settings import env_str
from loopwatch.instrumentation.telemetry.processor import (
    BATCH_SIZE_ENV,
    DROP_EXPORT_FAILED,
    DROP_QUEUE_FULL,
    DROP_SHUTDOWN,
    QUEUE_SIZE_ENV,
    SHUTDOWN_TIMEOUT_ENV,
    CountingBatchSpanProcessor,
    QueueStats,
    env_int,
)

try:
    import opentelemetry.sdk.trace  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("store", __name__, exc) from exc

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .columns import SpanBatch
from .database import Store, StoreError, resolve_db_path, warm_up_conversion
from .writer import WriterProcess

__all__ = [
    "DROP_EXPORT_FAILED",
    "DROP_QUEUE_FULL",
    "DROP_SHUTDOWN",
    "DUCKDB_STORE",
    "STORE_CHECKPOINT_MB",
    "STORE_MAX_EXPORT_BATCH_SIZE",
    "STORE_MAX_QUEUE_SIZE",
    "STORE_SHUTDOWN_TIMEOUT_MS",
    "STORE_THREADS",
    "WRITERS",
    "WRITER_ENV",
    "WRITER_INLINE",
    "WRITER_PROCESS",
    "CountingBatchSpanProcessor",
    "DuckDBSpanExporter",
    "DuckDBStore",
    "DuckDBStoreOutput",
    "QueueStats",
    "resolve_writer",
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
STORE_SHUTDOWN_TIMEOUT_MS: Final = 30000
"""File mode's wait at shutdown: a local file keeps taking batches, so a batch job's last
spans are written rather than counted lost (live mode's 5 s bounds an unreachable collector)."""


WRITER_ENV: Final = "LOOPWATCH_STORE_WRITER"
"""Environment variable choosing the exporter's writer: ``inline`` or ``process``."""
WRITER_INLINE: Final = "inline"
"""The exporting process writes the file itself, from the export thread (the default)."""
WRITER_PROCESS: Final = "process"
"""A child process owns the file and commits what the export thread converts."""
WRITERS: Final = (WRITER_INLINE, WRITER_PROCESS)


def resolve_writer(value: str | None = None) -> str:
    """The store writer to use: ``value``, else ``$LOOPWATCH_STORE_WRITER``, else ``inline``.

    Raises :class:`ValueError` naming the setting when it is not one of :data:`WRITERS`.
    """
    source = "writer"
    if value is None:
        value = env_str(WRITER_ENV) or WRITER_INLINE
        source = WRITER_ENV
    if value not in WRITERS:
        raise ValueError(f"{source} must be one of {', '.join(WRITERS)}, got {value!r}")
    return value


_W = TypeVar("_W", Store, WriterProcess)


def _answer(result: SpanExportResult) -> Callable[[], SpanExportResult]:
    return lambda: result


class DuckDBSpanExporter(SpanExporter):
    """Writes each exported batch of spans to a loopwatch DuckDB store in one transaction.

    ``path`` defaults to ``$LOOPWATCH_DB``, else ``./loopwatch.duckdb``. ``writer`` (argument,
    else ``$LOOPWATCH_STORE_WRITER``, else ``inline``) says who writes the file:

    - ``inline``: this process, from the export thread;
    - ``process``: a child process (:class:`~.writer.WriterProcess`) that owns
      the file; this process converts each batch to Arrow and sends it there. With
      :class:`CountingBatchSpanProcessor` the next batch is converted while the last one is
      committed, which lifts ingest by about half on two cores and keeps DuckDB's work and
      memory out of the agent's process. The child exits at :meth:`shutdown`, or when this
      process dies, after committing what it was sent.

    Either way the file is opened (and locked: no other process may open it until
    :meth:`shutdown`) when the exporter is made; if that fails, the error is logged and kept in
    :attr:`open_error`, and each ``export`` tries again, answering ``FAILURE`` until it
    succeeds. ``export`` answers ``SUCCESS`` only once the batch is committed. Export failures
    are counted as ``export_failed`` drops, so processors must not count them again
    (:attr:`counts_own_drops`). Raises :class:`ValueError` for an unknown ``writer``.
    """

    counts_own_drops: Final = True
    """Tells :class:`CountingBatchSpanProcessor` that this exporter counts the spans it loses."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, writer: str | None = None):
        self.path = resolve_db_path(path)
        """The store file."""
        self.writer: str = resolve_writer(writer)
        """``inline`` or ``process``."""
        self.open_error: StoreError | None = None
        """Why the store could not be opened the last time it was tried; ``None`` once open."""
        self._store: Store | None = None
        self._process: WriterProcess | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._shutdown = False
        self._warned: set[str] = set()
        if self.writer == WRITER_PROCESS:
            self._open_process()
        else:
            self._open()

    def _forked(self) -> bool:
        if self._pid == os.getpid() or (self._store is None and self._process is None):
            return False
        # A forked child shares the parent's connection (or pipe) but not its file lock:
        # writing through it could corrupt the file. The child's spans are counted as lost.
        self._warn(
            StoreError(
                f"{self.path} belongs to process {self._pid}; this forked process cannot "
                "write it: give the child its own store path, or use live mode "
                "(`loopwatch serve`)."
            )
        )
        return True

    def _open(self) -> Store | None:
        if self._forked():
            return None
        if self._store is None:
            self._store = self._opened(self._new_store)
        return self._store

    def _new_store(self) -> Store:
        store = Store(self.path, threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB)
        try:
            # The first write pays one-time costs (pyarrow loads pandas, DuckDB sets up its
            # Arrow scan): ~0.3-0.6 s that, paid inside the first export, overflow the queue
            # of a fast batch job. Pay them here, at start-up, instead.
            store.warm_up()
        except Exception as exc:
            self._warn(exc)
        return store

    def _open_process(self) -> WriterProcess | None:
        if self._forked():
            return None
        if self._process is not None and not self._process.alive:
            self._warn(self._process.exit_error())
            self._process.close(0)
            self._process = None
        if self._process is None:
            self._process = self._opened(self._new_process)
        return self._process

    def _new_process(self) -> WriterProcess:
        warm_up_conversion()  # this side's share of what Store.warm_up does inline
        return WriterProcess(self.path, threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB)

    def _opened(self, make: Callable[[], _W]) -> _W | None:
        """``make()``, or ``None`` with the error kept in :attr:`open_error` and logged."""
        try:
            made = make()
        except StoreError as exc:
            self.open_error = exc
            self._warn(exc)
            return None
        self._pid = os.getpid()
        self.open_error = None
        return made

    def _warn(self, exc: Exception) -> None:
        # One log line per distinct problem, not one per batch.
        text = str(exc)
        if text not in self._warned:
            if len(self._warned) >= 64:  # messages vary (batch sizes): keep this bounded
                self._warned.clear()
            self._warned.add(text)
            _logger.warning("loopwatch: spans not stored: %s", text)

    def _lost(
        self, spans: Sequence[ReadableSpan], exc: Exception | None = None
    ) -> SpanExportResult:
        if exc is not None:
            self._warn(exc)
        record_drop(DROP_EXPORT_FAILED, len(spans))
        return SpanExportResult.FAILURE

    @property
    def pipelined(self) -> bool:
        """Whether :meth:`begin_export` overlaps work (the ``process`` writer): processors that
        know it (:class:`CountingBatchSpanProcessor`) then call it instead of ``export``."""
        return self.writer == WRITER_PROCESS

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Store the batch; ``SUCCESS`` once committed, else ``FAILURE`` with the loss counted."""
        if self.writer == WRITER_PROCESS:
            return self.begin_export(spans)()
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            with self._lock:
                if self._shutdown:
                    return self._lost(spans)
                store = self._open()
                if store is None:
                    return self._lost(spans)
                store.write(SpanBatch.from_sdk_spans(spans))
            return SpanExportResult.SUCCESS
        except Exception as exc:  # telemetry never raises into the agent
            return self._lost(spans, exc)

    def begin_export(self, spans: Sequence[ReadableSpan]) -> Callable[[], SpanExportResult]:
        """Start storing a batch; the call returned gives ``export``'s answer once it is known.

        With the ``process`` writer, the batch is converted and sent here and committed by the
        writer process meanwhile, so the caller may convert its next batch before asking for
        this one's answer (answers must be asked for in the order the batches were begun).
        With the ``inline`` writer the batch is stored before this returns. Never raises.
        """
        if self.writer != WRITER_PROCESS:
            return _answer(self.export(spans))
        if not spans:
            return _answer(SpanExportResult.SUCCESS)
        try:
            with self._lock:
                if self._shutdown:
                    return _answer(self._lost(spans))
                process = self._open_process()
                if process is None:
                    return _answer(self._lost(spans))
            batch = SpanBatch.from_sdk_spans(spans)
            if not batch.count:
                return _answer(SpanExportResult.SUCCESS)
            number = process.submit(batch)
        except Exception as exc:  # telemetry never raises into the agent
            return _answer(self._lost(spans, exc))

        def answer() -> SpanExportResult:
            try:
                process.wait(number)
            except Exception as exc:
                return self._lost(spans, exc)
            return SpanExportResult.SUCCESS

        return answer

    def shutdown(self) -> None:
        """Close the store (checkpointed); later exports fail and are counted.

        With the ``process`` writer, waits for the writer process to commit what it was sent,
        close the file and exit.
        """
        with self._lock:
            self._shutdown = True
            store, self._store = self._store, None
            process, self._process = self._process, None
        if self._pid != os.getpid():
            return
        try:
            if store is not None:
                store.close()
            if process is not None and process.close() != 0:
                self._warn(process.exit_error())
        except Exception as exc:
            self._warn(exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing to flush: every export is committed before its answer is given."""
        return True


def store_processor(
    exporter: SpanExporter,
    *,
    max_queue_size: int | None = None,
    schedule_delay_millis: float | None = None,
    max_export_batch_size: int | None = None,
    export_timeout_millis: float | None = None,
    shutdown_timeout_millis: float | None = None,
) -> CountingBatchSpanProcessor:
    """A :class:`CountingBatchSpanProcessor` with file mode's defaults, for a store exporter.

    Settings as for the processor (argument, else ``OTEL_BSP_*``), but the defaults fit a batch
    job writing to DuckDB: batches of :data:`STORE_MAX_EXPORT_BATCH_SIZE` (DuckDB's fixed cost
    per batch paid less often) and a queue of :data:`STORE_MAX_QUEUE_SIZE` (room for the spans
    a fast agent ends while one batch is written). The batch never defaults above the queue.
    Shutdown waits up to ``shutdown_timeout_millis`` (argument, else
    ``LOOPWATCH_SHUTDOWN_TIMEOUT_MS``, else :data:`STORE_SHUTDOWN_TIMEOUT_MS`).
    """
    if shutdown_timeout_millis is None:
        shutdown_timeout_millis = env_int_strict(
            SHUTDOWN_TIMEOUT_ENV, STORE_SHUTDOWN_TIMEOUT_MS, minimum=0
        )
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
        shutdown_timeout_millis=shutdown_timeout_millis,
    )


@dataclass(frozen=True, slots=True)
class DuckDBStoreOutput:
    """An opened store file: its exporter and the processor ``instrument()`` adds."""

    exporter: DuckDBSpanExporter
    processor: CountingBatchSpanProcessor

    @property
    def error(self) -> str | None:
        """Why the file cannot be written now (its exporter's ``open_error``), else ``None``."""
        error = self.exporter.open_error
        return None if error is None else str(error)


class DuckDBStore:
    """The store ``instrument(store=PATH)`` finds through the ``loopwatch.stores`` entry point.

    Registered in ``pyproject.toml``, so the telemetry layer never imports this package
    (docs/telemetry.md, *How instrument() finds the store*).
    """

    def resolve_writer(self, value: str | None) -> str:
        """See :func:`resolve_writer`."""
        return resolve_writer(value)

    def open(self, path: Path, *, writer: str) -> DuckDBStoreOutput:
        """A :class:`DuckDBSpanExporter` on ``path`` behind :func:`store_processor`'s defaults."""
        exporter = DuckDBSpanExporter(path, writer=writer)
        # File mode's defaults (bigger batches and queue) fit a batch job ending spans fast.
        return DuckDBStoreOutput(exporter, store_processor(exporter))


DUCKDB_STORE: Final = DuckDBStore()
"""The entry point's object (``loopwatch.stores``: ``duckdb``)."""
