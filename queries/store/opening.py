"""Opening a store file: connecting, checking or creating its schema, naming why it cannot be
opened (locked, missing, damaged, another schema). Used by :mod:`.database`."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Final

import duckdb

from .errors import (
    SCHEMA_VERSION,
    STORE_TABLES,
    UPGRADABLE_VERSIONS,
    SchemaVersionError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    is_damaged_store_error,
    one_line,
)
from .migrations import upgrade

__all__ = ["check_schema", "connect", "open_error"]

_LOCK_RE: Final = re.compile(r"held in (?P<program>.+?) \(PID (?P<pid>\d+)\)")


def open_error(exc: duckdb.Error, path: Path, read_only: bool) -> StoreError:
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
        f"cannot open {path} {mode} ({one_line(text)}): check that the directory exists and "
        "is writable, or choose another path with --db/LOOPWATCH_DB.",
        path,
    )


# Files made before the deliveries table existed get it when opened for writing (additive: the
# schema version stays 1, and readers never need the table).
_DELIVERIES_DDL: Final = """
CREATE TABLE IF NOT EXISTS deliveries (
    key          VARCHAR PRIMARY KEY,
    received_ns  BIGINT NOT NULL
)"""


def _schema_sql() -> str:
    return resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


def check_schema(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
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
            if found != SCHEMA_VERSION and found not in UPGRADABLE_VERSIONS:
                raise SchemaVersionError(path, int(found))
            missing = sorted(STORE_TABLES - tables)
            if missing:
                raise SchemaVersionError(
                    path, found, f"schema version {found} but no {', '.join(missing)} table"
                )
            if found != SCHEMA_VERSION:
                if read_only:
                    raise SchemaVersionError(path, int(found))
                upgrade(con, int(found))
            if not read_only and "deliveries" not in tables:
                con.execute(_DELIVERIES_DDL)
            return
        if tables or read_only:
            raise SchemaVersionError(path, None)
        con.begin()
        con.execute(_schema_sql())
        con.execute("INSERT INTO schema_version (version) VALUES (?)", [SCHEMA_VERSION])
        con.commit()
    except duckdb.Error as exc:
        raise open_error(exc, path, read_only) from exc


def connect(path: Path, read_only: bool, memory_mb: int | None = None) -> duckdb.DuckDBPyConnection:
    if read_only and not path.exists():
        raise StoreNotFoundError(path)
    if not read_only and path.is_file() and path.stat().st_size == 0:
        # An empty file (e.g. made by mktemp) holds nothing to lose: start a store in it.
        path.unlink()
    try:
        # The memory limit from the start: upgrading an older file (in _check_schema) works
        # within it too. An invalid value is refused later, by Store's own check.
        valid = isinstance(memory_mb, int) and memory_mb >= 1
        config: dict[str, str | bool | int | float | list[str]] = {}
        if valid:
            config["memory_limit"] = f"{memory_mb}MB"
        con = duckdb.connect(str(path), read_only=read_only, config=config)
    except duckdb.Error as exc:
        raise open_error(exc, path, read_only) from exc
    try:
        check_schema(con, path, read_only)
    except BaseException:
        con.close()
        raise
    return con
