"""The DuckDB store: schema, :class:`Store` (:mod:`.database`), span columns, the writer process,
the span exporter and schema migrations.

The names below are what ``loopwatch.queries.store`` exported before it became a package;
they are imported on first use (so ``store.errors`` loads no DuckDB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwatch.instrumentation.runtime.lazy import lazy_names

if TYPE_CHECKING:
    from .database import (
        DB_ENV,
        DEFAULT_DB,
        SCHEMA_VERSION,
        STORE_TABLES,
        UNKNOWN,
        EventRecord,
        SchemaVersionError,
        SpanBatch,
        SpanColumns,
        SpanRecord,
        Store,
        StoreCorruptError,
        StoreError,
        StoreLockedError,
        StoreNotFoundError,
        StoreUnavailableError,
        connect_read_only,
        is_damaged_store_error,
        is_fatal_store_error,
        record_from_span,
        records_from_spans,
        resolve_db_path,
        runs_table,
        spans_table,
        warm_up_conversion,
    )

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "STORE_TABLES",
    "UNKNOWN",
    "EventRecord",
    "SchemaVersionError",
    "SpanBatch",
    "SpanColumns",
    "SpanRecord",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "connect_read_only",
    "is_damaged_store_error",
    "is_fatal_store_error",
    "record_from_span",
    "records_from_spans",
    "resolve_db_path",
    "runs_table",
    "spans_table",
    "warm_up_conversion",
]

# Imported on first use, like the package above it.
_LAZY: dict[str, str] = dict.fromkeys(__all__, ".database")

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)
