"""The DuckDB store (docs/store.md): one file holding ``spans``, ``runs`` and ``schema_version``.

Spans arrive in batches: finished SDK spans (file mode's exporter, inline or through its writer
process), OTLP decoded by ``loopwatch serve``, or synthetic rows. Each front end builds one
:class:`SpanBatch` (Arrow tables of ``spans`` and ``runs`` rows) and hands it to
:meth:`Store.write`, the one write method, which inserts each table in one statement inside one
transaction: a batch is stored whole or not at all, and once the call returns it is committed.

DuckDB lets one process write a file and, meanwhile, no other process open it. Opening a file
another process holds raises :class:`StoreLockedError`, naming that process.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, TypeVar

from loopwatch.instrumentation.runtime.extras import MissingExtraError

try:
    import duckdb
    import pyarrow  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("store", __name__, exc) from exc

import duckdb
import pyarrow as pa
from loopwatch.instrumentation.runtime import semconv as sc
from loopwatch.instrumentation.runtime.reasons import StopReason

from .check import verify_tables
from .columns import (
    UNKNOWN,
    EventRecord,
    SpanBatch,
    SpanColumns,
    SpanRecord,
    record_from_span,
    records_from_spans,
    runs_table,
    spans_table,
)
from .errors import (
    DB_ENV,
    DEFAULT_DB,
    SCHEMA_VERSION,
    STORE_TABLES,
    SchemaVersionError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    StoreUnavailableError,
    is_damaged_store_error,
    is_fatal_store_error,
    one_line,
    resolve_db_path,
)
from .late import LateRows
from .opening import check_schema, connect
from .spend_peaks import PendingPeaks
from .write_sql import apply_derived, insert_batch

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

_PROBE_KEY: Final = "loopwatch:probe"
"""The delivery key :meth:`Store.probe` commits and deletes again (never a real digest)."""

_T = TypeVar("_T")

# Spans shaped like a loop's (a run span, a tool span with an event and an untyped attribute)
# so that Store.warm_up touches every kind of column conversion once.
_WARM_UP_RECORDS: Final = (
    SpanRecord(
        "0" * 31 + "1",
        "0" * 15 + "1",
        f"{sc.SPAN_RUN} warm-up",
        1,
        2,
        attributes={
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.RUN_ID: "warm-up",
            sc.TASK_TYPE: "warm-up",
            sc.STOP_REASON: str(StopReason.COMPLETED),
            sc.STEP_INDEX: 1,
            sc.GEN_AI_USAGE_INPUT_TOKENS: 1,
            sc.COST_USD: 0.5,
            sc.budget_used("steps"): 1,
            sc.TASK_SUCCESS: True,
        },
    ),
    SpanRecord(
        "0" * 31 + "1",
        "0" * 15 + "2",
        "execute_tool warm-up",
        1,
        2,
        parent_span_id="0" * 15 + "1",
        kind="CLIENT",
        status_code="ERROR",
        status_message="warm-up",
        service="warm-up",
        attributes={sc.GEN_AI_TOOL_NAME: "warm-up", "warm.up": ["a"], sc.TOOL_RETRIES: 0},
        events=(EventRecord("warm-up", 1, {"n": 1}),),
    ),
)


def warm_up_conversion() -> None:
    """Pay the conversion's one-time costs (pyarrow imports pandas on first use) now, in a
    process that builds batches but does not write them (the writer process's client)."""
    SpanBatch.from_records(_WARM_UP_RECORDS)


# --- the store -------------------------------------------------------------------------


def connect_read_only(path: str | os.PathLike[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to a loopwatch store, its schema version checked.

    ``path`` defaults as in :func:`resolve_db_path`. The caller closes the connection. Raises
    :class:`StoreNotFoundError`, :class:`StoreLockedError` (a writer holds the file),
    :class:`StoreCorruptError` or :class:`SchemaVersionError`.
    """
    return connect(resolve_db_path(path), read_only=True)


class Store:
    """A loopwatch DuckDB store, open for writing (the default) or read-only.

    A new file gets the schema and its ``schema_version``; an existing one must have version
    :data:`SCHEMA_VERSION`. ``threads`` caps DuckDB's threads for this database (``None``:
    DuckDB's default, one per core); ``checkpoint_mb`` is how much write-ahead log DuckDB lets
    grow before it folds it into the file (``None``: DuckDB's 16 MB; more is faster to ingest,
    and costs that much memory, WAL on disk and replay time after a crash); ``memory_mb`` caps
    DuckDB's buffer pool (``None``: DuckDB's 80% of RAM; a long-lived writer such as ``serve``
    sets it so that cached blocks of a growing file are evicted instead of piling up). Writes are
    serialised by a lock, so one ``Store`` may be shared by threads; readers in the same
    process use :meth:`cursor`. ``late``: set by serve, writes mark late rows (docs/store.md).
    """

    late: LateRows | None = None  # its instants change only inside run_write (see .late)

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        read_only: bool = False,
        threads: int | None = None,
        checkpoint_mb: int | None = None,
        memory_mb: int | None = None,
    ) -> None:
        self.path: Path = resolve_db_path(path)
        """The store file."""
        self.read_only: bool = read_only
        """Whether this store was opened read-only."""
        self.checkpoint_mb: int | None = checkpoint_mb
        """The checkpoint threshold this store was opened with (``None``: DuckDB's)."""
        self.memory_mb: int | None = memory_mb
        """The memory limit this store was opened with (``None``: DuckDB's)."""
        self._lock = threading.Lock()
        self._threads = threads
        self._owns_connection = True
        self._con: duckdb.DuckDBPyConnection | None = None
        self._writer: duckdb.DuckDBPyConnection | None = None
        self.peaks = PendingPeaks()  # live runs whose peak spend rate is filled later
        self.has_feedback: bool = False
        """Whether ``run_feedback`` may hold labels: then every write copies them onto its runs.
        Set at open and by :func:`loopwatch.queries.store.feedback.record_feedback`."""
        self._open()

    def _open(self) -> None:
        """Connect, apply this store's settings and make the writer's connection."""
        con = connect(self.path, self.read_only, self.memory_mb)
        settings: list[tuple[str, str, object]] = []
        if self._threads is not None:
            # A batch of a few thousand rows gains nothing from more threads, and a writer
            # inside an agent process should not compete with the agent for cores.
            settings.append(("threads", "SET threads = ?", self._threads))
        if self.checkpoint_mb is not None:
            settings.append(
                ("checkpoint_mb", "SET checkpoint_threshold = ?", f"{int(self.checkpoint_mb)}MB")
            )
        if self.memory_mb is not None:
            # DuckDB takes a negative size as "no limit": refuse it here instead.
            mb = self.memory_mb
            size = f"{int(mb)}MB" if mb >= 1 else f"invalid {mb}"
            settings.append(("memory_mb", "SET memory_limit = ?", size))
        for name, sql, value in settings:
            try:
                con.execute(sql, [value])
            except (duckdb.Error, ValueError) as exc:
                con.close()
                raise StoreError(
                    f"cannot set {name}={value!r} on {self.path} ({one_line(str(exc))}): "
                    "pass a positive integer or None.",
                    self.path,
                ) from exc
        # Writes go through their own connection, so a result left unread on `connection`
        # (or a transaction left open there) never blocks them.
        writer = None if self.read_only else con.cursor()
        if writer is not None:
            # The writer only runs INSERT ... SELECT from an Arrow table, which optimizing
            # cannot improve; the optimizer's passes cost ~0.5 ms per statement. A setting of
            # this connection only: `connection` and cursors keep it.
            with contextlib.suppress(duckdb.Error):
                writer.execute("PRAGMA disable_optimizer")
        self._con, self._writer = con, writer
        if writer is not None:
            # fetchall, not fetchone: a result left unread keeps its transaction open, and
            # DuckDB then refuses CHECKPOINT ("other write transactions active").
            with contextlib.suppress(duckdb.Error):  # a file of an older schema: no such table
                rows = con.execute("SELECT count(*) > 0 FROM run_feedback").fetchall()
                self.has_feedback = bool(rows and rows[0][0])

    def reopen(self) -> None:
        """Close the file and open it again, as after a restart: the way back from
        :class:`StoreUnavailableError` (DuckDB invalidates a database after a fatal error, such
        as a full disk during a checkpoint, until it is opened again; opening replays its
        write-ahead log, so what was committed is there). Cursors taken before must be closed
        first. Raises :class:`StoreError` when the file cannot be opened yet (the store then
        stays closed: call again later)."""
        if not self._owns_connection:
            raise StoreError("a store over a caller's connection cannot be reopened", self.path)
        with self._lock:
            con, writer = self._con, self._writer
            self._con = self._writer = None
            for old in (writer, con):
                if old is not None:
                    with contextlib.suppress(duckdb.Error):
                        old.close()
            self._open()

    def probe(self) -> None:
        """Commit a tiny write and take it back (two transactions): whether the store can
        commit now. Raises :class:`StoreError` (:class:`StoreUnavailableError` when DuckDB has
        invalidated the database) when it cannot."""
        self._check_writable()
        with self._lock:
            con = self._open_writer()
            try:
                con.execute("INSERT INTO deliveries (key, received_ns) VALUES (?, 0)", [_PROBE_KEY])
                con.execute("DELETE FROM deliveries WHERE key = ?", [_PROBE_KEY])
            except duckdb.Error as exc:
                raise self._failure("a trial commit to", exc) from exc

    def verify(self) -> None:
        """Read every block of every table once (DuckDB checks each block's checksum as it
        reads it): raises :class:`StoreCorruptError` naming the damage when a block is
        truncated, overwritten or has a flipped bit. See docs/serve.md for its cost."""
        cur = self.cursor()
        try:
            verify_tables(cur, self.path)
        finally:
            cur.close()

    def _failure(self, what: str, exc: duckdb.Error) -> StoreError:
        """The store's error for a failed write: unavailable when DuckDB invalidated it."""
        if is_fatal_store_error(exc):
            return StoreUnavailableError(self.path, str(exc))
        return StoreError(
            f"{what} {self.path} failed ({one_line(str(exc))}): check free disk space and "
            "file permissions.",
            self.path,
        )

    @classmethod
    def from_connection(cls, con: duckdb.DuckDBPyConnection) -> Store:
        """A writable store over a DuckDB connection the caller opened (e.g. ``:memory:`` in
        tests); a database without the schema gets it. :meth:`close` leaves ``con`` open."""
        store = cls.__new__(cls)
        store.path = Path(":connection:")
        store.read_only = False
        store.checkpoint_mb = None
        store.memory_mb = None
        store._lock = threading.Lock()
        store._threads = None
        store.has_feedback, store.peaks = False, PendingPeaks()
        check_schema(con, store.path, read_only=False)
        store._con = con
        store._owns_connection = False
        store._writer = con.cursor()
        return store

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The underlying connection. Use it from one thread at a time, or use :meth:`cursor`."""
        if self._con is None:
            raise StoreError(f"store {self.path} is closed: open a new Store.", self.path)
        return self._con

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the same database, for use in another thread."""
        return self.connection.cursor()

    def write(self, batch: SpanBatch, *, replacing: Sequence[str] = ()) -> int:
        """Store one batch in one transaction and return how many spans it held.

        This is the one way into the store: build the batch with
        :meth:`SpanBatch.from_sdk_spans`, :meth:`SpanBatch.from_records` or
        :meth:`SpanBatch.from_columns`. Every span goes to ``spans`` (unkeyed: the same span
        written twice is there twice; live mode recognises a retried request by its delivery
        key instead). Every ``runs`` row replaces the stored row of the same run id that started
        within the batch's start times (the same run span stored again), unless
        ``batch.new_runs`` says there is none. Every delivery key is recorded in
        ``deliveries``. ``replacing``: run ids whose stored runs and spans go in the same
        transaction (an import of runs imported before). When this returns, the batch is
        committed. Raises :class:`StoreError` if the write fails; then nothing of the batch is
        stored.
        """
        self._check_writable()
        if batch.spans is None and batch.runs is None and not batch.deliveries:
            return 0
        deliveries = None
        if batch.deliveries:
            now = time.time_ns()
            deliveries = pa.table(
                {
                    "key": pa.array(batch.deliveries, pa.string()),
                    "received_ns": pa.array([now] * len(batch.deliveries), pa.int64()),
                }
            )
        spans, runs = batch.spans, batch.runs
        replaced = pa.table({"run_id": pa.array(replacing, pa.string())}) if replacing else None
        with self._lock:
            con = self._open_writer()
            try:
                replace = not batch.new_runs
                feedback = self.has_feedback
                extra = [*(self.late.statements(spans, runs) if self.late else ()),
                         *self.peaks.statements(runs)]  # fmt: skip
                try:
                    insert_batch(
                        con, spans, runs, deliveries, replace=replace, replaced=replaced,
                        feedback=feedback, extra=extra,
                    )  # fmt: skip
                except duckdb.ConstraintException:
                    if runs is None:
                        raise
                    insert_batch(
                        con, spans, runs, deliveries, replace=replace, replaced=replaced,
                        upsert=True, feedback=feedback, extra=extra,
                    )  # fmt: skip
            except duckdb.Error as exc:
                raise self._failure(f"writing {batch.count} spans to", exc) from exc
        return batch.count

    def run_write(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        """Run ``work`` on the writer's connection in one transaction, serialized with every
        batch :meth:`write` commits (no two writers of this store ever conflict): committed when
        it returns, rolled back when it raises (its exception passes through)."""
        self._check_writable()
        with self._lock:
            con = self._open_writer()
            con.execute("BEGIN TRANSACTION")
            try:
                result = work(con)
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.rollback()
                raise
            return result

    def write_derived(self, derived: pa.Table, runs: pa.Table | None) -> None:
        """Set derived columns on stored spans and replace the runs of their traces, in one
        transaction (runs reconstructed from other instrumentations' spans, docs/foreign.md).

        ``derived``: one row per stored span (``trace_id``, ``span_id``, ``start_ns``) with the
        typed span columns to set (NULL leaves a column as stored); ``runs``: the traces' runs
        rows, which replace every foreign run stored for those traces. Raises
        :class:`StoreError` on failure.
        """
        self._check_writable()
        if not derived.num_rows:
            return
        with self._lock:
            con = self._open_writer()
            try:
                apply_derived(con, derived, runs)
            except duckdb.Error as exc:
                raise StoreError(
                    f"deriving {derived.num_rows} spans in {self.path} failed "
                    f"({one_line(str(exc))}).",
                    self.path,
                ) from exc

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the file (DuckDB's ``CHECKPOINT``), freeing the memory
        that holds the writes since the last one. Raises :class:`StoreError` if it fails."""
        self._check_writable()
        with self._lock:
            try:
                self._open_writer().execute("CHECKPOINT")
            except duckdb.Error as exc:
                raise self._failure("checkpointing", exc) from exc

    def deliveries_since(self, since_ns: int) -> list[str]:
        """The delivery keys recorded at or after ``since_ns`` (Unix nanoseconds)."""
        cur = self.cursor()
        try:
            rows = cur.execute(
                "SELECT key FROM deliveries WHERE received_ns >= ?", [since_ns]
            ).fetchall()
        finally:
            cur.close()
        return [row[0] for row in rows]

    def forget_deliveries(self, before_ns: int) -> None:
        """Delete the delivery keys recorded before ``before_ns`` (a retry older than that is
        no longer recognised)."""
        self._check_writable()
        with self._lock:
            try:
                self._open_writer().execute(
                    "DELETE FROM deliveries WHERE received_ns < ?", [before_ns]
                )
            except duckdb.Error as exc:
                raise self._failure("forgetting old delivery keys in", exc) from exc

    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreError(
                f"store {self.path} is open read-only: open it with Store(path) to write.",
                self.path,
            )

    def warm_up(self) -> None:
        """Run the write path once on sample spans and roll it back: nothing is stored.

        The first write in a process pays one-time costs (pyarrow imports pandas on its first
        conversion, DuckDB prepares its Arrow scan) that take ~0.3-0.6 s, against ~35 ms for a
        later batch. Paying them when the store is opened keeps them out of the first batch a
        running agent sends (where they would let a fast producer fill the queue). Raises
        :class:`StoreError` when the write itself fails (then later writes would fail too).
        """
        if self.read_only:
            return
        batch = SpanBatch.from_records(_WARM_UP_RECORDS)
        with self._lock:
            con = self._open_writer()
            try:
                insert_batch(con, batch.spans, batch.runs, None, replace=True, end="ROLLBACK")
            except duckdb.Error as exc:
                raise StoreError(
                    f"a trial write to {self.path} failed ({one_line(str(exc))}): check free "
                    "disk space and file permissions.",
                    self.path,
                ) from exc

    def _open_writer(self) -> duckdb.DuckDBPyConnection:
        con = self._writer
        if con is None:
            raise StoreError(f"store {self.path} is closed: open a new Store.", self.path)
        return con

    def close(self) -> None:
        """Checkpoint and close the file (idempotent). Other processes may open it afterwards."""
        with self._lock:
            con, self._con = self._con, None
            writer, self._writer = self._writer, None
            if writer is not None and (fill := self.peaks.fill()):
                with contextlib.suppress(duckdb.Error):  # left to the readers' span pass
                    writer.execute(fill)
        if writer is not None:
            writer.close()
        if con is not None and self._owns_connection:
            con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        state = "closed" if self._con is None else mode
        return f"Store({str(self.path)!r}, {state})"
