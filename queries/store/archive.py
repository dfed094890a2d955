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
close) or not at all.

Reading the whole fleet: :func:`sync` loads every file not loaded before into a reader store
(a plain loopwatch store file), which ``loopwatch dashboard`` and ``loopwatch report`` then read
with the same named SQL as any store. pyarrow's file systems, so S3 needs no new dependency.
"""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import duckdb
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from loopwatch.instrumentation.runtime.settings import env_str

__all__ = [
    "ARCHIVED_TABLES",
    "ArchiveTarget",
    "Archiver",
    "default_node",
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

    def path(self, table: str, day: date, node: str) -> str:
        """The file of one table, day and node."""
        return f"{self.root}/{table}/date={day.isoformat()}/node={node}/part-0.parquet"

    def files(self, table: str) -> list[Any]:
        """Every Parquet file of ``table`` (``pyarrow.fs.FileInfo``), by path."""
        selector = pafs.FileSelector(f"{self.root}/{table}", recursive=True, allow_not_found=True)
        found = [
            f
            for f in self.fs.get_file_info(selector)
            if f.type == pafs.FileType.File and f.path.endswith(".parquet")
        ]
        return sorted(found, key=lambda f: str(f.path))


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
        """Everything before this instant is archived (retention may delete it)."""
        pending = self.pending_days(con, now)
        if pending:
            return datetime.combine(pending[0], datetime.min.time())
        return datetime.combine((now - timedelta(seconds=self.lag_s)).date(), datetime.min.time())

    def seal(self, con: duckdb.DuckDBPyConnection, now: datetime, max_days: int = 1) -> int:
        """Write up to ``max_days`` pending days (every table); the files written."""
        written = 0
        for day in self.pending_days(con, now)[:max_days]:
            for table in ARCHIVED_TABLES:
                rows = self._write(con, table, day)
                con.execute(
                    "INSERT INTO archive_log (url, day, tbl, node, rows) VALUES (?, ?, ?, ?, ?)",
                    [self.target.url, day, table, self.node, rows],
                )
                written += 1
        self.files_written += written
        return written

    def _write(self, con: duckdb.DuckDBPyConnection, table: str, day: date) -> int:
        """One day of one table to its file, streamed in record batches; the rows written."""
        start = datetime.combine(day, datetime.min.time())
        time_column, bounds = _bounds(table, start, start + timedelta(days=1))
        reader: Any = con.sql(
            f"SELECT * FROM {table} WHERE {time_column} >= ? AND {time_column} < ?",
            params=bounds,
        ).to_arrow_reader(_BATCH_ROWS)
        path = self.target.path(table, day, self.node)
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

    loaded = {table: 0 for table in ARCHIVED_TABLES}
    with Store(into) as store:
        con = store.connection
        con.execute(_LOADED_DDL)
        known = {r[0] for r in con.execute("SELECT path FROM archive_loaded").fetchall()}
        with tempfile.TemporaryDirectory(prefix="loopwatch-archive-") as tmp:
            for table in ARCHIVED_TABLES:
                for info in target.files(table):
                    if info.path in known:
                        continue
                    local = info.path if target.local else _download(target, info.path, tmp)
                    loaded[table] += _load(con, table, info.path, local)
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


def _load(con: duckdb.DuckDBPyConnection, table: str, path: str, local: str) -> int:
    con.begin()
    try:
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
