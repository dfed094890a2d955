"""Reading a store whole, to find damage before anything relies on it.

DuckDB keeps a checksum for every block of the file and checks it when it reads the block; it
reads blocks only when a query needs them. A file cut short, overwritten in the middle or with a
flipped bit therefore opens fine and fails later, on the first query (or commit) that touches
the damaged block. :func:`verify_tables` reads every block of every table once, so such a file
is refused at start instead (``loopwatch serve``; docs/serve.md gives the cost). Free blocks
(space left by deleted rows) are not read: DuckDB never reads them either, and overwrites them
whole when it reuses them, so damage there harms nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import duckdb

from .errors import StoreCorruptError, StoreError, is_damaged_store_error, one_line

__all__ = ["VERIFY_MEMORY_MB", "verify_tables"]

VERIFY_MEMORY_MB: Final = 64
"""DuckDB's memory limit while the store is read whole."""


def _read_table(con: duckdb.DuckDBPyConnection, table: str, limit: str) -> None:
    # A table name cannot be a parameter; this one comes from the catalog, quoted.
    quoted = '"' + table.replace('"', '""') + '"'
    sql = f"SELECT bit_xor(hash(COLUMNS(*))) FROM {quoted}"
    try:
        con.execute(sql).fetchall()
    except duckdb.OutOfMemoryException:
        # A table too wide for the small pool: read it with the store's own limit.
        con.execute("SET memory_limit = ?", [limit])
        try:
            con.execute(sql).fetchall()
        finally:
            con.execute("SET memory_limit = ?", [f"{VERIFY_MEMORY_MB}MB"])


def verify_tables(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Read every column of every table of the main schema once.

    A hash of every column makes DuckDB decompress each of their blocks (checking their
    checksums) without holding the rows: memory stays that of one vector at a time. Raises
    :class:`StoreCorruptError` naming the damage, :class:`StoreError` for another failure.
    """
    try:
        tables = [
            row[0]
            for row in con.execute(
                "SELECT table_name FROM duckdb_tables() "
                "WHERE database_name = current_database() AND schema_name = 'main' "
                "ORDER BY table_name"
            ).fetchall()
        ]
        # Blocks read only to be checked need not stay cached: a small buffer pool while
        # reading keeps the process's memory where it was (else it grows by the file's size,
        # up to the memory limit).
        row = con.execute("SELECT current_setting('memory_limit')").fetchone()
        limit = str(row[0]) if row is not None else "80%"
        con.execute("SET memory_limit = ?", [f"{VERIFY_MEMORY_MB}MB"])
        try:
            for table in tables:
                _read_table(con, table, limit)
        finally:
            con.execute("SET memory_limit = ?", [limit])
    except duckdb.Error as exc:
        if is_damaged_store_error(exc):
            raise StoreCorruptError(path, str(exc)) from exc
        raise StoreError(
            f"reading {path} whole failed ({one_line(str(exc))}): check the file and its disk.",
            path,
        ) from exc
