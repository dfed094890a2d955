"""Where the dashboard reads its numbers: the live store of ``loopwatch serve`` or a file.

DuckDB lets one process hold a file. In live mode ``serve`` owns the store and the Streamlit app
runs in the same process, so the pages read through a cursor of that store; in file mode
(``loopwatch dashboard PATH``) they open the file read-only. Pages call :func:`gateway` and never
open a connection themselves, so every number goes through the query gateway's named ``.sql``
files with its row cap and time limit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import duckdb
from loopwatch.instrumentation.runtime.settings import env_str
from loopwatch.queries.analysis.gateway import QueryGateway
from loopwatch.queries.store.database import Store, connect_read_only, resolve_db_path

__all__ = [
    "DB_ENV",
    "DataSource",
    "clear_live_store",
    "current_source",
    "gateway",
    "live_reader",
    "live_store",
    "set_live_store",
    "set_write_token",
    "write_token",
]

DB_ENV = "LOOPWATCH_DB"
"""The file the dashboard reads in file mode, when no live store is set."""

_lock = threading.Lock()
_live: Store | None = None
_reader: Callable[[], duckdb.DuckDBPyConnection] | None = None
_write_token: str | None = None


@dataclass(frozen=True, slots=True)
class DataSource:
    """What the dashboard is reading: ``mode`` is ``"live"`` (a ``serve`` process's store) or
    ``"file"`` (a file opened read-only); ``path`` is the store file."""

    mode: Literal["live", "file"]
    path: Path


def set_live_store(
    store: Store, *, reader: Callable[[], duckdb.DuckDBPyConnection] | None = None
) -> None:
    """Make the pages of this process read ``store`` (called by ``serve`` at start-up);
    ``reader``: where the pages' cursors come from instead of ``store.cursor`` (serve's view of
    the whole fleet, docs/deploy/README.md)."""
    global _live, _reader
    with _lock:
        _live, _reader = store, reader


def clear_live_store() -> None:
    """Forget the live store (called by ``serve`` before it closes the store)."""
    global _live, _reader, _write_token
    with _lock:
        _live, _reader, _write_token = None, None, None


def set_write_token(token: str | None) -> None:
    """The token the dashboard's tuning actions ask for (``None``: none asked; called by
    ``serve``, whose write token it is: docs/dashboard.md, "Tuning")."""
    global _write_token
    with _lock:
        _write_token = token


def write_token() -> str | None:
    """The write token of the serving process, if it has one."""
    with _lock:
        return _write_token


def live_reader() -> Callable[[], duckdb.DuckDBPyConnection] | None:
    """Where the live store's readers get their cursors, if not from the store itself."""
    with _lock:
        return _reader


def live_store() -> Store | None:
    """The store ``serve`` holds, in live mode; ``None`` in file mode (nothing can be written)."""
    with _lock:
        return _live


def current_source() -> DataSource:
    """The live store when this process serves one, else the file named by ``LOOPWATCH_DB``
    (default ``./loopwatch.duckdb``)."""
    with _lock:
        live = _live
    if live is not None:
        return DataSource("live", live.path)
    return DataSource("file", resolve_db_path(env_str(DB_ENV)))


def gateway(*, max_rows: int | None = None, timeout_s: float | None = None) -> QueryGateway:
    """A query gateway over the current source: a new cursor of the live store, or the file
    opened read-only (raises :class:`~loopwatch.queries.store.StoreError` subclasses that say
    what to do when the file is missing, locked or not a loopwatch store)."""
    with _lock:
        live, reader = _live, _reader
    if live is None:
        con = connect_read_only(current_source().path)
    else:
        con = reader() if reader is not None else live.cursor()
    return QueryGateway(con, max_rows=max_rows, timeout_s=timeout_s)
