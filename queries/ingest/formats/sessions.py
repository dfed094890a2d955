"""Coding agents' sessions → the rows ``loopwatch import`` stores (docs/import.md, "Speed").

The work of one file — parse, read into spans (:mod:`.coding`), rebuild runs, derive stops,
replay, records, the Arrow batch — needs nothing of any other file, so files are read in chunks:
in this process, or in worker processes when the import is large and the machine has cores to
spare (:func:`sessions_in_workers`), each chunk sent back as Arrow IPC bytes, in order, while
this process writes the chunks before it.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import importlib.abc
import json
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits, resolve_limits

from ...store.columns import SpanBatch, SpanRecord
from ...store.ipc import table_bytes, table_from_bytes
from ..foreign.reconstruct import runs_of_trace
from ..foreign.rows import run_record, span_records
from ..importer import IMPORT_SOURCE, ImportSummary
from .coding import TASK_LABEL, LogBuilder, claude_code, openhands, swe_agent

__all__ = [
    "WORKERS_FROM_BYTES", "Chunk", "SessionJob", "chunks", "merge_summary", "prepare_worker",
    "read_chunk", "read_file", "report_bad", "sessions_in_workers", "workers_for",
]  # fmt: skip

WORKERS_FROM_BYTES: Final = 8 << 20
"""Imports of fewer bytes are read in this process: starting workers would cost more."""
_CHUNK_BYTES: Final = 2 << 20
_CHUNK_FILES: Final = 200
_REPORTED: Final = 50


@dataclass(frozen=True, slots=True)
class SessionJob:
    """What reading a chunk of files needs (sent to worker processes as it is)."""

    fmt: str
    task_type: str
    limits: LimitPolicy | LoopLimits | None
    base_ns: int
    """Each file's spans start at ``base_ns`` plus a millisecond per file before it."""


@dataclass(slots=True)
class Chunk:
    """One chunk of files read: what was found, and its runs as a batch (or records)."""

    summary: ImportSummary
    size: int = 0
    """Bytes of the logs read."""
    ids: list[str] = field(default_factory=list)
    records: list[SpanRecord] = field(default_factory=list)
    batch: SpanBatch | None = None


def chunks(files: Sequence[Path]) -> Iterator[list[tuple[int, Path]]]:
    """The files (with their positions) in chunks of about 2 MB."""
    chunk: list[tuple[int, Path]] = []
    size = 0
    for index, file in enumerate(files):
        chunk.append((index, file))
        with contextlib.suppress(OSError):  # reported when it is read
            size += file.stat().st_size
        if size >= _CHUNK_BYTES or len(chunk) >= _CHUNK_FILES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def read_file(path: Path) -> bytes:
    """A log file's bytes (a ``.gz`` file inflated)."""
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as zipped:
            return zipped.read()
    return path.read_bytes()


def report_bad(summary: ImportSummary, position: str, reason: str) -> None:
    """Count a malformed file, line or session and keep its report (the first 50)."""
    summary.bad += 1
    if len(summary.bad_records) < _REPORTED:
        summary.bad_records.append(f"{position}: {reason}")


def _lines(raw: bytes, where: str, summary: ImportSummary) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            report_bad(summary, f"{where} line {number}", f"not JSON ({exc})")


def _session(fmt: str, file: Path, raw: bytes, builder: LogBuilder, summary: ImportSummary) -> bool:
    """Read one file's session into ``builder``; ``False`` (reported) when it is malformed."""
    where = str(file)
    if fmt == "claude-code":
        for problem in claude_code(_lines(raw, where, summary), builder):
            summary.problems += 1
            if len(summary.problem_list) < _REPORTED:
                summary.problem_list.append(f"{where} {problem}")
        return True
    try:
        data = json.loads(raw)
    except ValueError as exc:
        if fmt != "openhands":
            report_bad(summary, where, f"not JSON ({exc})")
            return False
        data = [event for _, event in _lines(raw, where, summary)]  # JSONL of events
    try:
        (swe_agent if fmt == "swe-agent" else openhands)(data, builder)
    except ValueError as exc:
        report_bad(summary, where, str(exc))
        return False
    return True


def read_chunk(job: SessionJob, files: Sequence[tuple[int, Path]]) -> Chunk:
    """Read, rebuild and replay each file's session; the records of the runs and their ids."""
    chunk = Chunk(ImportSummary(path="", layout=job.fmt))
    summary = chunk.summary
    cache: dict[str, LoopLimits] = {}

    def limits_for(task: str) -> LoopLimits:
        if task not in cache:
            cache[task] = resolve_limits(job.limits, task)
        return cache[task]

    for index, file in files:
        summary.records += 1
        raw = read_file(file)
        chunk.size += len(raw)
        identity = f"{job.fmt}:{file.resolve()}"
        builder = LogBuilder(identity, job.base_ns + index * 10**6, job.task_type, job.fmt)
        if not _session(job.fmt, file, raw, builder, summary):
            continue
        summary.conversations += 1
        summary.messages += len(builder.views)
        summary.labels["unlabeled"] += 1
        runs = runs_of_trace(builder.views, (TASK_LABEL,), limits_for)
        if not runs:
            summary.empty_conversations += 1
        for run in runs:
            chunk.ids.append(run.run_id)
            chunk.records.append(run_record(run))
            chunk.records += span_records(run)
            summary.runs += 1
            summary.task_types[run.task_type] += 1
            summary.decisions[run.replay.decision] += 1
            summary.loop_ends[run.stop.reason] += 1
    return chunk


def merge_summary(into: ImportSummary, part: ImportSummary) -> None:
    """Add what one chunk found to the import's summary (the first 50 reports kept)."""
    for name in ("records", "conversations", "runs", "messages", "bad", "problems",
                 "empty_conversations"):  # fmt: skip
        setattr(into, name, getattr(into, name) + getattr(part, name))
    into.bad_records += part.bad_records[: _REPORTED - len(into.bad_records)]
    into.problem_list += part.problem_list[: _REPORTED - len(into.problem_list)]
    for counter in ("labels", "task_types", "decisions", "loop_ends"):
        getattr(into, counter).update(getattr(part, counter))


# --- worker processes ----------------------------------------------------------------------------


def workers_for(files: Sequence[Path], requested: int | None) -> int:
    """How many worker processes read ``files``: ``requested`` (0: none), else one per core
    the process may run on (at most 4) when there are 2 or more and the files hold at least
    :data:`WORKERS_FROM_BYTES`; none where processes cannot be forked (not Linux)."""
    if not sys.platform.startswith("linux") or len(files) < 2:
        return 0
    if requested is not None:
        return max(requested, 0)
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        return 0
    size = 0
    for file in files:
        size += file.stat().st_size if file.is_file() else 0
        if size >= WORKERS_FROM_BYTES:
            return min(cores, 4)
    return 0


_Wire = tuple[ImportSummary, int, list[str], bytes | None, bytes | None, int]


def _read_for_wire(job: SessionJob, files: list[tuple[int, Path]]) -> _Wire:
    """In a worker: :func:`read_chunk`, its batch built and sent as Arrow IPC bytes."""
    chunk = read_chunk(job, files)
    batch = SpanBatch.from_records(chunk.records, source=IMPORT_SOURCE)
    return (
        chunk.summary,
        chunk.size,
        chunk.ids,
        table_bytes(batch.spans),
        table_bytes(batch.runs),
        batch.count,
    )


def sessions_in_workers(job: SessionJob, files: Sequence[Path], workers: int) -> Iterator[Chunk]:
    """The chunks of ``files`` read by ``workers`` forked processes, in the files' order; at
    most two chunks per worker are read ahead of the caller (memory stays bounded)."""
    # fork: a worker starts with the modules this process imported (a fresh interpreter would
    # import them again, ~0.7 s) and touches nothing but its files and its pipe.
    context = multiprocessing.get_context("fork")
    # What exists now is never garbage in a worker: frozen, the collector neither scans it nor
    # writes to its pages (which a forked process would then copy).
    gc.freeze()
    try:
        pool = context.Pool(workers, initializer=prepare_worker)
    finally:
        gc.unfreeze()
    with pool:
        pending: deque[Any] = deque()
        for part in chunks(files):
            pending.append(pool.apply_async(_read_for_wire, (job, part)))
            if len(pending) >= 2 * workers:
                yield _from_wire(pending.popleft().get())
        while pending:
            yield _from_wire(pending.popleft().get())


class _WithoutPandas(importlib.abc.MetaPathFinder):
    """A worker's import of pandas fails (as if it were not installed). pyarrow's ``pa.array``
    of a list imports pandas only to ask whether the list is a pandas object: ~0.3 CPU s per
    worker and import (its first chunk cost 7 times the next), and nothing a worker does needs
    pandas."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name} is not imported in import workers", name=name)


def prepare_worker() -> None:
    """What a worker process does first: ignore Ctrl-C (the importing process stops it) and
    refuse to import pandas (:class:`_WithoutPandas`), unless it was imported before the fork."""
    # A Ctrl-C reaches the whole process group: the importing process stops its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "pandas" not in sys.modules:  # imported before the fork, it costs a worker nothing
        sys.meta_path.insert(0, _WithoutPandas())


def _from_wire(wire: _Wire) -> Chunk:
    summary, size, ids, spans, runs, count = wire
    batch = SpanBatch(spans=table_from_bytes(spans), runs=table_from_bytes(runs), count=count)
    return Chunk(summary, size, ids, batch=batch)
