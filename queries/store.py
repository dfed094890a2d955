"""The DuckDB store (DESIGN §6): one file holding ``spans``, ``runs`` and ``schema_version``.

Spans arrive in batches, from the SDK (finished ``ReadableSpan`` objects, through
:class:`~loopwatch.queries.exporter.DuckDBSpanExporter`) or already decoded (the ``serve``
process turns OTLP into the same :class:`SpanRecord` shape). Both paths meet in
:meth:`Store.write_records`, which turns the batch into Arrow tables and inserts each in one
statement inside one transaction: a batch is stored whole or not at all, and once the call
returns it is committed.

DuckDB lets one process write a file and, meanwhile, no other process open it. Opening a file
another process holds raises :class:`StoreLockedError`, naming that process.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import duckdb
import pyarrow as pa
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.reasons import StopReason

from .columns import (
    UNKNOWN,
    EventRecord,
    SpanRecord,
    _build,
    _build_spans,
    _runs_table,
    record_from_span,
    records_from_spans,
    runs_table,
    spans_table,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "STORE_TABLES",
    "UNKNOWN",
    "EventRecord",
    "SchemaVersionError",
    "SpanRecord",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "connect_read_only",
    "is_damaged_store_error",
    "record_from_span",
    "records_from_spans",
    "resolve_db_path",
    "runs_table",
    "spans_table",
]

SCHEMA_VERSION: Final = 1
"""The only schema version this code reads and writes."""
STORE_TABLES: Final = frozenset({"schema_version", "spans", "runs"})
"""The tables every store of :data:`SCHEMA_VERSION` has."""
DEFAULT_DB: Final = "loopwatch.duckdb"
"""The store file used when neither an argument nor ``LOOPWATCH_DB`` names one."""
DB_ENV: Final = "LOOPWATCH_DB"
"""Environment variable naming the store file."""


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The store path: the argument, else ``$LOOPWATCH_DB``, else ``./loopwatch.duckdb``."""
    if path is None:
        path = os.environ.get(DB_ENV) or DEFAULT_DB
    return Path(path)


# --- errors ----------------------------------------------------------------------------


class StoreError(Exception):
    """The store could not be opened, read or written. The message says what to do."""

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


class StoreLockedError(StoreError):
    """Another process has the file open (DuckDB allows one writer and no one else meanwhile)."""

    def __init__(
        self, path: str | os.PathLike[str], pid: int | None = None, program: str | None = None
    ) -> None:
        if pid is not None:
            holder = f"another process ({program}, PID {pid})" if program else f"PID {pid}"
        else:
            holder = "another process"
        super().__init__(
            f"{path} is locked by {holder}: DuckDB lets one process write a store and no other "
            "process open it meanwhile. Send spans to that process instead (live mode: "
            "`loopwatch serve`), or open the file read-only after it finishes.",
            path,
        )
        self.pid = pid
        """The holder's process id, when DuckDB named it."""
        self.program = program
        """The holder's executable, when DuckDB named it."""


class StoreCorruptError(StoreError):
    """The file exists but is not a readable DuckDB database."""

    def __init__(self, path: str | os.PathLike[str], detail: str) -> None:
        super().__init__(
            f"{path} is not a readable DuckDB store ({_one_line(detail)}): move it aside and "
            "let loopwatch create a new store there, or point --db/LOOPWATCH_DB at another file.",
            path,
        )


class SchemaVersionError(StoreError):
    """The file is a DuckDB database, but not one with the schema this loopwatch reads."""

    def __init__(
        self, path: str | os.PathLike[str], found: int | None, problem: str | None = None
    ) -> None:
        if problem is not None:
            message = (
                f"{path} is not a usable loopwatch store ({problem}): it was damaged or written "
                "by another program; move it aside and let loopwatch create a new store there, "
                "or point --db/LOOPWATCH_DB at another file."
            )
        elif found is None:
            message = (
                f"{path} is a DuckDB file but not a loopwatch store (it has no schema_version "
                "table): point --db/LOOPWATCH_DB at a loopwatch store or at a new file."
            )
        elif found > SCHEMA_VERSION:
            message = (
                f"{path} has store schema version {found}, newer than the {SCHEMA_VERSION} this "
                "loopwatch reads: upgrade loopwatch, or point --db/LOOPWATCH_DB at another file."
            )
        else:
            message = (
                f"{path} has unknown store schema version {found} (this loopwatch reads "
                f"{SCHEMA_VERSION}): open it with the loopwatch that wrote it, or point "
                "--db/LOOPWATCH_DB at another file."
            )
        super().__init__(message, path)
        self.found = found
        """The version in the file; ``None`` when it has none that can be read."""


class StoreNotFoundError(StoreError):
    """A read-only open of a file that does not exist."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(
            f"{path} does not exist: check --db/LOOPWATCH_DB, or create the store first by "
            "running agents with instrument(store=...) or `loopwatch serve`.",
            path,
        )


def _one_line(text: str) -> str:
    return " ".join(text.split())


_LOCK_RE: Final = re.compile(r"held in (?P<program>.+?) \(PID (?P<pid>\d+)\)")
_CORRUPT_MARKS: Final = (
    "not a valid duckdb database file",
    "corrupt",
    "checksum",
    "too small",
    "failed to read database header",
    "invalid database header",
    "could not read enough bytes",  # a truncated file
)


def is_damaged_store_error(exc: BaseException) -> bool:
    """Whether DuckDB's error says the file itself is damaged (truncated, bad checksum), as
    opposed to a bad query or a lock. Such a file fails when opened or, if the damage is past
    the header, on the first query that reads the damaged blocks."""
    lower = str(exc).lower()
    return isinstance(exc, duckdb.Error) and any(m in lower for m in _CORRUPT_MARKS)


def _open_error(exc: duckdb.Error, path: Path, read_only: bool) -> StoreError:
    """Translate DuckDB's error on opening ``path`` into the store's own family."""
    text = str(exc)
    lower = text.lower()
    if "could not set lock" in lower or "conflicting lock" in lower:
        match = _LOCK_RE.search(text)
        if match:
            return StoreLockedError(path, int(match["pid"]), match["program"])
        return StoreLockedError(path)
    if read_only and "does not exist" in lower:
        return StoreNotFoundError(path)
    if is_damaged_store_error(exc):
        return StoreCorruptError(path, text)
    if "different configuration" in lower:
        return StoreError(
            f"{path} is already open in this process in another mode: use that Store's "
            "connection (Store.cursor()), or close it first.",
            path,
        )
    mode = "read-only" if read_only else "for writing"
    return StoreError(
        f"cannot open {path} {mode} ({_one_line(text)}): check that the directory exists and "
        "is writable, or choose another path with --db/LOOPWATCH_DB.",
        path,
    )


# BY NAME rather than two column lists: DuckDB binds it ~0.2 ms faster per statement. The
# Arrow tables hold exactly SPAN_COLUMNS / RUN_COLUMNS.
_INSERT_SPANS: Final = "INSERT INTO spans BY NAME SELECT * FROM _lw_spans_batch"
# A run seen again keeps its latest row. Plain INSERT first: an upsert costs twice as much,
# and a run id repeats only on a retried export or a re-import.
_INSERT_RUNS: Final = (
    "INSERT INTO runs BY NAME "
    "SELECT *, make_timestamp(start_ns // 1000) AS started_at FROM _lw_runs_batch"
)
_UPSERT_RUNS: Final = _INSERT_RUNS.replace("INSERT INTO", "INSERT OR REPLACE INTO", 1)


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


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One batch converted to Arrow, ready to insert."""

    spans: pa.Table
    """The ``spans`` rows."""
    runs: pa.Table | None
    """The ``runs`` rows, ``None`` when the batch holds no run span."""
    count: int
    """How many spans the batch holds."""


def _prepare_spans(spans: Iterable[ReadableSpan]) -> _Prepared | None:
    """The Arrow tables of one batch of finished SDK spans; ``None`` if none can be stored."""
    batch = spans if isinstance(spans, Sequence) else list(spans)
    table, run_spans, count = _build_spans(batch)
    return _Prepared(table, _runs_table(run_spans, "otel"), count) if count else None


def _warm_up_conversion() -> None:
    """Pay the conversion's one-time costs (pyarrow imports pandas on first use) now."""
    Store._prepare(_WARM_UP_RECORDS, "otel")


# --- the store -------------------------------------------------------------------------


def _schema_sql() -> str:
    return resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


def _check_schema(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
    """Create the schema in a new file; refuse a file with another schema."""
    try:
        tables = {
            row[0]
            for row in con.execute(
                "SELECT table_name FROM duckdb_tables() "
                "WHERE database_name = current_database() AND schema_name = 'main'"
            ).fetchall()
        }
        if "schema_version" in tables:
            row = con.execute(
                "SELECT count(*), count(TRY_CAST(version AS BIGINT)), "
                "max(TRY_CAST(version AS BIGINT)), min(version::VARCHAR) FROM schema_version"
            ).fetchone()
            rows, numeric, found, sample = row if row is not None else (0, 0, None, None)
            if not rows:
                raise SchemaVersionError(path, None, "its schema_version table is empty")
            if numeric < rows:
                raise SchemaVersionError(
                    path, None, f"its schema_version holds {str(sample)[:40]!r}, not a number"
                )
            if found != SCHEMA_VERSION:
                raise SchemaVersionError(path, int(found))
            missing = sorted(STORE_TABLES - tables)
            if missing:
                raise SchemaVersionError(
                    path, found, f"schema version {found} but no {', '.join(missing)} table"
                )
            return
        if tables or read_only:
            raise SchemaVersionError(path, None)
        con.begin()
        con.execute(_schema_sql())
        con.execute("INSERT INTO schema_version (version) VALUES (?)", [SCHEMA_VERSION])
        con.commit()
    except duckdb.Error as exc:
        raise _open_error(exc, path, read_only) from exc


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    if read_only and not path.exists():
        raise StoreNotFoundError(path)
    if not read_only and path.is_file() and path.stat().st_size == 0:
        # An empty file (e.g. made by mktemp) holds nothing to lose: start a store in it.
        path.unlink()
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise _open_error(exc, path, read_only) from exc
    try:
        _check_schema(con, path, read_only)
    except BaseException:
        con.close()
        raise
    return con


def connect_read_only(path: str | os.PathLike[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to a loopwatch store, its schema version checked.

    ``path`` defaults as in :func:`resolve_db_path`. The caller closes the connection. Raises
    :class:`StoreNotFoundError`, :class:`StoreLockedError` (a writer holds the file),
    :class:`StoreCorruptError` or :class:`SchemaVersionError`.
    """
    return _connect(resolve_db_path(path), read_only=True)


class Store:
    """A loopwatch DuckDB store, open for writing (the default) or read-only.

    A new file gets the schema and its ``schema_version``; an existing one must have version
    :data:`SCHEMA_VERSION`. ``threads`` caps DuckDB's threads for this database (``None``:
    DuckDB's default, one per core); ``checkpoint_mb`` is how much write-ahead log DuckDB lets
    grow before it folds it into the file (``None``: DuckDB's 16 MB; more is faster to ingest,
    and costs that much memory, WAL on disk and replay time after a crash). Writes are
    serialised by a lock, so one ``Store`` may be shared by threads; readers in the same
    process use :meth:`cursor`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        read_only: bool = False,
        threads: int | None = None,
        checkpoint_mb: int | None = None,
    ) -> None:
        self.path: Path = resolve_db_path(path)
        """The store file."""
        self.read_only: bool = read_only
        """Whether this store was opened read-only."""
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = _connect(self.path, read_only)
        settings: list[tuple[str, str, object]] = []
        if threads is not None:
            # A batch of a few thousand rows gains nothing from more threads, and a writer
            # inside an agent process should not compete with the agent for cores.
            settings.append(("threads", "SET threads = ?", threads))
        if checkpoint_mb is not None:
            settings.append(
                ("checkpoint_mb", "SET checkpoint_threshold = ?", f"{int(checkpoint_mb)}MB")
            )
        for name, sql, value in settings:
            try:
                self._con.execute(sql, [value])
            except (duckdb.Error, ValueError) as exc:
                self._con.close()
                raise StoreError(
                    f"cannot set {name}={value!r} on {self.path} ({_one_line(str(exc))}): "
                    "pass a positive integer or None.",
                    self.path,
                ) from exc
        # Writes go through their own connection, so a result left unread on `connection`
        # (or a transaction left open there) never blocks them.
        self._writer: duckdb.DuckDBPyConnection | None = None if read_only else self._con.cursor()
        if self._writer is not None:
            # The writer only runs INSERT ... SELECT from an Arrow table, which optimizing
            # cannot improve; the optimizer's passes cost ~0.5 ms per statement. A setting of
            # this connection only: `connection` and cursors keep it.
            with contextlib.suppress(duckdb.Error):
                self._writer.execute("PRAGMA disable_optimizer")

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The underlying connection. Use it from one thread at a time, or use :meth:`cursor`."""
        if self._con is None:
            raise StoreError(f"store {self.path} is closed: open a new Store.", self.path)
        return self._con

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the same database, for use in another thread."""
        return self.connection.cursor()

    def write_spans(self, spans: Iterable[ReadableSpan]) -> int:
        """Store finished SDK spans (those without a span context are skipped) and return how
        many were stored; otherwise as :meth:`write_records`."""
        self._check_writable()
        batch = _prepare_spans(spans)
        return 0 if batch is None else self._commit(batch)

    def write_dicts(self, spans: Iterable[Mapping[str, Any]], *, source: str = "otel") -> int:
        """Store already-decoded span dicts (see :meth:`SpanRecord.from_dict`)."""
        return self.write_records([SpanRecord.from_dict(d) for d in spans], source=source)

    def write_records(self, records: Sequence[SpanRecord], *, source: str = "otel") -> int:
        """Store one batch in one transaction and return how many spans it held.

        Every span goes to ``spans`` (unkeyed: a span written twice is there twice); every
        run span also upserts its row in ``runs``, with ``source`` in its ``source`` column.
        When this returns, the batch is committed. Records whose ids, name, kind, status or
        times are missing or ill-typed cannot be stored: they raise :class:`ValueError`
        before anything is written. Raises :class:`StoreError` if the write fails; then
        nothing of the batch is stored.
        """
        self._check_writable()
        if not records:
            return 0
        return self._commit(self._prepare(records, source))

    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreError(
                f"store {self.path} is open read-only: open it with Store(path) to write.",
                self.path,
            )

    @staticmethod
    def _prepare(records: Sequence[SpanRecord], source: str) -> _Prepared:
        """The Arrow tables of one batch of records."""
        spans, run_spans = _build(records)
        return _Prepared(spans, _runs_table(run_spans, source), len(records))

    def _commit(self, batch: _Prepared) -> int:
        """Insert one prepared batch in one transaction."""
        spans, runs = batch.spans, batch.runs
        with self._lock:
            con = self._open_writer()
            try:
                try:
                    self._insert(con, spans, runs, _INSERT_RUNS)
                except duckdb.ConstraintException:
                    if runs is None:
                        raise
                    self._insert(con, spans, runs, _UPSERT_RUNS)
            except duckdb.Error as exc:
                raise StoreError(
                    f"writing {batch.count} spans to {self.path} failed "
                    f"({_one_line(str(exc))}): check free disk space and file permissions.",
                    self.path,
                ) from exc
        return batch.count

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
        spans, run_spans = _build(_WARM_UP_RECORDS)
        runs = _runs_table(run_spans, "otel")
        with self._lock:
            con = self._open_writer()
            try:
                self._insert(con, spans, runs, _UPSERT_RUNS, end="ROLLBACK")
            except duckdb.Error as exc:
                raise StoreError(
                    f"a trial write to {self.path} failed ({_one_line(str(exc))}): check free "
                    "disk space and file permissions.",
                    self.path,
                ) from exc

    def _open_writer(self) -> duckdb.DuckDBPyConnection:
        con = self._writer
        if con is None:
            raise StoreError(f"store {self.path} is closed: open a new Store.", self.path)
        return con

    @staticmethod
    def _insert(
        con: duckdb.DuckDBPyConnection,
        spans: pa.Table,
        runs: pa.Table | None,
        runs_sql: str,
        *,
        end: str = "COMMIT",
    ) -> None:
        """Insert one batch in one transaction ended by ``end`` (rolled back on any error)."""
        # DuckDB finds these tables by name among the caller's local variables (its
        # replacement scan): ~1 ms less per table than con.register/unregister, which change
        # the catalog each time.
        _lw_spans_batch = spans
        _lw_runs_batch = runs
        # One call for the whole transaction: each call into DuckDB has a fixed cost, and
        # gives the GIL up and takes it back (up to 5 ms when the agent's thread is busy).
        sql = f"{runs_sql}; {end}" if runs is not None else end
        try:
            con.execute(f"BEGIN TRANSACTION; {_INSERT_SPANS}; {sql}")
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # DuckDB may have ended it already
                con.rollback()
            raise

    def close(self) -> None:
        """Checkpoint and close the file (idempotent). Other processes may open it afterwards."""
        with self._lock:
            con, self._con = self._con, None
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if con is not None:
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
