"""serve's view of the whole fleet: its own store plus the other nodes' archived days
(docs/deploy/README.md, *What each node shows*).

A node started with ``serve --archive URL`` keeps a second DuckDB file beside its store, the
fleet cache (``<store>.fleet.duckdb``, a plain loopwatch store), into which it loads every
archive file of the *other* nodes (:func:`~.archive.load_new_files` with ``skip_node``), once
each, within the retention windows. Both files are attached to the store's DuckDB instance, and
an in-memory catalog holds views: ``runs`` and ``spans`` are this node's rows ``UNION ALL`` the
cache's, every other table of the store is passed through. A cursor of :meth:`FleetView.cursor`
uses that catalog, so the dashboard and the JSON API run the same named SQL over the fleet; each
run is counted once because a node's own files are never loaded (its store holds those rows).
The rollup tables are not in the view (they hold this node's runs only): long-window queries
then read runs (``runs_daily_raw``).
"""

from __future__ import annotations

import contextlib
import threading
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import duckdb

from .archive import ARCHIVED_TABLES, ArchiveTarget, load_new_files

if TYPE_CHECKING:
    from .database import Store

__all__ = ["CACHE_CATALOG", "VIEW_CATALOG", "FleetCursor", "FleetView", "fleet_cache_path"]

CACHE_CATALOG: Final = "lw_fleet"
VIEW_CATALOG: Final = "lw_view"
_HIDDEN_PREFIXES: Final = ("rollup_", "archive_")  # this node's own bookkeeping


def fleet_cache_path(db: Path) -> Path:
    """The fleet cache beside the store file ``db`` (``live.duckdb`` -> ``live.fleet.duckdb``)."""
    return db.with_name(f"{db.stem}.fleet{db.suffix or '.duckdb'}")


class FleetView:
    """The store ``store`` plus the other nodes' archived rows, read through one catalog."""

    def __init__(self, store: Store, target: ArchiveTarget, node: str, cache: Path) -> None:
        from .database import Store

        self.store = store
        self.target = target
        self.node = node
        self.cache = cache
        with Store(cache):  # created with the loopwatch schema when missing
            pass
        self._lock = threading.Lock()
        self._viewed: set[str] = set()
        self._hot = ""
        self.rows_loaded = 0
        self._attach()

    def _attach(self) -> None:
        """Attach the cache and the views' catalog to the store's database, unless they are
        (again, after :meth:`~.database.Store.reopen` made a new one)."""
        with self._lock:
            con = self.store.connection
            rows = con.execute(
                "SELECT current_database(), count(*) FILTER (database_name = ?) "
                "FROM duckdb_databases()",
                [VIEW_CATALOG],
            ).fetchall()
            if rows[0][1]:
                return
            self._hot = str(rows[0][0]).replace('"', '""')
            con.execute(f"ATTACH {_literal(str(self.cache))} AS {CACHE_CATALOG}")
            con.execute(f"ATTACH ':memory:' AS {VIEW_CATALOG}")
            self._viewed.clear()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor reading the fleet (the store's tables plus the cache's rows); the
        cursors made from it read the fleet too."""
        self._attach()
        self._refresh_views()
        return cast(duckdb.DuckDBPyConnection, FleetCursor(self.store.cursor()))

    def cache_cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor whose tables are the cache's (to load it, or delete expired rows)."""
        self._attach()
        cur = self.store.cursor()
        cur.execute(f"USE {CACHE_CATALOG}")
        return cur

    def sync(self, con: duckdb.DuckDBPyConnection, now: datetime, keep_s: dict[str, float]) -> int:
        """Load the other nodes' files not loaded yet into the cache through ``con`` (a
        :meth:`cache_cursor`); files of days older than a table's window (``keep_s``) are
        left out. The rows loaded."""
        since: dict[str, date] = {
            table: (now - timedelta(seconds=s)).date() for table, s in keep_s.items()
        }
        loaded = sum(load_new_files(con, self.target, skip_node=self.node, since=since).values())
        self.rows_loaded += loaded
        return loaded

    def close(self) -> None:
        """Detach the cache and the views (the store stays open)."""
        con = self.store.connection
        for catalog in (VIEW_CATALOG, CACHE_CATALOG):
            with contextlib.suppress(duckdb.Error):  # already gone with the store
                con.execute(f"DETACH {catalog}")

    def _refresh_views(self) -> None:
        """(Re)create the views of tables the store gained since (serve adds some lazily)."""
        cur = self.store.cursor()
        try:
            tables = {
                str(r[0])
                for r in cur.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = ? "
                    "AND schema_name = 'main'",
                    [self._hot],
                ).fetchall()
            }
            with self._lock:
                for table in sorted(tables - self._viewed):
                    if table.startswith(_HIDDEN_PREFIXES):
                        continue
                    cur.execute(self._view_sql(table))
                    self._viewed.add(table)
        finally:
            cur.close()

    def _view_sql(self, table: str) -> str:
        hot = f'"{self._hot}".main."{table}"'
        body = f"SELECT * FROM {hot}"
        if table in ARCHIVED_TABLES:
            body += f" UNION ALL BY NAME SELECT * FROM {CACHE_CATALOG}.main.{table}"
        return f'CREATE OR REPLACE VIEW {VIEW_CATALOG}.main."{table}" AS {body}'


class FleetCursor:
    """A DuckDB connection that reads the fleet's views, as do the cursors made from it
    (DuckDB's own ``cursor()`` starts from the default catalog again)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(f"USE {VIEW_CATALOG}")
        self._con = con

    def cursor(self) -> FleetCursor:
        """A new connection reading the same views."""
        return FleetCursor(self._con.cursor())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def __enter__(self) -> FleetCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._con.close()


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (ATTACH takes no parameters)."""
    return "'" + text.replace("'", "''") + "'"
