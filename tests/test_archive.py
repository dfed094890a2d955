"""The archive (docs/store.md, *Archive*): sealed days as hive-partitioned Parquet, one file per
node per day and table, in a directory or a real S3-compatible server (moto in server mode,
started here); read back with plain DuckDB ``read_parquet``, with pyarrow datasets and by
loopwatch's reader store; two nodes archive to one place and the reader counts every run once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pytest
from loopwatch.queries.analysis.gateway import run_query
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store import Store
from loopwatch.queries.store.archive import Archiver, ArchiveTarget, sync

NOW = datetime(2026, 2, 1, 12, 0)
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _node_store(path: Path, seed: int, prefix: str) -> int:
    """Three days of runs (with spans) ending now; the run count."""
    with Store(path) as store:
        truth = generate_fleet(
            store.connection,
            runs_per_type=60,
            seed=seed,
            end=NOW,
            span=timedelta(days=3),
            spans=True,
            names={k: f"{prefix}-{k}" for k in ("tight", "loose", "looping", "healthy", "sparse")},
        )
    return int(truth.runs)


def _archive(store_path: Path, target: ArchiveTarget, node: str) -> tuple[int, int]:
    """Seal every pending day; (files written, runs in sealed days)."""
    archiver = Archiver(target, node, lag_s=3600)
    with Store(store_path) as store:
        written = 0
        while n := archiver.seal(store.connection, NOW):
            written += n
        assert archiver.seal(store.connection, NOW) == 0  # each day once
        [(sealed_runs,)] = store.connection.execute(
            "SELECT count(*) FROM runs WHERE started_at < ?", [datetime(2026, 2, 1)]
        ).fetchall()
    return written, int(sealed_runs)


def test_directory_archive_reads_with_plain_engines(tmp_path: Path) -> None:
    runs = _node_store(tmp_path / "a.duckdb", seed=1, prefix="a")
    target = ArchiveTarget.parse(str(tmp_path / "archive"))
    written, sealed = _archive(tmp_path / "a.duckdb", target, "node-a")
    assert written == 2 * 3  # runs and spans, for the three whole days before today
    files = sorted(
        p.relative_to(tmp_path / "archive").as_posix()
        for p in (tmp_path / "archive").rglob("*.parquet")
    )
    assert files[0] == "runs/date=2026-01-29/node=node-a/part-0.parquet"
    assert not list((tmp_path / "archive").rglob("*.tmp*"))
    con = duckdb.connect()
    [(n, nodes, days)] = con.execute(
        "SELECT count(*), count(DISTINCT node), count(DISTINCT date) FROM read_parquet(?, "
        "hive_partitioning = true)",
        [str(tmp_path / "archive" / "runs" / "*" / "*" / "*.parquet")],
    ).fetchall()
    assert (n, nodes, days) == (sealed, 1, 3) and 0 < sealed < runs
    dataset = pads.dataset(tmp_path / "archive" / "spans", format="parquet", partitioning="hive")
    assert dataset.count_rows() > 0
    assert {"date", "node", "trace_id", "start_ns"} <= set(dataset.schema.names)


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    """A real S3-compatible server (moto), a bucket in it, and the archive URL."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **S3_ENV},
    )
    endpoint = f"http://127.0.0.1:{port}"
    old = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket="fleet")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield f"s3://fleet/archive?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        proc.wait(30)


def test_two_nodes_archive_to_s3_and_the_reader_counts_each_run_once(
    tmp_path: Path, s3_url: str
) -> None:
    target = ArchiveTarget.parse(s3_url)
    totals = 0
    for node, seed in (("node-a", 1), ("node-b", 2)):
        _node_store(tmp_path / f"{node}.duckdb", seed=seed, prefix=node)
        written, sealed = _archive(tmp_path / f"{node}.duckdb", target, node)
        assert written == 6
        totals += sealed
    names = [f.path for f in target.files("runs")]
    assert len(names) == 6 and all("/node=node-" in p for p in names)
    # pyarrow reads the bucket directly.
    dataset = pads.dataset(
        f"{target.root}/runs", filesystem=target.fs, format="parquet", partitioning="hive"
    )
    assert dataset.count_rows() == totals
    reader = tmp_path / "fleet.duckdb"
    loaded = sync(target, reader)
    assert loaded["runs"] == totals
    assert sync(target, reader) == {"runs": 0, "spans": 0}  # nothing loaded twice
    with Store(reader, read_only=True) as store:
        con = store.connection
        [(runs, distinct)] = con.execute(
            "SELECT count(*), count(DISTINCT run_id) FROM runs"
        ).fetchall()
        mix = run_query(con, "stop_reason_mix", {})
    assert runs == distinct == totals
    assert sum(mix.column("runs")) == totals
    assert {t.split("-")[0] + "-" + t.split("-")[1] for t in mix.column("task_type")} == {
        "node-a",
        "node-b",
    }
