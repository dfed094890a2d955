"""Archive: sealed days written as hive-partitioned Parquet, one file per node per day and table.

Layout (docs/store.md, *Archive*), under a directory or an S3-compatible bucket::

    <root>/runs/date=2026-01-30/node=<node>/part-0.parquet
    <root>/spans/date=2026-01-30/node=<node>/part-0.parquet

``date`` is the UTC day the rows started (``runs.started_at``, ``spans.start_ns``); ``node``
the ``serve`` that wrote them (``--node``, default the host name), so two nodes never write the
same file. The files hold the store's columns as they are (``date`` and ``node`` come from the
path), so DuckDB (``read_parquet(..., hive_partitioning = true)``), Trino, Spark, ClickHouse,
Athena and pyarrow datasets read them directly. A day is sealed ``lag_s`` after it ended; each
(day, table) is written once per node, recorded in the store's ``archive_log``; a file is
written whole (directory: a temporary name moved into place; S3: one upload completed at
close) or not at all. Rows of a day that arrive after it was written (marked by their write,
:mod:`.late`) go to one more file of that day and node, ``part-1.parquet``, ``part-2.parquet``
...: each file holds rows no earlier file of its node holds, except a run stored again (a
re-sent run), which replaces the row of the same ``run_id`` in the earlier parts.

Reading the whole fleet: :func:`sync` loads every file not loaded before into a reader store
(a plain loopwatch store file), which ``loopwatch dashboard`` and ``loopwatch report`` then read
with the same named SQL as any store; a later part's runs replace the same run ids. pyarrow's
file systems, so S3 needs no new dependency.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import duckdb
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from loopwatch.instrumentation.runtime.settings import env_str

from .late import ensure_late_tables

__all__ = [
    "ARCHIVED_TABLES",
    "ArchiveTarget",
    "Archiver",
    "default_node",
    "file_part",
    "load_new_files",
    "reader_store",
    "sync",
]

ARCHIVED_TABLES: Final = ("runs", "spans")
_DAY_OF: Final = {
    "runs": "started_at",
    "spans": "make_timestamp(start_ns // 1000)",
}
_LOG_DDL: Final = """
CREATE TABLE IF NOT EXISTS archive_log (
    url VARCHAR NOT NULL, day DATE NOT NULL, tbl VARCHAR NOT NULL, node VARCHAR NOT NULL,
    rows BIGINT NOT NULL, written_at TIMESTAMP NOT NULL DEFAULT current_timestamp
)"""
_LOADED_DDL: Final = """
CREATE TABLE IF NOT EXISTS archive_loaded (
    path VARCHAR PRIMARY KEY, tbl VARCHAR NOT NULL, rows BIGINT NOT NULL
)"""
_BATCH_ROWS: Final = 64 * 1024
_LATE_FILES_PER_PASS: Final = 8
_PART: Final = re.compile(r"/date=([0-9-]+)/node=([^/]+)/part-(\d+)\.parquet$")
_KEYS: Final = {  # how a marked row (archive_late) finds its row
    "runs": "t.run_id = m.run_id",
    "spans": "t.trace_id = m.trace_id AND t.span_id = m.span_id",
}


def file_part(path: str) -> tuple[str, str, int] | None:
    """(date, node, part) of an archive file's path; ``None`` for another file."""
    match = _PART.search(path)
    return None if match is None else (match[1], match[2], int(match[3]))


def default_node() -> str:
    """The host name, made safe for a path segment."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())


@dataclass(frozen=True, slots=True)
class ArchiveTarget:
    """Where the archive lives: a directory, or ``s3://bucket/prefix`` (pyarrow's S3 options
    in the query string, e.g. ``?endpoint_override=http://127.0.0.1:9000&scheme=http``;
    credentials from the usual ``AWS_*`` variables)."""

    url: str
    fs: Any
    root: str

    @classmethod
    def parse(cls, url: str) -> ArchiveTarget:
        """The target for ``url`` (a path or a URL pyarrow knows: ``s3://``, ``file://``)."""
        if "://" not in url:
            root = Path(url).resolve()
            root.mkdir(parents=True, exist_ok=True)
            return cls(url, pafs.LocalFileSystem(), root.as_posix())
        if urlsplit(url).scheme not in ("s3", "file"):
            raise ValueError(f"archive URL must be a directory, s3:// or file://, got {url!r}")
        fs, root = pafs.FileSystem.from_uri(url)
        return cls(url, fs, root.rstrip("/"))

    @property
    def local(self) -> bool:
        """Whether the archive is on this machine's file system."""
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, table: str, day: date, node: str, part: int = 0) -> str:
        """The ``part``-th file of one table, day and node (0: the day's first write)."""
        return f"{self.root}/{table}/date={day.isoformat()}/node={node}/part-{part}.parquet"

    def files(self, table: str) -> list[Any]:
        """Every Parquet file of ``table`` (``pyarrow.fs.FileInfo``), by path."""
        selector = pafs.FileSelector(f"{self.root}/{table}", recursive=True, allow_not_found=True)
        found = [
            f
            for f in self.fs.get_file_info(selector)
            if f.type == pafs.FileType.File and f.path.endswith(".parquet")
        ]
        return sorted(found, key=lambda f: _file_order(str(f.path)))


def _file_order(path: str) -> tuple[str, int]:
    """Paths by day and node, a node's parts in their order (``part-10`` after ``part-9``)."""
    found = file_part(path)
    return (path, 0) if found is None else (path[: path.rindex("/part-")], found[2])


class Archiver:
    """Writes each sealed day of ``runs`` and ``spans`` once to ``target``."""

    def __init__(self, target: ArchiveTarget, node: str, *, lag_s: float = 3600.0) -> None:
        if not node or "/" in node or node.startswith("."):
            raise ValueError(f"node must be a plain name, got {node!r}")
        self.target = target
        self.node = node
        self.lag_s = lag_s
        self.files_written = 0

    def pending_days(self, con: duckdb.DuckDBPyConnection, now: datetime) -> list[date]:
        """Sealed days with rows in the store and no archive file yet, oldest first."""
        con.execute(_LOG_DDL)
        sealed = (now - timedelta(seconds=self.lag_s)).date()
        days: set[date] = set()
        for table, column in _DAY_OF.items():
            # Only days after the last one archived: a day is written once, when sealed.
            row = con.execute(
                "SELECT max(day) FROM archive_log WHERE url = ? AND tbl = ?",
                [self.target.url, table],
            ).fetchone()
            after = row[0] if row and row[0] is not None else date(1, 1, 1)
            lo = datetime.combine(after + timedelta(days=1), datetime.min.time())
            hi = datetime.combine(sealed, datetime.min.time())
            if hi <= lo:
                continue
            time_column, bounds = _bounds(table, lo, hi)
            rows = con.execute(
                f"SELECT DISTINCT ({column})::DATE AS d FROM {table}"
                f" WHERE {time_column} >= ? AND {time_column} < ?",
                bounds,
            ).fetchall()
            days.update(r[0] for r in rows)
        return sorted(days)

    def archived_until(self, con: duckdb.DuckDBPyConnection, now: datetime) -> datetime:
        """Everything before this instant is archived (retention may delete it): the first
        pending day, or the first day with late rows not archived yet."""
        pending = self.pending_days(con, now)
        until = datetime.combine((now - timedelta(seconds=self.lag_s)).date(), datetime.min.time())
        if pending:
            until = datetime.combine(pending[0], datetime.min.time())
        late = self._late_files(con)
        if late:
            until = min(until, datetime.combine(late[0][1], datetime.min.time()))
        return until

    def late_instants(self, con: duckdb.DuckDBPyConnection, days: list[date]) -> dict[str, int]:
        """Per table, the instant (Unix ns) before which a row written from now on is late:
        the end of the last day archived or about to be (``days``)."""
        con.execute(_LOG_DDL)
        found: dict[str, int] = {}
        for table in ARCHIVED_TABLES:
            [(archived,)] = con.execute(
                "SELECT max(day) FROM archive_log WHERE url = ? AND tbl = ?",
                [self.target.url, table],
            ).fetchall()
            last = max([d for d in (archived, *days) if d is not None], default=None)
            if last is not None:
                found[table] = (last + timedelta(days=1) - date(1970, 1, 1)).days * 86400 * 10**9
        return found

    def seal(
        self,
        con: duckdb.DuckDBPyConnection,
        now: datetime,
        max_days: int = 1,
        *,
        mark_late: Callable[[dict[str, int]], None] | None = None,
    ) -> int:
        """Write up to ``max_days`` pending days (every table), then the late rows of up to
        eight (day, table) pairs as one more part each; the files written. ``mark_late`` is
        given :meth:`late_instants` before any file is read (the store then marks later rows)."""
        con.execute(_LOG_DDL)
        ensure_late_tables(con)
        days = self.pending_days(con, now)[:max_days]
        if mark_late is not None:
            mark_late(self.late_instants(con, days))
        written = 0
        for day in days:
            for table in ARCHIVED_TABLES:
                written += self._commit(con, table, day, marked=False)
        for table, day in self._late_files(con)[:_LATE_FILES_PER_PASS]:
            written += self._commit(con, table, day, marked=True)
        self.files_written += written
        return written

    def _late_files(self, con: duckdb.DuckDBPyConnection) -> list[tuple[str, date]]:
        """(table, day) pairs with late rows waiting, oldest day first."""
        ensure_late_tables(con)
        rows = con.execute("SELECT DISTINCT tbl, day FROM archive_late ORDER BY day, tbl")
        return [(str(t), d) for t, d in rows.fetchall()]

    def _commit(self, con: duckdb.DuckDBPyConnection, table: str, day: date, marked: bool) -> int:
        """One file (the day's rows, or only its marked rows) and its log row, and the day's
        marks seen by this transaction gone, in one transaction; the files written (0 or 1)."""
        con.begin()
        try:
            [(part,)] = con.execute(
                "SELECT count(*) FROM archive_log WHERE url = ? AND day = ? AND tbl = ? "
                "AND node = ?",
                [self.target.url, day, table, self.node],
            ).fetchall()
            rows = self._write(con, table, day, int(part), marked)
            if rows is not None:
                con.execute(
                    "INSERT INTO archive_log (url, day, tbl, node, rows) VALUES (?, ?, ?, ?, ?)",
                    [self.target.url, day, table, self.node, rows],
                )
            con.execute("DELETE FROM archive_late WHERE tbl = ? AND day = ?", [table, day])
            con.commit()
        except BaseException:
            con.rollback()
            raise
        return 0 if rows is None else 1

    def _write(
        self, con: duckdb.DuckDBPyConnection, table: str, day: date, part: int, marked: bool
    ) -> int | None:
        """One day of one table (``marked``: only its rows in ``archive_late``) to its file,
        streamed in record batches; the rows written (``None``: no marked row left)."""
        start = datetime.combine(day, datetime.min.time())
        time_column, bounds = _bounds(table, start, start + timedelta(days=1))
        query = f"SELECT t.* FROM {table} t WHERE {time_column} >= ? AND {time_column} < ?"
        if marked:
            query = (
                f"SELECT t.* FROM {table} t SEMI JOIN (SELECT * FROM archive_late WHERE tbl = ? "
                f"AND day = ?) m ON {_KEYS[table]} WHERE {time_column} >= ? AND {time_column} < ?"
            )
            bounds = [table, day, *bounds]
            [(marked_rows,)] = con.execute(f"SELECT count(*) FROM ({query})", bounds).fetchall()
            if not marked_rows:
                return None
        reader: Any = con.sql(query, params=bounds).to_arrow_reader(_BATCH_ROWS)
        path = self.target.path(table, day, self.node, part)
        self.target.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = f"{path}.tmp-{os.getpid()}" if self.target.local else path
        rows = 0
        with (
            self.target.fs.open_output_stream(tmp) as sink,
            pq.ParquetWriter(sink, reader.schema, compression="zstd") as writer,
        ):
            for batch in reader:
                writer.write_batch(batch)
                rows += batch.num_rows
        if tmp != path:
            self.target.fs.move(tmp, path)
        return rows


def _bounds(table: str, lo: datetime, hi: datetime) -> tuple[str, list[Any]]:
    """The column to bound ``[lo, hi)`` on, in its own type, so that DuckDB skips row groups by
    their min/max (``spans`` by ``start_ns``, ``runs`` by ``started_at``)."""
    if table == "spans":
        epoch = datetime(1970, 1, 1)
        ns = [int((t - epoch) / timedelta(microseconds=1)) * 1000 for t in (lo, hi)]
        return "start_ns", list(ns)
    return "started_at", [lo, hi]


def sync(target: ArchiveTarget, into: Path) -> dict[str, int]:
    """Load every archive file not loaded before into the reader store ``into`` (created if
    missing); rows loaded per table. Each file is loaded once, in one transaction with its
    record in ``archive_loaded``, so no run is counted twice."""
    from .database import Store

    with Store(into) as store:
        return load_new_files(store.connection, target)


def load_new_files(
    con: duckdb.DuckDBPyConnection,
    target: ArchiveTarget,
    *,
    skip_node: str | None = None,
    since: dict[str, date] | None = None,
) -> dict[str, int]:
    """Load the archive files not loaded before into the store of ``con`` (its ``runs``,
    ``spans`` and ``archive_loaded``); rows loaded per table. ``skip_node``: that node's files
    are left out (serve's own rows, which its store holds); ``since``: per table, files of
    earlier days are left out (older than the reader keeps)."""
    loaded = {table: 0 for table in ARCHIVED_TABLES}
    con.execute(_LOADED_DDL)
    known = {r[0] for r in con.execute("SELECT path FROM archive_loaded").fetchall()}
    with tempfile.TemporaryDirectory(prefix="loopwatch-archive-") as tmp:
        for table in ARCHIVED_TABLES:
            for info in target.files(table):
                found = file_part(info.path)
                if info.path in known or found is None:
                    continue
                day, node, part = found
                oldest = (since or {}).get(table)
                if node == skip_node or (oldest is not None and date.fromisoformat(day) < oldest):
                    continue
                local = info.path if target.local else _download(target, info.path, tmp)
                loaded[table] += _load(con, table, info.path, local, replace=part > 0)
    return loaded


def reader_store(url: str, cache_dir: Path | None = None) -> Path:
    """The reader store of the archive at ``url``, brought up to date (:func:`sync`): a file
    under ``cache_dir`` (argument -> ``LOOPWATCH_CACHE_DIR`` -> ``~/.cache/loopwatch``) named
    after the URL, so later reads load only the files archived since."""
    import hashlib

    base = cache_dir or Path(env_str("LOOPWATCH_CACHE_DIR") or Path.home() / ".cache" / "loopwatch")
    base.mkdir(parents=True, exist_ok=True)
    digest = hashlib.blake2b(url.encode(), digest_size=6).hexdigest()
    path = base / f"archive-{digest}.duckdb"
    sync(ArchiveTarget.parse(url), path)
    return path


def _download(target: ArchiveTarget, path: str, tmp: str) -> str:
    local = os.path.join(tmp, "part.parquet")
    pafs.copy_files(path, local, source_filesystem=target.fs)
    return local


def _load(
    con: duckdb.DuckDBPyConnection, table: str, path: str, local: str, *, replace: bool
) -> int:
    """One file into ``table`` and ``archive_loaded``, in one transaction; ``replace``: a later
    part, whose runs replace the rows of the same run ids."""
    con.begin()
    try:
        if replace and table == "runs":
            con.execute(
                "DELETE FROM runs WHERE run_id IN (SELECT run_id FROM read_parquet(?))", [local]
            )
        row = con.execute(
            f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?, hive_partitioning = false)",
            [local],
        ).fetchone()
        rows = int(row[0]) if row else 0
        con.execute("INSERT INTO archive_loaded VALUES (?, ?, ?)", [path, table, rows])
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return rows
