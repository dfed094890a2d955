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

import gzip
import hashlib
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits, resolve_limits

from ...store.columns import SpanBatch, SpanRecord
from ...store.database import Store
from ..foreign import ForeignOptions, TraceAssembler, views_of
from ..foreign.reconstruct import ForeignRun, runs_of_trace
from ..foreign.rows import derived_table, run_record, span_records
from ..importer import IMPORT_SOURCE, ImportSummary
from ..otlp import CONTENT_TYPE_JSON, OtlpDecodeError, decode_request
from . import CODING_FORMATS, OTLP_JSON, RECORDED_FORMATS
from .coding import TASK_LABEL, LogBuilder, claude_code, openhands, swe_agent

__all__ = ["CODING_FORMATS", "OTLP_JSON", "RECORDED_FORMATS", "import_recorded"]

_SUFFIXES: Final = {"swe-agent": (".traj", ".json"), "openhands": (".json", ".jsonl"),
                    "claude-code": (".jsonl",), OTLP_JSON: (".json", ".jsonl")}  # fmt: skip
_BATCH_RUNS: Final = 500


def _read(path: Path) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as zipped:
            return zipped.read()
    return path.read_bytes()


def _files(path: Path, fmt: str) -> list[Path]:
    if path.is_dir():
        ends = _SUFFIXES[fmt]
        return sorted(
            p for p in path.rglob("*") if p.is_file() and p.name.removesuffix(".gz").endswith(ends)
        )
    return [path]


def _lines(raw: bytes, where: str, summary: ImportSummary) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            _bad(summary, f"{where} line {number}", f"not JSON ({exc})")


def _bad(summary: ImportSummary, position: str, reason: str) -> None:
    summary.bad += 1
    if len(summary.bad_records) < 50:
        summary.bad_records.append(f"{position}: {reason}")


class _Runs:
    """Rebuilt runs buffered and written in batches, replacing the runs imported before.

    A background thread writes each batch (DuckDB's insert releases the GIL), overlapping the
    reading and rebuilding of the next one; at most one batch waits."""

    def __init__(self, store: Store, summary: ImportSummary) -> None:
        self.store, self.summary = store, summary
        self.records: list[SpanRecord] = []
        self.ids: list[str] = []
        self._queue: queue.Queue[tuple[list[SpanRecord], list[str]] | None] = queue.Queue(1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="loopwatch-import-writer")
        self._thread.daemon = True
        self._thread.start()

    def add(self, run: ForeignRun) -> None:
        self.ids.append(run.run_id)
        self.records.append(run_record(run))
        self.records += span_records(run)
        s = self.summary
        s.runs += 1
        s.task_types[run.task_type] += 1
        s.decisions[run.replay.decision] += 1
        s.loop_ends[run.stop.reason] += 1
        if len(self.ids) >= _BATCH_RUNS:
            self.flush()

    def flush(self) -> None:
        if self._error is not None:
            raise self._error
        if self.ids:
            self._queue.put((self.records, self.ids))
            self.records, self.ids = [], []

    def close(self) -> None:
        """Write what is buffered, wait for the writer and raise its error, if any."""
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
                    self._write(*item)
                except BaseException as exc:  # raised in the caller's thread
                    self._error = exc

    def _write(self, records: list[SpanRecord], ids: list[str]) -> None:
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
        self.store.write(SpanBatch.from_records(records, source=IMPORT_SOURCE), replacing=known)
        self.summary.replaced += len(known)


def _session(fmt: str, file: Path, raw: bytes, builder: LogBuilder, summary: ImportSummary) -> bool:
    """Read one file's session into ``builder``; ``False`` (reported) when it is malformed."""
    where = str(file)
    if fmt == "claude-code":
        for problem in claude_code(_lines(raw, where, summary), builder):
            summary.problems += 1
            if len(summary.problem_list) < 50:
                summary.problem_list.append(f"{where} {problem}")
        return True
    try:
        data = json.loads(raw)
    except ValueError as exc:
        if fmt != "openhands":
            _bad(summary, where, f"not JSON ({exc})")
            return False
        data = [event for _, event in _lines(raw, where, summary)]  # JSONL of events
    try:
        (swe_agent if fmt == "swe-agent" else openhands)(data, builder)
    except ValueError as exc:
        _bad(summary, where, str(exc))
        return False
    return True


def _import_coding(
    files: list[Path], store: Store, fmt: str, task_type: str,
    limits_for: Callable[[str], LoopLimits], summary: ImportSummary,
) -> None:  # fmt: skip
    writer = _Runs(store, summary)
    try:
        base = time.time_ns()
        for file in files:
            summary.records += 1
            raw = _read(file)
            builder = LogBuilder(
                f"{fmt}:{file.resolve()}", base + summary.runs * 10**6, task_type, fmt
            )
            if not _session(fmt, file, raw, builder, summary):
                continue
            summary.conversations += 1
            summary.messages += len(builder.views)
            summary.labels["unlabeled"] += 1
            runs = runs_of_trace(builder.views, (TASK_LABEL,), limits_for)
            if not runs:
                summary.empty_conversations += 1
            for run in runs:
                writer.add(run)
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
        raw = _read(file)
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
                _bad(summary, f"{file} line {number}", str(exc))
                continue
            if decoded.rejected:
                _bad(summary, f"{file} line {number}", "; ".join(decoded.reasons))
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
) -> ImportSummary:
    """Import the coding-agent logs or OTLP/JSON trace file(s) at ``path`` (a file or a
    directory) in format ``fmt``; returns what was read and found (malformed files, lines or
    sessions listed by position)."""
    if fmt not in RECORDED_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(RECORDED_FORMATS)}")
    t0 = time.perf_counter()
    root = Path(path)
    summary = ImportSummary(path=str(root), layout=fmt)
    files = _files(root, fmt)
    cache: dict[str, LoopLimits] = {}

    def limits_for(task: str) -> LoopLimits:
        if task not in cache:
            cache[task] = resolve_limits(limits, task)
        return cache[task]

    if fmt == OTLP_JSON:
        summary.task_type_source = "span attributes (docs/foreign.md)"
        _import_otlp(files, store, limits, summary)
    else:
        chosen = task_type or fmt
        summary.task_type_source = f"value {chosen!r}"
        _import_coding(files, store, fmt, chosen, limits_for, summary)
    store.checkpoint()
    summary.seconds = time.perf_counter() - t0
    return summary
