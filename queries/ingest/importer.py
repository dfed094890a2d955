"""``loopwatch import``: recorded chat logs → runs in the store, replayed through the guard.

For every run of every conversation (:mod:`~loopwatch.queries.ingest.chatlogs` says what a run is):

1. The run is replayed through the real :class:`~loopwatch.instrumentation.runtime.guard.LoopGuard`
   under the given limits, its recorded model calls and tool results fed in order: what the
   guard would have done — the stop reason and the step, or that it would have let the run
   finish — and how much of the recorded spend that stop would have saved.
2. The recorded run is fed to the detectors with every threshold off
   (:func:`~loopwatch.instrumentation.runtime.detectors.replay_peaks`): each detector's peak
   evidence,
   so that the false-stop rate of any threshold can be read from the store later.
3. The run goes to the store through the one write path, as a run span (``source = 'import'``)
   with its recorded usage and length, its recorded loop end, its task label and the replay,
   plus one tool span per tool call (fingerprints, status, error code), so every query that
   reads tool spans works on imported runs too.

Runs get ids derived from their conversation (its id, or a digest of its record) and their
position in it, so importing the same file again replaces the runs instead of adding them
(their spans are replaced too). The file is streamed (:mod:`~loopwatch.queries.ingest.jsonstream`):
memory holds one record and one batch of runs, whatever the file's size.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from loopwatch.instrumentation.runtime import semconv as sc
from loopwatch.instrumentation.runtime.guard import Action, LoopGuard
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits, resolve_limits
from loopwatch.instrumentation.runtime.observer import NOOP_OBSERVER
from loopwatch.instrumentation.runtime.reasons import LIMIT_OF, OUTCOME_OF, StopReason
from loopwatch.instrumentation.runtime.replay import RecordedStep, call_fingerprints, replay_peaks
from loopwatch.instrumentation.runtime.tools import ToolOutcome
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, Usage

from ..store.columns import SpanBatch, SpanRecord
from ..store.database import Store
from .chatlogs import (
    ChatLogError,
    ChatLogOptions,
    Conversation,
    RecordedRun,
    field_value,
    parse_conversation,
)
from .error_rules import ErrorRuleScan
from .jsonstream import BadRecord, JsonRecord, Layout, RecordReader
from .labels import ImportOptionError, SuccessField, end_label

__all__ = [
    "DETECTOR_PEAK_PREFIX",
    "FINISH",
    "IMPORT_SOURCE",
    "REPLAY_EXPLANATION",
    "REPLAY_SAVED_PREFIX",
    "REPLAY_STEP",
    "REPLAY_STOP_REASON",
    "ImportOptionError",
    "ImportOptions",
    "ImportSummary",
    "ProgressCallback",
    "RunReplay",
    "end_label",
    "import_chat_log",
    "replay_run",
]

IMPORT_SOURCE: Final = "import"
"""The ``runs.source`` of imported runs (live runs have ``otel``)."""
REPLAY_STOP_REASON: Final = sc.REPLAY_STOP_REASON
"""Run span attribute: the stop reason the guard would have stopped the recorded run with;
``finish`` when it would have let the run end as recorded."""
REPLAY_STEP: Final = sc.REPLAY_STEP
"""Run span attribute: the step the guard would have stopped at (the run's last step when
it would have let it finish)."""
REPLAY_EXPLANATION: Final = sc.REPLAY_EXPLANATION
"""Run span attribute: the guard's explanation of the would-be stop."""
REPLAY_SAVED_PREFIX: Final = sc.REPLAY_SAVED_PREFIX
"""Run span attributes ``loopwatch.replay.saved.<budget>``: recorded usage past the would-be
stop (steps, model_calls, tool_calls, tokens), 0 when it would have finished."""
DETECTOR_PEAK_PREFIX: Final = sc.REPLAY_PEAK_PREFIX
"""Run span attributes ``loopwatch.replay.peak.<detector>``: the detector's highest evidence
count over the whole recorded run (a threshold N would have stopped it iff peak ≥ N)."""
FINISH: Final = "finish"
"""The replay's decision when the guard would have let the run end as recorded."""
_RUN_INDEX: Final = "loopwatch.import.run_index"
_AGENT: Final = "imported"
_SAVED_BUDGETS: Final = ("steps", "model_calls", "tool_calls", "tokens")


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportOptions:
    """What to read and how to replay it."""

    chat: ChatLogOptions = field(default_factory=ChatLogOptions)
    """How records are read (format, messages key, task type, success label, error rule)."""
    limits: LimitPolicy | LoopLimits | None = None
    """The limits to replay under; default: ``$LOOPWATCH_LIMITS``, else ``LoopLimits()``."""
    layout: Layout = "auto"
    """The file's layout (JSONL, array, object); ``auto`` decides."""
    batch_runs: int = 2000
    """Runs written per store transaction."""
    checkpoint_mb: int | None = 64
    """The store's checkpoint threshold while importing (restored after; ``None``: leave it).
    Fewer, larger checkpoints write the same data in less time, at the cost of up to this much
    write-ahead log held in memory."""
    memory_mb: int | None = 192
    """DuckDB's memory limit while importing (restored after; ``None``: leave it). Without it
    DuckDB keeps the blocks it writes cached up to 80% of RAM, so the import's memory would
    grow with the file; with it, the import runs in about the same memory at any size."""
    max_reported: int = 50
    """Bad records and problems kept (with their position) in the summary; the rest counted."""

    def __post_init__(self) -> None:
        if self.batch_runs < 1:
            raise ValueError(f"batch_runs must be at least 1, got {self.batch_runs!r}")
        for name in ("checkpoint_mb", "memory_mb"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value!r}")
        if self.max_reported < 0:
            raise ValueError(f"max_reported must be at least 0, got {self.max_reported!r}")


@dataclass(frozen=True, slots=True)
class RunReplay:
    """What the guard would have done to one recorded run."""

    stop_reason: StopReason | None
    """The stop it would have made; ``None`` when it would have let the run finish."""
    step: int
    """The step of the stop (the run's last step when it would have finished)."""
    explanation: str
    saved: dict[str, float]
    """Recorded usage past the stop, per budget (steps, model_calls, tool_calls, tokens when
    recorded); zeros when it would have finished."""
    peaks: dict[str, int]
    """Each detector's peak evidence over the whole recorded run."""

    @property
    def decision(self) -> str:
        """The stop reason's value, or ``finish``."""
        return FINISH if self.stop_reason is None else self.stop_reason.value


@dataclass(slots=True)
class ImportSummary:
    """What an import read, stored and found."""

    path: str
    layout: str = ""
    records: int = 0
    """Records read (conversations and malformed ones)."""
    conversations: int = 0
    """Conversations imported."""
    runs: int = 0
    messages: int = 0
    replaced: int = 0
    """Runs already in the store (imported before), replaced."""
    bad: int = 0
    """Records skipped as malformed or not conversations."""
    bad_records: list[str] = field(default_factory=list)
    """``record 12 (line 345): why``, up to ``max_reported``."""
    problems: int = 0
    """Odd messages skipped inside imported conversations."""
    problem_list: list[str] = field(default_factory=list)
    truncated: bool = False
    """The file ends early: inside a record, or a .gz file cut short or damaged."""
    task_type_source: str = ""
    """How task types were found: ``field 'x'``, ``value 'x'`` or ``default``."""
    hint: str = ""
    """Said once instead of per record, e.g. every record keeps its messages under another key."""
    error_rules: ErrorRuleScan = field(default_factory=ErrorRuleScan)
    """Tool results classified as errors, and candidate error rules (docs/import.md)."""
    labels: Counter[str] = field(default_factory=Counter)
    """Conversations by task label: ``success``, ``failure``, ``unlabeled``."""
    decisions: Counter[str] = field(default_factory=Counter)
    """Runs by what the guard would have done (``finish`` or a stop reason)."""
    loop_ends: Counter[str] = field(default_factory=Counter)
    """Runs by how the recorded loop ended."""
    task_types: Counter[str] = field(default_factory=Counter)
    """Runs by task type."""
    empty_conversations: int = 0
    """Conversations with no run (no model call answered a user message)."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "layout": self.layout,
            "records": self.records,
            "conversations": self.conversations,
            "runs": self.runs,
            "messages": self.messages,
            "replaced": self.replaced,
            "bad": self.bad,
            "bad_records": list(self.bad_records),
            "problems": self.problems,
            "problem_list": list(self.problem_list),
            "truncated": self.truncated,
            "hint": self.hint,
            "error_rules": self.error_rules.to_dict(),
            "task_type_source": self.task_type_source,
            "labels": dict(self.labels),
            "decisions": dict(self.decisions),
            "loop_ends": dict(self.loop_ends),
            "task_types": dict(self.task_types),
            "empty_conversations": self.empty_conversations,
            "seconds": self.seconds,
        }


def _zero_clock() -> float:
    return 0.0


def _answered(run: RecordedRun) -> list[list[ToolOutcome]]:
    # Each answered call's record, built once: the guard is fed it, and so is replay_peaks.
    return [
        [
            ToolOutcome(
                call=t.call,
                ok=t.error_code is None,
                content=t.content,
                error_code=t.error_code,
                error_message=t.error_message,
                attempts=1,
            )
            for t in turn.tools
            if t.content is not None
        ]
        for turn in run.turns
    ]


def replay_run(
    run: RecordedRun,
    limits: LoopLimits,
    *,
    task_type: str = "default",
    run_id: str = "replay",
) -> RunReplay:
    """Replay one recorded run through a :class:`LoopGuard` under ``limits``.

    The recorded model calls and tool results are fed in order, exactly as the reference loop
    would feed them; the guard's first stop is the answer. Recorded logs have no clock, so
    ``max_wall_s`` is not replayed. A tool call the log holds no result for is let through
    and not answered.
    """
    guard = LoopGuard(
        limits, task_type=task_type, run_id=run_id, observer=NOOP_OBSERVER, clock=_zero_clock
    )
    guard.start()
    outcomes = _answered(run)
    for turn, records in zip(run.turns, outcomes, strict=True):
        answered = iter(records)
        if guard.before_step().done:
            break
        calls = tuple(t.call for t in turn.tools)
        response = ModelResponse(
            Message("assistant", turn.text, calls),
            turn.finish_reason or ("tool_calls" if calls else None),
            Usage(turn.input_tokens or 0, turn.output_tokens or 0),
            turn.model,
        )
        d = guard.after_model(response)
        if d.action is Action.RUN_TOOLS:
            for t in turn.tools:
                if guard.before_tool(t.call).done:
                    break
                if t.content is None:
                    continue
                if guard.after_tool(t.call, next(answered)).done:
                    break
        if guard.end_step().done:
            break
    decision = guard.decision
    if decision is None or decision.reason is StopReason.COMPLETED:
        # The guard's own detectors heard the whole run: their peaks are the run's.
        peaks = guard.detectors.peaks()
    else:
        steps = [RecordedStep(k, records) for k, records in enumerate(outcomes, 1)]
        peaks = replay_peaks(steps, count_calls_only=limits.count_calls_only)
    recorded = {
        "steps": float(len(run.turns)),
        "model_calls": float(run.model_calls),
        "tool_calls": float(run.tool_calls),
    }
    tokens = run.tokens
    if tokens is not None:
        recorded["tokens"] = float(tokens)
    if decision is None or decision.reason is None or decision.reason is StopReason.COMPLETED:
        return RunReplay(None, len(run.turns), "", dict.fromkeys(recorded, 0.0), peaks)
    used = guard.counters()
    saved = {b: max(v - float(used[b]), 0.0) for b, v in recorded.items()}
    return RunReplay(decision.reason, guard.steps, decision.explanation, saved, peaks)


def _hex(*parts: str, size: int) -> str:
    h = hashlib.blake2b(digest_size=size)
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def _run_records(
    conv: Conversation,
    run: RecordedRun,
    run_id: str,
    limits: LoopLimits,
    replay: RunReplay,
    start_ns: int,
) -> list[SpanRecord]:
    trace_id = run_id
    run_span_id = run_id[:16]
    loop_end, loop_text = run.loop_end(run is conv.runs[-1])
    attrs: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
        sc.GEN_AI_AGENT_NAME: _AGENT,
        sc.RUN_ID: run_id,
        sc.TASK_TYPE: conv.task_type,
        sc.CONVERSATION_ID: conv.id,
        "gen_ai.conversation.id": conv.id,
        _RUN_INDEX: run.index,
        sc.STOP_REASON: loop_end.value,
        sc.OUTCOME: OUTCOME_OF[loop_end].value,
        sc.LIMITS_VERSION: limits.version,
        sc.budget_used("steps"): float(len(run.turns)),
        sc.budget_used("model_calls"): float(run.model_calls),
        sc.budget_used("tool_calls"): float(run.tool_calls),
        sc.PROGRESS_MAX_SAME_CALL: replay.peaks.get(StopReason.REPEATED_TOOL_CALL.value, 0),
        sc.PROGRESS_MAX_SAME_ERROR: replay.peaks.get(StopReason.REPEATED_ERROR.value, 0),
        REPLAY_STOP_REASON: replay.decision,
        REPLAY_STEP: replay.step,
    }
    limit = LIMIT_OF.get(loop_end)
    if limit is not None:
        attrs[sc.LIMIT] = limit
    if loop_text:
        attrs[sc.STOP_EXPLANATION] = loop_text
    if replay.explanation:
        attrs[REPLAY_EXPLANATION] = replay.explanation
    tokens = run.tokens
    if tokens is not None:
        tin = sum(t.input_tokens or 0 for t in run.turns)
        attrs[sc.budget_used("tokens")] = float(tokens)
        attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = tin
        attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = tokens - tin
    for b in sc.BUDGETS:
        value = limits.limit_of(b)
        if value is not None:
            attrs[sc.budget_limit(b)] = float(value)
    for b, v in replay.saved.items():
        attrs[REPLAY_SAVED_PREFIX + b] = v
    for name, peak in replay.peaks.items():
        attrs[DETECTOR_PEAK_PREFIX + name] = peak
    if conv.success is not None:
        attrs[sc.TASK_SUCCESS] = conv.success
    n_tools = run.tool_calls
    end_ns = start_ns + 1000 * (n_tools + 1)
    records = [
        SpanRecord(
            trace_id=trace_id,
            span_id=run_span_id,
            name=f"{sc.SPAN_RUN} {_AGENT}",
            start_ns=start_ns,
            end_ns=end_ns,
            status_code="UNSET",
            service=IMPORT_SOURCE,
            attributes=attrs,
        )
    ]
    k = 0
    for step, turn in enumerate(run.turns, 1):
        for t in turn.tools:
            k += 1
            call, code, text = t.call, t.error_code, t.content or ""
            fps = call_fingerprints(call.name, call.arguments, text, code, t.error_message)
            tattrs: dict[str, Any] = {
                sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                sc.GEN_AI_TOOL_NAME: call.name,
                sc.GEN_AI_TOOL_CALL_ID: call.id,
                sc.RUN_ID: run_id,
                sc.TASK_TYPE: conv.task_type,
                sc.STEP_INDEX: step,
                sc.TOOL_FINGERPRINT: fps[0],
            }
            if t.content is not None:
                tattrs[sc.RESULT_FINGERPRINT] = fps[1]
                tattrs[sc.TOOL_STATUS] = "ok" if t.error_code is None else "error"
            if t.error_code is not None:
                tattrs[sc.ERROR_CODE] = t.error_code
                tattrs[sc.ERROR_FINGERPRINT] = fps[2]
                tattrs[sc.ERROR_TYPE] = t.error_code
            records.append(
                SpanRecord(
                    trace_id=trace_id,
                    span_id=f"{k:016x}",  # unique in the run's own trace
                    name=f"{sc.SPAN_TOOL} {call.name}",
                    start_ns=start_ns + 1000 * k,
                    end_ns=start_ns + 1000 * k + 500,
                    parent_span_id=run_span_id,
                    status_code="ERROR" if t.error_code is not None else "UNSET",
                    service=IMPORT_SOURCE,
                    attributes=tattrs,
                )
            )
    return records


ProgressCallback = Callable[[int, int, int], None]
"""Called now and then with (bytes read, file size, runs imported)."""


class _Writer:
    """Buffers runs' span records and writes them in batches, replacing runs stored before.

    Batches are written by one background thread, so that DuckDB's insert and checkpoints
    (which release the GIL and wait on the disk) overlap with reading and replaying the next
    batch. At most one batch waits while another is written: memory stays bounded.
    """

    def __init__(self, store: Store, summary: ImportSummary, batch_runs: int) -> None:
        self.store = store
        self.summary = summary
        self.batch_runs = batch_runs
        self.records: list[SpanRecord] = []
        self.run_ids: list[str] = []
        self.before_first_write: Callable[[], None] | None = None
        self._queue: queue.Queue[tuple[list[SpanRecord], list[str]] | None] = queue.Queue(1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name="loopwatch-import-writer", daemon=True
        )
        self._thread.start()

    def add(self, run_id: str, records: list[SpanRecord]) -> None:
        self.run_ids.append(run_id)
        self.records.extend(records)
        if len(self.run_ids) >= self.batch_runs:
            self.flush()

    def flush(self) -> None:
        self._raise()
        if not self.run_ids:
            return
        if self.before_first_write is not None:  # may refuse: nothing is written then
            self.before_first_write()
            self.before_first_write = None
        self._queue.put((self.records, self.run_ids))
        self.records = []
        self.run_ids = []

    def close(self) -> None:
        """Write what is buffered, wait for the writer, and raise its error if it had one."""
        try:
            self.flush()
        finally:
            self._queue.put(None)
            self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue  # a failed write: drop the rest, the caller raises the first error
            try:
                self._write(*item)
            except BaseException as exc:
                self._error = exc

    def _write(self, records: list[SpanRecord], run_ids: list[str]) -> None:
        ids = list(dict.fromkeys(run_ids))
        con = self.store.cursor()
        try:
            # A scan of the stored run ids (~2 ms per batch at 500k stored runs, ~22 ms at 5M),
            # in this thread, alongside the reading and replaying of the next batch.
            known = [
                r[0]
                for r in con.execute(
                    "SELECT DISTINCT run_id FROM runs "
                    "WHERE run_id IN (SELECT unnest($ids::VARCHAR[]))",
                    {"ids": ids},
                ).fetchall()
            ]
        finally:
            con.close()
        batch = replace(SpanBatch.from_records(records, source=IMPORT_SOURCE), new_runs=True)
        # A re-import writes its runs and their spans again: the old ones go in the same
        # transaction (a failed write keeps them).
        self.store.write(batch, replacing=known)
        self.summary.replaced += len(known)


def _say_once(summary: ImportSummary, misplaced: Counter[str]) -> None:
    # records whose messages sit under another key: the hint said once, not once per record
    if misplaced and summary.conversations == 0:
        (under, n), *_ = misplaced.most_common(1)
        every = "every record keeps" if n == summary.bad else f"{n:,} records keep"
        summary.hint = f"{every} its messages under {under!r}: add --messages {under}"
        summary.bad_records = summary.bad_records[:1]


def _task_type_mode(first: Any, options: ChatLogOptions) -> tuple[bool, str]:
    if options.task_type is None:
        return False, f"default ({options.default_task_type!r})"
    found, _ = field_value(first if isinstance(first, dict) else {}, options.task_type)
    if found:
        return True, f"field {options.task_type!r}"
    return False, f"value {options.task_type!r} (no field of that name in the first conversation)"


def import_chat_log(
    path: str | Path,
    store: Store,
    options: ImportOptions = ImportOptions(),
    *,
    progress: ProgressCallback | None = None,
) -> ImportSummary:
    """Import the conversations of ``path`` into ``store``; returns what was read and found.

    Malformed records are skipped and listed (with their position) in the summary; nothing
    else is lost. Raises :class:`OSError` when the file cannot be opened and
    :class:`~loopwatch.queries.store.StoreError` when the store cannot be written.
    """
    with _fewer_collections():
        return _import(path, store, options, progress)


def _import(
    path: str | Path, store: Store, options: ImportOptions, progress: ProgressCallback | None
) -> ImportSummary:
    t0 = time.perf_counter()
    summary = ImportSummary(path=str(path))
    chat = options.chat
    reader = RecordReader(path, layout=options.layout, record_keys=frozenset({chat.messages_key}))
    restore = _import_settings(store, options)
    writer = _Writer(store, summary, options.batch_runs)
    limits_cache: dict[str, LoopLimits] = {}
    field_mode: bool | None = None
    misplaced: Counter[str] = Counter()  # records whose messages sit under another key
    labels = SuccessField(chat)
    writer.before_first_write = labels.check
    base_ns = time.time_ns()
    last_progress = 0.0

    def limits_for(task_type: str) -> LoopLimits:
        lim = limits_cache.get(task_type)
        if lim is None:
            lim = limits_cache[task_type] = resolve_limits(options.limits, task_type)
        return lim

    def note_bad(position: str, reason: str) -> None:
        summary.bad += 1
        if len(summary.bad_records) < options.max_reported:
            summary.bad_records.append(f"{position}: {reason}")

    try:
        for item in _records(reader):
            summary.records += 1
            if isinstance(item, BadRecord):
                note_bad(item.position, item.reason)
                if item.fatal and ("truncated" in item.reason or "gzip file" in item.reason):
                    summary.truncated = True
                continue
            labels.note(item.value)
            if field_mode is None:
                field_mode, summary.task_type_source = _task_type_mode(item.value, chat)
            position = _position(item)
            try:
                conv = parse_conversation(
                    item.value,
                    chat,
                    key=item.key,
                    digest=item.digest,
                    task_type_is_field=field_mode,
                )
            except ChatLogError as exc:
                note_bad(position, str(exc))
                if exc.messages_under is not None:
                    misplaced[exc.messages_under] += 1
                continue
            except RecursionError:
                note_bad(position, "nested too deeply")
                continue
            summary.conversations += 1
            summary.messages += conv.messages
            summary.labels[
                "unlabeled" if conv.success is None else "success" if conv.success else "failure"
            ] += 1
            for p in conv.problems:
                summary.problems += 1
                if len(summary.problem_list) < options.max_reported:
                    summary.problem_list.append(f"{position}, {p}")
            if not conv.runs:
                summary.empty_conversations += 1
            identity = conv.id if _has_identity(item, chat) else item.digest
            limits = limits_for(conv.task_type)
            for run in conv.runs:
                run_id = _hex("import", identity, str(run.index), size=16)
                replay = replay_run(run, limits, task_type=conv.task_type, run_id=run_id)
                summary.runs += 1
                summary.task_types[conv.task_type] += 1
                summary.decisions[replay.decision] += 1
                summary.loop_ends[end_label(run, run is conv.runs[-1])] += 1
                summary.error_rules.add(run)
                writer.add(
                    run_id,
                    _run_records(conv, run, run_id, limits, replay, base_ns + summary.runs * 10**6),
                )
            if progress is not None:
                now = time.perf_counter()
                if now - last_progress >= 0.2:
                    last_progress = now
                    progress(reader.bytes_read, reader.size, summary.runs)
    except BaseException as exc:
        # Store what was read before the failure (or interrupt); a refused option stores nothing
        if isinstance(exc, ImportOptionError):
            writer.records, writer.run_ids = [], []
        with contextlib.suppress(BaseException):
            writer.close()
        with contextlib.suppress(BaseException):
            restore()
        raise
    try:
        writer.close()
        # Fold the write-ahead log into the file now, under the import's limit: until then up
        # to checkpoint_mb of the last batches is held in memory that DuckDB cannot evict.
        store.checkpoint()
    finally:
        restore()
    summary.layout = reader.layout
    summary.seconds = time.perf_counter() - t0
    _say_once(summary, misplaced)
    if progress is not None:
        progress(reader.size, reader.size, summary.runs)
    return summary


# (DuckDB setting, the ImportOptions and Store attribute that give its size in MB)
_SETTINGS: Final = (("checkpoint_threshold", "checkpoint_mb"), ("memory_limit", "memory_mb"))


def _import_settings(store: Store, options: ImportOptions) -> Callable[[], None]:
    """Apply the import's DuckDB settings; returns what puts the store's own back."""
    chosen = [(name, attr) for name, attr in _SETTINGS if getattr(options, attr) is not None]
    _apply(store, [(name, getattr(options, attr)) for name, attr in chosen])
    return lambda: _apply(store, [(name, getattr(store, attr)) for name, attr in chosen])


def _apply(store: Store, settings: list[tuple[str, int | None]]) -> None:
    con = store.cursor()
    try:
        for name, mb in settings:
            # Setting names cannot be parameters; these are the fixed names of _SETTINGS.
            if mb is None:
                con.execute(f"RESET {name}")
            else:
                con.execute(f"SET {name} = ?", [f"{int(mb)}MB"])
    finally:
        con.close()


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often while importing.

    Reading a record makes a few hundred short-lived objects without cycles; at the default
    threshold (a collection every 700 allocations) the collector costs ~10% of the import.
    Every 50,000 still collects whatever cycles appear; the process's own threshold is put
    back after.
    """
    own = gc.get_threshold()
    gc.set_threshold(max(own[0], 50_000), *own[1:])
    try:
        yield
    finally:
        gc.set_threshold(*own)


def _records(reader: RecordReader) -> Iterator[JsonRecord | BadRecord]:
    with reader:
        yield from reader


def _position(item: JsonRecord) -> str:
    key = f" {item.key!r}" if item.key is not None else ""
    return f"record {item.index}{key} (line {item.line})"


def _has_identity(item: JsonRecord, chat: ChatLogOptions) -> bool:
    """Whether the conversation's id comes from the record (a field or its key), not a digest."""
    if item.key is not None:
        return True
    names: Sequence[str] = (chat.id_field,) if chat.id_field else ("conversation_id", "id")
    return any(field_value(item.value, n)[0] for n in names)
