"""``loopwatch import`` of coding-agent logs and OTLP/JSON trace files (docs/import.md).

* Coding-agent logs (``swe-agent``, ``openhands``, ``claude-code``; a file, or a directory of
  them): each session is read by :mod:`.coding` into spans, rebuilt into runs, its stop reasons
  derived and each run replayed exactly as foreign traces are (:mod:`..foreign`), and stored as
  imported runs (``source = 'import'``) with one span per model call and tool call. Run ids come
  from the session's identity, so importing the same files again replaces their runs.
* OTLP/JSON trace files (``otlp-json``): what a Collector's file exporter writes (one
  ``ExportTraceServiceRequest`` per line) or one such request in a file; every span is stored as
  received, and the foreign traces among them are rebuilt into runs (``source = 'foreign'``).
  A line stored before (its digest is in the store's ``deliveries``) is not stored again.

A malformed file, line or session is skipped and reported by position, as for chat logs.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Final

from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits

from ...store.columns import SpanBatch
from ...store.database import Store
from ..foreign import ForeignOptions, TraceAssembler, views_of
from ..foreign.rows import derived_table
from ..importer import IMPORT_SOURCE, ImportSummary, fewer_collections
from ..otlp import CONTENT_TYPE_JSON, OtlpDecodeError, decode_request
from . import CODING_FORMATS, OTLP_JSON, RECORDED_FORMATS
from .sessions import (
    Chunk,
    SessionJob,
    chunks,
    merge_summary,
    read_chunk,
    read_file,
    report_bad,
    sessions_in_workers,
    workers_for,
)

__all__ = ["CODING_FORMATS", "OTLP_JSON", "RECORDED_FORMATS", "import_recorded"]

_WRITE_BYTES: Final = 8 << 20
_SUFFIXES: Final = {"swe-agent": (".traj", ".json"), "openhands": (".json", ".jsonl"),
                    "claude-code": (".jsonl",), OTLP_JSON: (".json", ".jsonl")}  # fmt: skip
_BATCH_RUNS: Final = 500


def _files(path: Path, fmt: str) -> list[Path]:
    if path.is_dir():
        ends = _SUFFIXES[fmt]
        return sorted(
            p for p in path.rglob("*") if p.is_file() and p.name.removesuffix(".gz").endswith(ends)
        )
    return [path]


class _Writer:
    """Chunks of runs written in groups, in order, each replacing the runs imported before.

    A write has a fixed cost (~15 ms of DuckDB's time): chunks are grouped until they hold
    8 MB of logs or 500 runs. A background thread writes each group (DuckDB's insert releases
    the GIL), overlapping the reading of the next; at most one group waits."""

    def __init__(self, store: Store, summary: ImportSummary) -> None:
        self.store, self.summary = store, summary
        self._group: list[Chunk] = []
        self._queue: queue.Queue[list[Chunk] | None] = queue.Queue(1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="loopwatch-import-writer")
        self._thread.daemon = True
        self._thread.start()

    def put(self, chunk: Chunk) -> None:
        """Count what ``chunk`` found and queue its runs (raises the writer's error, if any)."""
        merge_summary(self.summary, chunk.summary)
        if chunk.ids:
            self._group.append(chunk)
        group = self._group
        if sum(c.size for c in group) >= _WRITE_BYTES or sum(len(c.ids) for c in group) >= 500:
            self.flush()

    def flush(self) -> None:
        """Queue the chunks put since the last flush (raises the writer's error, if any)."""
        if self._error is not None:
            raise self._error
        if self._group:
            self._queue.put(self._group)
            self._group = []

    def close(self) -> None:
        """Write what is left, wait for the writer and raise its error, if any."""
        try:
            self.flush()
        finally:
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._write(item)
                except BaseException as exc:  # raised in the caller's thread
                    self._error = exc

    def _write(self, group: list[Chunk]) -> None:
        ids = [run_id for chunk in group for run_id in chunk.ids]
        con = self.store.cursor()
        try:
            known = [
                r[0]
                for r in con.execute(
                    "SELECT DISTINCT run_id FROM runs WHERE run_id IN "
                    "(SELECT unnest($ids::VARCHAR[]))",
                    {"ids": ids},
                ).fetchall()
            ]
        finally:
            con.close()
        batches = [c.batch for c in group if c.batch is not None]
        records = [r for c in group if c.batch is None for r in c.records]
        if records:
            batches.append(SpanBatch.from_records(records, source=IMPORT_SOURCE))
        # The runs stored before are in `known`, removed in the same transaction
        self.store.write(replace(SpanBatch.concat(batches), new_runs=True), replacing=known)
        self.summary.replaced += len(known)


def _import_coding(
    files: list[Path], store: Store, job: SessionJob, workers: int | None,
    summary: ImportSummary,
) -> None:  # fmt: skip
    writer = _Writer(store, summary)
    try:
        n = workers_for(files, workers)
        parts = (
            sessions_in_workers(job, files, n) if n > 0
            else (read_chunk(job, part) for part in chunks(files))
        )  # fmt: skip
        for chunk in parts:
            writer.put(chunk)
    finally:
        writer.close()  # what was read before a failure is stored


def _import_otlp(
    files: list[Path], store: Store, limits: LimitPolicy | LoopLimits | None,
    summary: ImportSummary,
) -> None:  # fmt: skip
    options = ForeignOptions(limits=limits)
    assembler = TraceAssembler(options)
    known = set(store.deliveries_since(0))
    for file in files:
        raw = read_file(file)
        lines = raw.splitlines() if b"\n" in raw.strip() else [raw]
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            summary.records += 1
            key = hashlib.blake2b(line, digest_size=16, person=b"otlp-file").hexdigest()
            if key in known:
                summary.replaced += 1
                continue
            try:
                decoded = decode_request(line, CONTENT_TYPE_JSON)
            except OtlpDecodeError as exc:
                report_bad(summary, f"{file} line {number}", str(exc))
                continue
            if decoded.rejected:
                report_bad(summary, f"{file} line {number}", "; ".join(decoded.reasons))
            store.write(SpanBatch.from_columns(decoded.columns, deliveries=(key,)))
            known.add(key)
            summary.messages += len(decoded.columns)
            assembler.add(views_of(decoded.columns, options.task_type_keys))
    due = assembler.due(everything=True)
    summary.conversations = len(due)
    runs = assembler.build(due)
    for run in runs:
        summary.runs += 1
        summary.task_types[run.task_type] += 1
        summary.decisions[run.replay.decision] += 1
        summary.loop_ends[run.stop.reason] += 1
    if runs:
        store.write_derived(*derived_table(runs))


def import_recorded(
    path: str | Path,
    store: Store,
    fmt: str,
    *,
    task_type: str | None = None,
    limits: LimitPolicy | LoopLimits | None = None,
    workers: int | None = None,
) -> ImportSummary:
    """Import the coding-agent logs or OTLP/JSON trace file(s) at ``path`` (a file or a
    directory) in format ``fmt``; returns what was read and found (malformed files, lines or
    sessions listed by position).

    ``workers``: processes reading coding-agent logs (0: read in this process); by default
    one per core (at most 4) when the logs hold 8 MB or more (docs/import.md, "Speed")."""
    if fmt not in RECORDED_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(RECORDED_FORMATS)}")
    t0 = time.perf_counter()
    root = Path(path)
    summary = ImportSummary(path=str(root), layout=fmt)
    files = _files(root, fmt)
    if fmt == OTLP_JSON:
        summary.task_type_source = "span attributes (docs/foreign.md)"
        _import_otlp(files, store, limits, summary)
    else:
        chosen = task_type or fmt
        summary.task_type_source = f"value {chosen!r}"
        job = SessionJob(fmt, chosen, limits, time.time_ns())
        with fewer_collections():  # worker processes start with the same threshold
            _import_coding(files, store, job, workers, summary)
    store.checkpoint()
    summary.seconds = time.perf_counter() - t0
    return summary
