"""File mode's writer process: a child process that owns the store file and commits batches.

With ``DuckDBSpanExporter(writer="process")`` the exporting process converts each batch of
spans to Arrow and sends it here; this process inserts it and answers once it is committed.
Conversion (Python) and insert (DuckDB) then run on two cores at once, and DuckDB's work,
memory and GIL hand-overs leave the agent's process. See docs/store.md, "Writer process".

Protocol, over the child's stdin and stdout:

- the child answers its start with one JSON line: ``{"ready": PID}``, or ``{"error": TEXT}``
  (then it exits with status 2);
- each batch is a frame: :data:`HEADER` (magic, span count, byte sizes of the two Arrow IPC
  streams: ``spans`` rows, then ``runs`` rows or 0 bytes for none), then the streams;
- each frame gets one JSON line, in order: ``{"ok": COUNT}`` once committed, or
  ``{"failed": TEXT}`` (nothing of that batch stored);
- end of input (the exporter shut down, or its process died) closes the store and exits 0.
  A frame cut short by the sender's death was never acknowledged and is not stored.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

from loopwatch.instrumentation.runtime.extras import MissingExtraError

try:
    import pyarrow  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("store", __name__, exc) from exc

import pyarrow as pa

from .columns import SpanBatch
from .database import Store, StoreError

__all__ = ["HEADER", "MAGIC", "WriterProcess", "main"]

MAGIC: Final = b"LWB1"
"""The first bytes of every frame."""
HEADER: Final = struct.Struct("<4sQQQ")
"""A frame's header: magic, span count, bytes of the spans stream, bytes of the runs stream."""


def _ipc(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return sink.getvalue()


# Not ``-m loopwatch.queries.store.writer``: the package imports this module first, and runpy would
# then run a second copy of it.
_CHILD: Final = (
    "import sys; from loopwatch.queries.store.writer import main; sys.exit(main(sys.argv[1:]))"
)


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    """``size`` bytes, or ``None`` if the input ends first."""
    data = stream.read(size)
    return data if len(data) == size else None


_F_SETPIPE_SZ: Final = 1031  # Linux fcntl
_PIPE_BYTES: Final = 1 << 20


def _widen_pipe(stream: IO[bytes]) -> None:
    """Let the pipe hold a whole batch (1 MB, Linux's default cap for a user) instead of 64 KB:
    a batch then crosses in one or two wake-ups of the reader, not sixteen."""
    with contextlib.suppress(OSError, AttributeError, ValueError):
        import fcntl

        fcntl.fcntl(stream.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)


def _reply(out: IO[bytes], message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


# --- the child --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the writer process: ``main([PATH, "--threads", N, "--checkpoint-mb", M])``."""
    parser = argparse.ArgumentParser(prog="loopwatch-writer")
    parser.add_argument("path")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--checkpoint-mb", type=int, default=None)
    args = parser.parse_args(argv)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # Stdout carries the protocol: anything else printed goes to stderr.
    sys.stdout = sys.stderr
    try:
        store = Store(args.path, threads=args.threads, checkpoint_mb=args.checkpoint_mb)
    except StoreError as exc:
        _reply(out, {"error": str(exc)})
        return 2
    try:
        # Here a failed trial write ends the writer: every batch after it would fail too.
        store.warm_up()
    except StoreError as exc:
        store.close()
        _reply(out, {"error": str(exc)})
        return 2
    _reply(out, {"ready": os.getpid()})
    try:
        while (header := _read_exact(inp, HEADER.size)) is not None:
            magic, count, spans_len, runs_len = HEADER.unpack(header)
            if magic != MAGIC:
                _reply(out, {"failed": f"not a loopwatch batch frame (magic {magic!r})"})
                break
            spans_data = _read_exact(inp, spans_len)
            runs_data = _read_exact(inp, runs_len) if runs_len else b""
            if spans_data is None or runs_data is None:
                break
            try:
                spans = pa.ipc.open_stream(spans_data).read_all()
                runs = pa.ipc.open_stream(runs_data).read_all() if runs_data else None
                store.write(SpanBatch(spans=spans, runs=runs, count=count))
            except Exception as exc:  # the batch is lost, the writer goes on
                _reply(out, {"failed": str(exc) or type(exc).__name__})
            else:
                _reply(out, {"ok": count})
    finally:
        store.close()
    return 0


# --- the parent's handle ----------------------------------------------------------------


class WriterProcess:
    """A running writer process for one store file, as the exporting process sees it.

    Starting it waits (up to ``start_timeout_s``) until the child has opened the store, so a
    locked or corrupt file raises :class:`~loopwatch.queries.store.StoreError` here, with the
    child's own message. :meth:`submit` sends a batch and returns its number; :meth:`wait`
    blocks until that batch is committed (its span count) or raises ``StoreError``. Batches
    are committed in the order submitted. Safe to share between threads.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        checkpoint_mb: int | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.path = Path(path)
        """The store file."""
        command = [sys.executable, "-c", _CHILD, str(self.path)]
        if threads is not None:
            command += ["--threads", str(threads)]
        if checkpoint_mb is not None:
            command += ["--checkpoint-mb", str(checkpoint_mb)]
        # Its own session: a Ctrl-C meant for the agent must not kill the writer before it
        # has committed what it was sent; it exits when its input ends.
        self._proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
        self.pid: int = self._proc.pid
        """The child's process id (DuckDB names it as the file's holder)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin: IO[bytes] = self._proc.stdin
        _widen_pipe(self._stdin)
        self._stdout: IO[bytes] = self._proc.stdout
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._sent = 0
        self._read = 0
        self._answers: dict[int, dict[str, Any]] = {}
        try:
            first = self._first_line(start_timeout_s)
        except StoreError as exc:
            self.kill()
            raise StoreError(
                f"{exc} It failed at start: check that {sys.executable} can import loopwatch "
                "(its own error is on stderr), or use the inline writer.",
                self.path,
            ) from exc
        except BaseException:
            self.kill()
            raise
        if "ready" not in first:
            self.close()
            raise StoreError(str(first.get("error", first)), self.path)

    @property
    def alive(self) -> bool:
        """Whether the child is still running."""
        return self._proc.poll() is None

    def submit(self, batch: SpanBatch) -> int:
        """Send one batch (its ``spans`` and ``runs`` rows); return its number for :meth:`wait`.

        Delivery keys are not sent: file mode has no retried deliveries to recognise.
        """
        if batch.spans is None:
            raise ValueError("a batch for the writer process must hold spans")
        count = batch.count
        first = _ipc(batch.spans)
        second = _ipc(batch.runs) if batch.runs is not None else b""
        with self._send_lock:
            try:
                self._stdin.write(HEADER.pack(MAGIC, count, len(first), len(second)))
                self._stdin.write(first)
                if second:
                    self._stdin.write(second)
                self._stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                raise self.exit_error() from exc
            self._sent += 1
            return self._sent

    def wait(self, number: int) -> int:
        """Block until batch ``number`` is committed and return its span count."""
        with self._read_lock:
            while number not in self._answers:
                if self._read >= self._sent:
                    raise StoreError(f"batch {number} was never sent to the writer", self.path)
                self._read += 1
                self._answers[self._read] = self._read_line()
            answer = self._answers.pop(number)
        if "ok" in answer:
            return int(answer["ok"])
        raise StoreError(str(answer.get("failed", answer)), self.path)

    def close(self, timeout_s: float = 60.0) -> int | None:
        """End the child's input and wait for it to commit, close the file and exit.

        Returns its exit status; a child still running after ``timeout_s`` is killed (what it
        had not committed is lost) and ``None`` returned.
        """
        with self._send_lock, contextlib.suppress(OSError):
            self._stdin.close()
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        finally:
            self._stdout.close()

    def kill(self) -> None:
        """Kill the child at once (uncommitted batches are lost)."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()

    def _read_line(self) -> dict[str, Any]:
        return self._parse(self._stdout.readline())

    def _first_line(self, timeout_s: float) -> dict[str, Any]:
        # A thread, not select(): select() takes no pipes on Windows.
        lines: list[bytes] = []
        reader = threading.Thread(
            target=lambda: lines.append(self._stdout.readline()), name="loopwatch-writer-start"
        )
        reader.daemon = True
        reader.start()
        reader.join(timeout_s)
        if reader.is_alive():
            self.kill()  # which ends the reader's readline
            reader.join()
            raise StoreError(
                f"the writer process for {self.path} did not answer within {timeout_s:g} s.",
                self.path,
            )
        return self._parse(lines[0] if lines else b"")

    def _parse(self, line: bytes) -> dict[str, Any]:
        if not line:
            # Its output closed: it is exiting. Wait for it, so the error gives its status.
            raise self.exit_error(wait_s=5.0)
        try:
            answer = json.loads(line)
        except ValueError as exc:
            raise StoreError(f"the writer process answered {line[:200]!r}", self.path) from exc
        if not isinstance(answer, dict):
            raise StoreError(f"the writer process answered {line[:200]!r}", self.path)
        return answer

    def exit_error(self, wait_s: float = 0.0) -> StoreError:
        """The error that says this writer process is gone (or not answering); ``wait_s``: how
        long to wait for it to exit first (its pipe closes a moment before it is reaped)."""
        code = self._proc.poll()
        if code is None and wait_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self._proc.wait(wait_s)
        status = "is not answering" if code is None else f"exited with status {code}"
        return StoreError(
            f"the writer process {self.pid} for {self.path} {status}: batches it had not "
            "acknowledged are lost; the next export starts a new one.",
            self.path,
        )

    def __repr__(self) -> str:
        return f"WriterProcess({str(self.path)!r}, pid={self.pid}, alive={self.alive})"
