"""``loopwatch serve`` under the faults an operator meets: odd gzip bodies, a full disk, a
corrupt store, slow senders, a killed server. Real server processes, real files."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import resource
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serving import ServeProcess, get, metric_sum, post_traces, request, store_rows
from tests.test_serve import json_body, make_spans, protobuf_body

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path_factory.mktemp("faults") / "live.duckdb")
    try:
        yield process
    finally:
        process.kill()


def _stored_ids(server: ServeProcess, prefix: str) -> list[str]:
    status, body = get(server.otlp, "/api/v1/runs?max_rows=10000")
    assert status == 200, body
    rows = json.loads(body)["rows"]
    return [r["run_id"] for r in rows if r["run_id"].startswith(prefix + "-")]


@pytest.mark.parametrize("kind", ["protobuf", "json"])
def test_a_two_member_gzip_body_stores_every_span(shared_server: ServeProcess, kind: str) -> None:
    encode, media = (
        (protobuf_body, "application/x-protobuf")
        if kind == "protobuf"
        else (json_body, "application/json")
    )
    if kind == "protobuf":
        # Two serialized requests one after the other are one request holding both (protobuf
        # merges repeated fields): each member carries half the runs.
        first, second = encode(make_spans(3, prefix="pa")), encode(make_spans(2, prefix="pb"))
        body = gzip.compress(first) + gzip.compress(second)
        expected = {f"pa-{n}" for n in range(3)} | {f"pb-{n}" for n in range(2)}
    else:
        # JSON split across the two members mid-text: only reading both gives the document.
        whole = encode(make_spans(4, prefix="ja"))
        half = len(whole) // 2
        body = gzip.compress(whole[:half]) + gzip.compress(whole[half:])
        expected = {f"ja-{n}" for n in range(4)}
    status, _, answer = post_traces(shared_server.otlp, body, media, Content_Encoding="gzip")
    assert status == 200, answer
    ids = set(_stored_ids(shared_server, "pa") + _stored_ids(shared_server, "pb"))
    ids |= set(_stored_ids(shared_server, "ja"))
    assert expected <= ids


@pytest.mark.parametrize(
    "tail", [b"trailing garbage", b"\x00" * 8, gzip.compress(b"not otlp")[:10]]
)
def test_bytes_after_the_gzip_stream_are_refused_not_ignored(
    shared_server: ServeProcess, tail: bytes
) -> None:
    before = shared_server.health()["spans"]
    body = gzip.compress(protobuf_body(make_spans(2, prefix="tail"))) + tail
    status, _, answer = post_traces(shared_server.otlp, body, Content_Encoding="gzip")
    assert status == 400, answer
    assert shared_server.health()["spans"] == before


def test_bytes_after_a_deflate_stream_are_refused(shared_server: ServeProcess) -> None:
    before = shared_server.health()["spans"]
    body = zlib.compress(protobuf_body(make_spans(2, prefix="defl"))) + b"more"
    status, _, answer = post_traces(shared_server.otlp, body, Content_Encoding="deflate")
    assert status == 400 and b"follow the end of the deflate stream" in answer
    assert shared_server.health()["spans"] == before


# --- a damaged store at start -----------------------------------------------------------------

_HEADER_BYTES = 3 * 4096  # DuckDB's file header and its two database headers
_BLOCK_BYTES = 256 * 1024  # DuckDB's block size


def _store_with_runs(db: Path, runs: int) -> list[int]:
    """A store holding ``runs`` runs; the file offsets of the blocks its tables use."""
    from loopwatch.queries.store import SpanBatch, Store

    with Store(db) as store:
        for n in range(0, runs, 500):
            store.write(SpanBatch.from_sdk_spans(make_spans(500, prefix=f"d{n}")))
        store.checkpoint()
        blocks = store.connection.execute(
            "SELECT DISTINCT block_id FROM pragma_storage_info('spans') WHERE block_id >= 0 "
            "UNION SELECT DISTINCT block_id FROM pragma_storage_info('runs') WHERE block_id >= 0"
        ).fetchall()
    return sorted(_HEADER_BYTES + b * _BLOCK_BYTES for (b,) in blocks)


def _truncate_to_half(db: Path, used: list[int]) -> None:
    size = db.stat().st_size
    assert used[-1] > size // 2  # the cut takes blocks the tables use
    os.truncate(db, size // 2)


def _random_64k_in_the_middle(db: Path, used: list[int]) -> None:
    middle = min(used, key=lambda offset: abs(offset - db.stat().st_size // 2))
    with open(db, "r+b") as f:
        f.seek(middle + 1000)
        f.write(random.Random(7).randbytes(64 * 1024))


def _one_flipped_byte(db: Path, used: list[int]) -> None:
    offset = used[len(used) // 3] + _BLOCK_BYTES // 2
    with open(db, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


@pytest.mark.parametrize(
    "damage", [_truncate_to_half, _random_64k_in_the_middle, _one_flipped_byte]
)
def test_a_damaged_store_is_refused_at_start_with_what_to_do(
    tmp_path: Path, damage: Callable[[Path, list[int]], None]
) -> None:
    db = tmp_path / "damaged.duckdb"
    used = _store_with_runs(db, 6000)
    assert len(used) >= 4
    damage(db, used)
    before = db.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch.dashboard.cli", "serve", "--db", str(db), "--no-ui",
         "--otlp-port", "0", "--metrics-port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "OTLP/HTTP" not in done.stdout  # never listened, so never reported ok
    assert f"{db} is not a readable DuckDB store" in done.stderr
    assert "restore it from a backup" in done.stderr
    assert f"`mv {db} {db}.damaged`" in done.stderr
    assert "Traceback" not in done.stderr
    assert db.read_bytes() == before  # left as it was, for the operator to recover


# --- a full disk ------------------------------------------------------------------------------


@contextlib.contextmanager
def _small_disk(where: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` mounted at ``where`` for the test (root only)."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path, leave_bytes: int) -> Path:
    """A file taking all of ``disk`` but ``leave_bytes``."""
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


def _send_until_committed(
    port: int, name: str, body: bytes, answers: list[tuple[str, int, bytes]], stop: threading.Event
) -> bool:
    """As an OTLP exporter does: send, and on 503 wait and send again, until a 200."""
    while not stop.is_set():
        try:
            status, _, answer = post_traces(port, body)
        except OSError:
            time.sleep(0.2)
            continue
        answers.append((name, status, answer))
        if status == 200:
            return True
        assert status == 503, answer
        time.sleep(0.1)
    return False


# Two ways to fill a disk under a running serve: (directory for the store, fill(serve's pid),
# free(serve's pid), what the OS says when a write fails).
_Fault = tuple[Path, Callable[[int], None], Callable[[int], None], bytes]


@contextlib.contextmanager
def _tmpfs_fault(tmp_path: Path) -> Iterator[_Fault]:
    """A 24 MB tmpfs, filled by a file leaving 3 MB, freed by deleting it."""
    with _small_disk(tmp_path / "disk", 24) as disk:
        fillers: list[Path] = []
        yield (
            disk,
            lambda pid: fillers.append(_fill(disk, 3 << 20)),
            lambda pid: fillers.pop().unlink(),
            b"No space left on device",
        )


@contextlib.contextmanager
def _file_size_fault(tmp_path: Path) -> Iterator[_Fault]:
    """A file-size limit (RLIMIT_FSIZE) set on the running serve, 3 MB past its largest file,
    then lifted: writes past it fail with EFBIG, as on a full disk (Python ignores SIGXFSZ)."""
    where = tmp_path / "limited"
    where.mkdir()

    def fill(pid: int) -> None:
        biggest = max(f.stat().st_size for f in where.iterdir())
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (biggest + (3 << 20), resource.RLIM_INFINITY))

    def free(pid: int) -> None:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)

    yield where, fill, free, b"File too large"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mounts a tmpfs, sets prlimit")
@pytest.mark.parametrize("fault", [_tmpfs_fault, _file_size_fault], ids=["tmpfs", "fsize"])
def test_a_disk_that_fills_and_frees_again_heals_by_itself(
    tmp_path: Path, fault: Callable[[Path], contextlib.AbstractContextManager[_Fault]]
) -> None:
    with fault(tmp_path) as (where, fill, free, os_message):
        db = where / "live.duckdb"
        # A checkpoint every MB of log: the disk fills during checkpoints too, the case where
        # DuckDB invalidates the database and serve must reopen it.
        server = ServeProcess(db, "--checkpoint-mb", "1", "--memory-mb", "128")
        try:
            fill(server.proc.pid)
            acknowledged: list[str] = []
            answers: list[tuple[str, int, bytes]] = []
            stop = threading.Event()
            bodies = [(f"f{i}", protobuf_body(make_spans(60, prefix=f"f{i}"))) for i in range(80)]

            def sender(offset: int) -> None:
                for name, body in bodies[offset::2]:
                    if _send_until_committed(server.otlp, name, body, answers, stop):
                        acknowledged.append(name)

            threads = [threading.Thread(target=sender, args=(k,)) for k in (0, 1)]
            for t in threads:
                t.start()
            # The disk fills: commits fail, and serve says so.
            seen_down: dict[str, Any] = {}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not seen_down:
                status, body = get(server.otlp, "/health")
                if status != 200:
                    seen_down = json.loads(body)
                    seen_down["store_up"] = metric_sum(server.metrics, "loopwatch_store_up")
                time.sleep(0.05)
            assert seen_down, "the disk never filled"
            assert seen_down["status"] in ("failing", "unavailable"), seen_down
            assert seen_down["store"]["error"], seen_down
            # /health and /metrics are two requests: under load the store may be between a failed
            # and a retried commit when the second is read; the gauge must say "down" while the
            # disk stays full (a gauge that never does fails here)
            store_up = seen_down["store_up"]
            while store_up != 0 and time.monotonic() < deadline:
                time.sleep(0.05)
                store_up = metric_sum(server.metrics, "loopwatch_store_up")
            assert store_up == 0
            refused = [a for _, s, a in answers if s == 503]
            assert refused and any(os_message in a for a in refused), refused[:3]
            # Space comes back: serve heals without anyone touching it.
            free(server.proc.pid)
            for t in threads:
                t.join(180)
            stop.set()
            assert sorted(acknowledged) == sorted(name for name, _ in bodies)
            health = server.health()
            assert health["status"] == "ok" and health["store"]["state"] == "ok"
            assert metric_sum(server.metrics, "loopwatch_store_up") == 1
            assert server.stop(timeout_s=30) == 0  # SIGTERM stays quick
            assert "Traceback" not in "".join(server.stderr)
        finally:
            server.kill()
        # Everything acknowledged is stored, once.
        per_run = store_rows(db, "SELECT run_id, count(*) FROM spans GROUP BY run_id")
        assert len(per_run) == 80 * 60 and {n for _, n in per_run} == {4}
        assert store_rows(db, "SELECT count(*), count(DISTINCT run_id) FROM runs") == [
            (80 * 60, 80 * 60)
        ]


# --- slow senders -----------------------------------------------------------------------------


class _SlowBody:
    """A raw connection that declares ``declared`` bytes, sends ``burst`` of them at once, then
    trickles two bytes a second until it is answered."""

    def __init__(self, port: int, declared: int, burst: int = 0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        head = (
            "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/x-protobuf\r\nContent-Length: {declared}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + b"\0" * burst)
        self.answer = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        self.sock.settimeout(1.0)
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    self.sock.sendall(b"\0\0")
                continue
            except OSError:
                return
            if not data:
                return
            self.answer += data

    @property
    def status(self) -> int | None:
        if b"\r\n" not in self.answer:
            return None
        return int(self.answer.split(b" ", 2)[1])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def test_slow_bodies_do_not_block_requests_that_move(tmp_path: Path) -> None:
    # The case (bodies declared at 20+20+20+4 MiB sending two bytes a second): they hold
    # what they sent, not what they declared. And five that send 1 MiB at once and stall: four
    # of them fill the 4 MiB pending cap, which would refuse every other request until the
    # body timeout; stalled bodies may hold half of it, so some are cut off (503: their senders
    # retry) and the good requests keep committing.
    server = ServeProcess(
        tmp_path / "slow.duckdb", "--max-pending-mb", "4", "--body-timeout-s", "15"
    )
    slow: list[_SlowBody] = []
    try:
        mib = 1 << 20
        slow = [_SlowBody(server.otlp, size) for size in (20 * mib, 20 * mib, 20 * mib, 4 * mib)]
        slow += [_SlowBody(server.otlp, 20 * mib, burst=mib) for _ in range(5)]
        time.sleep(3.0)  # their bytes arrive, then they stall
        held = server.health()["ingest"]["pending_bytes"]
        assert held <= 2 * mib + 1000  # the stalled share, not 64 MiB declared
        good = [protobuf_body(make_spans(40, prefix=f"good{i}")) for i in range(10)]
        statuses = [post_traces(server.otlp, body)[0] for body in good]
        assert statuses == [200] * 10
        assert any(s.status is None for s in slow)  # some still hold on meanwhile
        assert server.health()["runs"] == 400
        # The body timeout ends the rest: 408.
        deadline = time.monotonic() + 90
        while any(s.status is None for s in slow) and time.monotonic() < deadline:
            time.sleep(0.2)
        answered = [s.status for s in slow]
        assert set(answered) == {408, 503}, answered
        assert answered[4:].count(503) >= 3  # of the 1 MiB stallers: refused or cut off
        timed_out = next(s for s in slow if s.status == 408)
        assert b"did not arrive within 15 s" in timed_out.answer
        assert server.health()["ingest"]["pending_bytes"] == 0
        assert post_traces(server.otlp, protobuf_body(make_spans(1, prefix="after")))[0] == 200
    finally:
        for s in slow:
            s.close()
        server.kill()


# --- who may reach serve ----------------------------------------------------------------------


def test_without_a_token_a_dns_rebinding_host_is_refused(tmp_path: Path) -> None:
    # A page on a rebinding name (evil.example -> 127.0.0.1) reaches serve with its own name
    # as the Host header: without a token, serve answers only IP addresses, localhost, the
    # --host name and names allowed with --allow-host.
    server = ServeProcess(tmp_path / "h.duckdb", "--allow-host", "loopwatch.internal")
    try:
        body = protobuf_body(make_spans(1, prefix="host"))
        for path, port in (("/api/v1/runs", server.otlp), ("/metrics", server.metrics)):
            status, _, answer = request(port, "GET", path, headers={"Host": "evil.example"})
            assert status == 403 and b"--token" in answer, (path, answer)
        status, _, _ = post_traces(server.otlp, body, Host="evil.example:4318")
        assert status == 403
        assert server.health()["spans"] == 0
        for host in ("127.0.0.1:4318", "localhost", "[::1]:4318", "loopwatch.internal:4318"):
            status, _, _ = request(server.otlp, "GET", "/api/v1/runs", headers={"Host": host})
            assert status == 200, host
        assert post_traces(server.otlp, body, Host="localhost:4318")[0] == 200
    finally:
        server.kill()
    token = "s3cret-token"
    with_token = ServeProcess(tmp_path / "t.duckdb", "--token", token)
    try:
        auth = {"Authorization": f"Bearer {token}", "Host": "collector.example"}
        assert request(with_token.otlp, "GET", "/api/v1/runs", headers=auth)[0] == 200
        assert "WARNING" not in "".join(with_token.stderr)
    finally:
        with_token.kill()


def test_binding_beyond_loopback_without_a_token_warns_loudly() -> None:
    from loopwatch.dashboard.server.hosts import exposure_warning

    warning = exposure_warning("0.0.0.0", None)
    assert warning is not None and "WARNING" in warning and "WITHOUT a token" in warning
    assert "--token" in warning and "0.0.0.0" in warning
    assert exposure_warning("0.0.0.0", "t") is None
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure_warning(loopback, None) is None
    assert exposure_warning("192.168.1.20", None) is not None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mounts a tmpfs")
def test_the_writer_survives_an_invalidated_store_while_pruning_retry_keys(
    tmp_path: Path,
) -> None:
    # The writer died on an uncaught exception while pruning old retry keys of a
    # database DuckDB had invalidated. Here a checkpoint on a full disk invalidates it behind
    # the idle writer's back; pruning finds it, the writer reopens the store once space is
    # back, and ingest goes on.
    import asyncio

    from loopwatch.dashboard.server.ingest import Ingest, IngestOptions
    from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor
    from loopwatch.queries.store import Store, StoreError

    body = protobuf_body(make_spans(200, prefix="pr"))
    with _small_disk(tmp_path / "disk", 16) as disk, Store(disk / "p.duckdb") as store:
        options = IngestOptions(prune_interval_s=0.05, max_retry_s=0.5)
        ingest = Ingest(store, MetricsSpanProcessor(), options)
        ingest.start()
        try:

            async def send(payload: bytes) -> int:
                return (await ingest.ingest(payload, "application/x-protobuf")).stored

            assert asyncio.run(send(body)) == 800
            filler = _fill(disk, 4096)
            with pytest.raises(StoreError):
                store.checkpoint()  # fails for want of space: DuckDB invalidates the database
            deadline = time.monotonic() + 30
            while ingest.store_health().state == "ok" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ingest.store_health().state == "unavailable"
            filler.unlink()
            while ingest.store_health().state != "ok" and time.monotonic() < deadline + 30:
                time.sleep(0.05)
            health = ingest.store_health()
            assert health.state == "ok" and health.reopens == 1
            assert ingest.writing
            assert asyncio.run(send(body)) == 0  # a retry: known after the reopen too
            assert asyncio.run(send(protobuf_body(make_spans(2, prefix="after")))) == 8
        finally:
            ingest.close()
        assert store.connection.execute("SELECT count(*) FROM spans").fetchone() == (808,)


def test_sigterm_does_not_wait_for_slow_senders(tmp_path: Path) -> None:
    db = tmp_path / "term.duckdb"
    server = ServeProcess(db)
    slow = [_SlowBody(server.otlp, 4 << 20, burst=100) for _ in range(3)]
    try:
        assert post_traces(server.otlp, protobuf_body(make_spans(3, prefix="t")))[0] == 200
        time.sleep(0.5)
        assert server.stop(timeout_s=60) == 0
        # Not held for the 60 s body timeout (nor cut by uvicorn's 30 s graceful wait): the slow
        # bodies are answered 503 as shutdown begins, and their senders retry.
        for s in slow:
            deadline = time.monotonic() + 10
            while s.status is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert s.status == 503 and b"shutting down" in s.answer
    finally:
        for s in slow:
            s.close()
        server.kill()
    assert store_rows(db, "SELECT count(*) FROM runs") == [(3,)]
