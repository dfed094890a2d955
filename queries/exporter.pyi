"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.store.exporter`.
"""

from loopwatch.queries.store.exporter import (
    DROP_EXPORT_FAILED as DROP_EXPORT_FAILED,
)
from loopwatch.queries.store.exporter import (
    DROP_QUEUE_FULL as DROP_QUEUE_FULL,
)
from loopwatch.queries.store.exporter import (
    DROP_SHUTDOWN as DROP_SHUTDOWN,
)
from loopwatch.queries.store.exporter import (
    STORE_CHECKPOINT_MB as STORE_CHECKPOINT_MB,
)
from loopwatch.queries.store.exporter import (
    STORE_MAX_EXPORT_BATCH_SIZE as STORE_MAX_EXPORT_BATCH_SIZE,
)
from loopwatch.queries.store.exporter import (
    STORE_MAX_QUEUE_SIZE as STORE_MAX_QUEUE_SIZE,
)
from loopwatch.queries.store.exporter import (
    STORE_THREADS as STORE_THREADS,
)
from loopwatch.queries.store.exporter import (
    WRITER_ENV as WRITER_ENV,
)
from loopwatch.queries.store.exporter import (
    WRITER_INLINE as WRITER_INLINE,
)
from loopwatch.queries.store.exporter import (
    WRITER_PROCESS as WRITER_PROCESS,
)
from loopwatch.queries.store.exporter import (
    WRITERS as WRITERS,
)
from loopwatch.queries.store.exporter import (
    CountingBatchSpanProcessor as CountingBatchSpanProcessor,
)
from loopwatch.queries.store.exporter import (
    DuckDBSpanExporter as DuckDBSpanExporter,
)
from loopwatch.queries.store.exporter import (
    QueueStats as QueueStats,
)
from loopwatch.queries.store.exporter import (
    resolve_writer as resolve_writer,
)
from loopwatch.queries.store.exporter import (
    store_processor as store_processor,
)

__all__ = [
    "DROP_EXPORT_FAILED",
    "DROP_QUEUE_FULL",
    "DROP_SHUTDOWN",
    "STORE_CHECKPOINT_MB",
    "STORE_MAX_EXPORT_BATCH_SIZE",
    "STORE_MAX_QUEUE_SIZE",
    "STORE_THREADS",
    "WRITERS",
    "WRITER_ENV",
    "WRITER_INLINE",
    "WRITER_PROCESS",
    "CountingBatchSpanProcessor",
    "DuckDBSpanExporter",
    "QueueStats",
    "resolve_writer",
    "store_processor",
]
