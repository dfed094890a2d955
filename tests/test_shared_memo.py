"""The dashboard shares its costliest result (the limits file fit) across sessions while the store
stays the same (docs/dashboard.md, "The limits file fit on the pages"): a committed write changes
the store's version, and with it the key."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from loopwatch.dashboard.app.shared_memo import (
    SHARED_ENTRIES,
    clear_shared,
    shared,
    store_version,
)
from loopwatch.queries.ingest.synthetic import SyntheticRun, write_runs
from loopwatch.queries.store.database import Store


def _run() -> SyntheticRun:
    return SyntheticRun(
        run_id=uuid.uuid4().hex,
        task_type="t",
        started_at=datetime.now(UTC).replace(tzinfo=None),
        stop_reason="completed",
        steps=3.0,
        tokens=100.0,
        cost_usd=0.01,
        limit_steps=10.0,
    )


def test_every_committed_write_changes_the_store_version(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    assert store_version(path) == (-1, -1, -1, -1)
    with Store(path) as store:
        before = store_version(path)
        versions = {before}
        for _ in range(3):
            cur = store.cursor()
            write_runs(cur, [_run()])
            cur.close()
            versions.add(store_version(path))
        assert len(versions) == 4  # each insert is seen, without a checkpoint in between
        last = store_version(path)
        store.checkpoint()  # the log folded into the file: the file and the log change
        assert store_version(path) != last


def test_a_result_is_computed_once_per_key_and_the_oldest_are_forgotten() -> None:
    clear_shared()
    calls: list[int] = []

    def compute(n: int) -> int:
        calls.append(n)
        return n * 10

    assert shared(("k", 1), lambda: compute(1)) == 10
    assert shared(("k", 1), lambda: compute(1)) == 10
    assert calls == [1]
    for n in range(2, SHARED_ENTRIES + 2):
        shared(("k", n), lambda n=n: compute(n))  # type: ignore[misc]
    shared(("k", 1), lambda: compute(1))  # pushed out by the newer ones: computed again
    assert calls.count(1) == 2
    clear_shared()
    shared(("k", 2), lambda: compute(2))
    assert calls.count(2) == 2
