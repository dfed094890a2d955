"""serve's background store work besides ingest: retention and rollups (docs/store.md,
*Retention*, *Rollups*).

One thread, its own DuckDB cursor. Each step is one small transaction (at most
``RetentionPolicy.batch_rows`` rows), then a short pause, so the writer's commits and the API's
queries go on between steps; when nothing is expired it sleeps ``interval_s``. It does nothing
while the store is not ``ok`` (the writer is bringing it back), and an error is logged and
retried later: housekeeping never stops ingest. Between retention's work, every
``rollup_interval_s`` it rolls runs up (``loopwatch.queries.store.rollups.roll_up``), writes
sealed days to the archive, and loads the other nodes' archive files into the fleet view
(docs/deploy/README.md). It also tells the store which rows are late (docs/store.md, *Late
rows*), moving those instants before each pass reads the store.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from loopwatch.queries.store import Store
from loopwatch.queries.store.archive import Archiver, ArchiveTarget, default_node
from loopwatch.queries.store.fleet import FleetView, fleet_cache_path
from loopwatch.queries.store.late import LateRows, ensure_late_tables
from loopwatch.queries.store.retention import Retention, RetentionPolicy
from loopwatch.queries.store.rollups import LATE_S, late_before, roll_up, rolled_until
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["Housekeeper", "HousekeepingOptions", "RetentionCollector", "start_housekeeping"]

_log = logging.getLogger(__name__)
_PAUSE_S = 0.05  # between two batches while expired rows remain: the writer's turn
_ERROR_WAIT_S = 5.0
_EPOCH = datetime(1970, 1, 1)
_ARCHIVE_EVERY_S = 60.0  # how often sealed days are looked for when rollups are off


@dataclass(frozen=True, kw_only=True, slots=True)
class HousekeepingOptions:
    """serve's ``--keep-spans``, ``--keep-runs``, ``--archive``, ``--node``,
    ``--rollup-every-s``."""

    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    """How long spans and runs are kept; expired rows are deleted in the background."""
    archive: str | None = None
    """Directory or ``s3://`` URL sealed days are written to as Parquet (docs/store.md)."""
    node: str | None = None
    """This node's name in the archive's paths (``None``: the host name)."""
    rollup_every_s: float | None = 60.0
    """How often runs are rolled up (``None``: never)."""
    fleet_view: bool = True
    """With an archive: the UI and the API read the other nodes' archived days too
    (docs/deploy/README.md, *What each node shows*)."""


def start_housekeeping(
    store: Store, options: HousekeepingOptions, store_ok: Callable[[], bool], metrics: Any
) -> Housekeeper:
    """Start the background thread and register its metrics in ``metrics.registry``."""
    archiver = fleet = None
    if options.archive is not None:
        archiver = Archiver(ArchiveTarget.parse(options.archive), options.node or default_node())
        if options.fleet_view and store.path.name != ":connection:":
            fleet = FleetView(store, archiver.target, archiver.node, fleet_cache_path(store.path))
    keeper = Housekeeper(
        store,
        options.retention,
        store_ok,
        archiver=archiver,
        rollup_interval_s=options.rollup_every_s,
        fleet=fleet,
    )
    keeper.track_late_rows()
    metrics.registry.register(RetentionCollector(keeper))
    keeper.start()
    return keeper


class Housekeeper:
    """Deletes expired rows in the background while ``store_ok()`` says the store commits."""

    def __init__(
        self,
        store: Store,
        policy: RetentionPolicy,
        store_ok: Callable[[], bool],
        *,
        interval_s: float = 30.0,
        rollup_interval_s: float | None = 60.0,
        archiver: Archiver | None = None,
        fleet: FleetView | None = None,
    ) -> None:
        self.store = store
        self.retention = Retention(policy)
        self.store_ok = store_ok
        self.interval_s = interval_s
        self.errors = 0
        self.rollup_interval_s = rollup_interval_s
        self.rollups = 0
        self.archiver = archiver
        self.fleet = fleet
        """The fleet's view (the other nodes' archived days), when serve reads it."""
        self._fleet_retention = Retention(policy)
        # With an archive, nothing is deleted before it is archived: nothing until known.
        self._keep_after_ns: int | None = None if archiver is None else 0
        self._next_rollup = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loopwatch-retention", daemon=True)

    @property
    def deleted(self) -> dict[str, int]:
        """Rows deleted since start, by table."""
        return dict(self.retention.counts.deleted)

    @property
    def reader(self) -> Callable[[], Any] | None:
        """The cursors the UI and the API read through: the fleet's, when serve shows it."""
        return None if self.fleet is None else self.fleet.cursor

    def start(self) -> None:
        """Start the thread (nothing to do when no table has a window)."""
        if self.retention.policy.windows() or self._has_periodic():
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop after the current batch."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self.fleet is not None:
            self.fleet.close()

    def track_late_rows(self) -> None:
        """Make the store's writes mark late rows (docs/store.md, *Late rows*), from the
        instants the stored rollup state and archive log give."""
        if self.rollup_interval_s is None and self.archiver is None:
            return
        late = LateRows()
        archiver = self.archiver

        def start(con: Any) -> None:
            ensure_late_tables(con)
            if self.rollup_interval_s is not None:
                until = rolled_until(con, "minute") if _has_state(con) else None
                if until is not None:
                    late.rollup_before_ns = _ns(until - timedelta(seconds=LATE_S))
            if archiver is not None:
                late.archive_before_ns = archiver.late_instants(con, [])
            self.store.late = late

        self.store.run_write(start)

    def _set_late(
        self, rollup: datetime | None = None, archive: dict[str, int] | None = None
    ) -> None:
        """Move the late instants under the store's write lock (see :mod:`...late`)."""
        late = self.store.late
        if late is None:
            return

        def move(con: Any) -> None:
            if rollup is not None:
                late.rollup_before_ns = _ns(rollup)
            if archive is not None:
                late.archive_before_ns = {**late.archive_before_ns, **archive}

        self.store.run_write(move)

    def _loop(self) -> None:
        cursor: Any = None
        while not self._stop.is_set():
            if not self.store_ok():
                cursor = _close(cursor)
                self._stop.wait(1.0)
                continue
            try:
                cursor = cursor or self.store.cursor()
                deleted = self.retention.step(cursor, keep_after_ns=self._keep_after_ns)
                if not deleted:
                    self._periodic(cursor)
            except Exception as exc:  # never stops ingest; tried again later
                self.errors += 1
                _log.warning("loopwatch serve: retention step failed, retrying later: %s", exc)
                cursor = _close(cursor)
                self._stop.wait(_ERROR_WAIT_S)
                continue
            self._stop.wait(_PAUSE_S if deleted else self._idle_wait())
        _close(cursor)

    def _periodic(self, cursor: Any) -> None:
        """Roll up, then archive one sealed day (sooner again while days are pending)."""
        if not self._has_periodic() or time.monotonic() < self._next_rollup:
            return
        again = self.rollup_interval_s or _ARCHIVE_EVERY_S
        now = datetime.now(UTC).replace(tzinfo=None)
        if self.rollup_interval_s is not None:
            self._set_late(rollup=late_before(now))  # before the pass reads the store
            roll_up(cursor, now, runs_kept_s=self.retention.policy.keep_runs_s)
            self.rollups += 1
        if self.archiver is not None:
            if self.archiver.seal(cursor, now, mark_late=lambda t: self._set_late(archive=t)):
                again = _PAUSE_S
            until = self.archiver.archived_until(cursor, now)
            self._keep_after_ns = _ns(until)
        if self.fleet is not None:
            self._sync_fleet(now)
        self._next_rollup = time.monotonic() + again

    def _sync_fleet(self, now: datetime) -> None:
        """Load the other nodes' new files into the fleet cache; expire its old rows."""
        assert self.fleet is not None
        cur = self.fleet.cache_cursor()
        try:
            self.fleet.sync(cur, now, self.retention.policy.windows())
            while self._fleet_retention.step(cur) and not self._stop.is_set():
                self._stop.wait(_PAUSE_S)
        finally:
            cur.close()

    def _has_periodic(self) -> bool:
        return self.rollup_interval_s is not None or self.archiver is not None

    def _idle_wait(self) -> float:
        if not self._has_periodic():
            return self.interval_s
        return max(0.05, min(self.interval_s, self._next_rollup - time.monotonic()))


def _ns(ts: datetime) -> int:
    """A naive UTC instant as Unix nanoseconds."""
    return int((ts.replace(tzinfo=None) - _EPOCH).total_seconds()) * 10**9


def _has_state(con: Any) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND table_name = 'rollup_state'"
    ).fetchone()
    return bool(row and row[0])


def _close(cursor: Any) -> Any:
    """Close ``cursor`` if there is one; ``None``, the cursor to use next."""
    if cursor is not None:
        with contextlib.suppress(Exception):  # a cursor of a connection already closed
            cursor.close()
    return None


class RetentionCollector:
    """``loopwatch_retention_deleted_rows_total{table}`` and ``loopwatch_retention_errors`` for
    serve's ``/metrics`` (docs/serve.md)."""

    def __init__(self, keeper: Housekeeper) -> None:
        self.keeper = keeper

    def collect(self) -> Any:
        """The metrics now (a ``prometheus_client`` custom collector)."""
        deleted = CounterMetricFamily(
            "loopwatch_retention_deleted_rows",
            "Rows deleted by retention since start, by table",
            labels=["table"],
        )
        for table, n in sorted(self.keeper.deleted.items()):
            deleted.add_metric([table], n)
        yield deleted
        errors = GaugeMetricFamily(
            "loopwatch_retention_errors", "Retention steps that failed since start (retried)"
        )
        errors.add_metric([], self.keeper.errors)
        yield errors
        rollups = CounterMetricFamily(
            "loopwatch_rollup_passes", "Roll-up passes (minute, hour, day) completed since start"
        )
        rollups.add_metric([], self.keeper.rollups)
        yield rollups
        archived = CounterMetricFamily(
            "loopwatch_archive_files", "Archive files (one table, day and node) written"
        )
        archiver = self.keeper.archiver
        archived.add_metric([], 0 if archiver is None else archiver.files_written)
        yield archived
        if self.keeper.fleet is not None:
            fleet = CounterMetricFamily(
                "loopwatch_fleet_rows_loaded",
                "Rows of other nodes' archive files loaded into this node's fleet view",
            )
            fleet.add_metric([], self.keeper.fleet.rows_loaded)
            yield fleet
