"""The store's names, paths and error family, without DuckDB.

What the ``loopwatch`` command and other light callers need to name a store and explain why it
cannot be used, importable without the ``store`` extra. :mod:`loopwatch.queries.store`
re-exports all of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from loopwatch.instrumentation.runtime.settings import env_str

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "STORE_TABLES",
    "UPGRADABLE_VERSIONS",
    "SchemaVersionError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "is_damaged_store_error",
    "is_fatal_store_error",
    "one_line",
    "resolve_db_path",
]

SCHEMA_VERSION: Final = 5
"""The only schema version this code reads and writes."""
UPGRADABLE_VERSIONS: Final = frozenset({1, 2, 3, 4})
"""Earlier schema versions a store opened for writing upgrades in place (queries.migrations)."""
STORE_TABLES: Final = frozenset({"schema_version", "spans", "runs"})
"""The tables every store of :data:`SCHEMA_VERSION` has."""
DEFAULT_DB: Final = "loopwatch.duckdb"
"""The store file used when neither an argument nor ``LOOPWATCH_DB`` names one."""
DB_ENV: Final = "LOOPWATCH_DB"
"""Environment variable naming the store file."""


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The store path: the argument, else ``$LOOPWATCH_DB``, else ``./loopwatch.duckdb``."""
    if path is None:
        path = env_str(DB_ENV) or DEFAULT_DB
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
    """The file exists but is not a readable DuckDB database, or some of its blocks are damaged
    (truncated, overwritten, a flipped bit: DuckDB's checksum of a block does not match)."""

    def __init__(self, path: str | os.PathLike[str], detail: str) -> None:
        aside = f"{path}.damaged"
        super().__init__(
            f"{path} is not a readable DuckDB store ({one_line(detail)}): restore it from a "
            "backup, or move it aside and let loopwatch create a new store there "
            f"(`mv {path} {aside}`, and its .wal file if there is one), or point "
            "--db/LOOPWATCH_DB at another file.",
            path,
        )


class StoreUnavailableError(StoreError):
    """The store cannot be used until it is opened again: DuckDB invalidated the database
    after a fatal error (e.g. the disk filled while a checkpoint was written). What was
    committed before is in the file; reopening it replays its write-ahead log."""

    def __init__(self, path: str | os.PathLike[str], detail: str) -> None:
        super().__init__(
            f"the store {path} is unavailable until it is reopened ({one_line(detail)[:300]}): "
            "free disk space or fix the file's storage; it is reopened when it can be.",
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
        elif found < SCHEMA_VERSION and found in UPGRADABLE_VERSIONS:
            message = (
                f"{path} has store schema version {found}, from an earlier loopwatch; this one "
                f"reads {SCHEMA_VERSION} and upgrades the file in place when it opens it for "
                f"writing: run `loopwatch upgrade {path}` once (loopwatch serve and loopwatch "
                "import upgrade it too), then open it again."
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


def one_line(text: str) -> str:
    """``text`` with every run of whitespace as one space (DuckDB's errors span lines)."""
    return " ".join(text.split())


_CORRUPT_MARKS: Final = (
    "not a valid duckdb database file",
    "corrupt",
    "checksum",
    "too small",
    "failed to read database header",
    "invalid database header",
    "could not read enough bytes",  # a truncated file
)


# DuckDB's exceptions live in its C extension (`_duckdb`), re-exported by `duckdb`.
_DUCKDB_MODULES: Final = frozenset({"duckdb", "_duckdb"})


def is_damaged_store_error(exc: BaseException) -> bool:
    """Whether DuckDB's error says the file itself is damaged (truncated, bad checksum), as
    opposed to a bad query or a lock. Such a file fails when opened or, if the damage is past
    the header, on the first query that reads the damaged blocks."""
    if not any(c.__module__.split(".")[0] in _DUCKDB_MODULES for c in type(exc).__mro__):
        return False  # not DuckDB's (checked without importing it: `loopwatch --help` stays light)
    lower = str(exc).lower()
    return any(m in lower for m in _CORRUPT_MARKS)


_FATAL_MARKS: Final = ("database has been invalidated", "fatal error")


def is_fatal_store_error(exc: BaseException) -> bool:
    """Whether DuckDB's error means the database instance is no longer usable (DuckDB calls
    these fatal: every later statement fails until the file is opened again)."""
    if isinstance(exc, StoreUnavailableError):
        return True
    if not any(c.__module__.split(".")[0] in _DUCKDB_MODULES for c in type(exc).__mro__):
        return False
    if type(exc).__name__ == "FatalException":
        return True
    lower = str(exc).lower()
    return any(m in lower for m in _FATAL_MARKS)
