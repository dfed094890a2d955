"""Several nodes (docs/deploy/README.md): two real ``loopwatch serve`` processes, each with its own
store, archive to one directory; a reader (``loopwatch report --archive``, the reader store the
dashboard opens) sees every run of both, none twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store import Store
from loopwatch.queries.store.archive import reader_store

from tests.serving import ServeProcess, metric_sum

KINDS = ("tight", "loose", "looping", "healthy", "sparse")


def _history(db: Path, node: str, now: datetime) -> tuple[int, int]:
    """Four days of runs ending now; (sealed days, runs in them)."""
    with Store(db) as store:
        generate_fleet(
            store.connection,
            runs_per_type=60,
            seed=sum(node.encode()),
            end=now,
            span=timedelta(days=4),
            spans=True,
            names={k: f"{node}-{k}" for k in KINDS},
        )
        sealed = (now - timedelta(hours=1)).date()
        [(days, runs)] = store.connection.execute(
            "SELECT count(DISTINCT started_at::DATE), count(*) FROM runs"
            " WHERE started_at::DATE < ?",
            [sealed],
        ).fetchall()
    return int(days), int(runs)


def test_two_nodes_one_archive_one_reader(tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    archive = tmp_path / "archive"
    expected: dict[str, tuple[int, int]] = {}
    servers = []
    try:
        for node in ("node-a", "node-b"):
            db = tmp_path / f"{node}.duckdb"
            expected[node] = _history(db, node, now)
            servers.append(
                ServeProcess(
                    db,
                    "--archive",
                    str(archive),
                    "--node",
                    node,
                    "--keep-spans",
                    "forever",
                    "--keep-runs",
                    "forever",
                )
            )
        deadline = time.monotonic() + 120
        for server, node in zip(servers, expected, strict=True):
            want = 2 * expected[node][0]  # runs and spans per sealed day
            while metric_sum(server.metrics, "loopwatch_archive_files_total") < want:
                assert time.monotonic() < deadline, f"{node} did not archive its sealed days"
                time.sleep(0.2)
    finally:
        for server in servers:
            server.stop()
    files = sorted(p.relative_to(archive).as_posix() for p in archive.rglob("*.parquet"))
    assert len(files) == 2 * sum(days for days, _ in expected.values())
    assert {f.split("/")[2] for f in files} == {"node=node-a", "node=node-b"}
    total = sum(runs for _, runs in expected.values())
    env = {**os.environ, "LOOPWATCH_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopwatch.dashboard.cli",
            "report",
            "--archive",
            str(archive),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    names = {t["task_type"] for t in report["task_types"]}
    assert {n.split("-")[0] + "-" + n.split("-")[1] for n in names} == {"node-a", "node-b"}
    reader = reader_store(str(archive), tmp_path / "cache")  # the same file, already loaded
    with Store(reader, read_only=True) as store:
        [(runs, distinct)] = store.connection.execute(
            "SELECT count(*), count(DISTINCT run_id) FROM runs"
        ).fetchall()
    assert runs == distinct == total
