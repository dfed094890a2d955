"""Live mode's ingest: OTLP bodies in, committed batches out, one writer thread owning the store.

:class:`Ingest` is what ``loopwatch serve``'s ``POST /v1/traces`` hands each request to, once the
body is read and decompressed. It decodes the body (in one decoder thread off the event loop, or
in decoder processes with :attr:`IngestOptions.decoders`),
recognises a request it has committed before by the digest of its body (a retry after a lost
acknowledgement: answered without storing anything again), and queues the batch for the writer
thread, which commits whatever is queued in one transaction and then resolves each request's
future: an answer is given only after its spans are committed. Committed spans then feed the
:class:`~loopwatch.instrumentation.MetricsSpanProcessor`, so ``/metrics`` counts what the
store holds, each span once.

Memory is bounded by :attr:`IngestOptions.max_pending_bytes`: each request holds its bytes as
they arrive (:mod:`.admission`), and one that would take them past the cap is
refused (503 with ``Retry-After``); retry keys are kept for :attr:`IngestOptions.dedup_window_s`
only. The writer thread never dies: a failed commit is answered to its requests, and a store
that fails is tried again, or reopened, until it commits (:mod:`.store_state`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor
from loopwatch.queries.ingest.foreign import SpanView, TraceAssembler
from loopwatch.queries.store.columns import SpanBatch
from loopwatch.queries.store.database import Store, StoreError

from .admission import Admission, Hold
from .decoders import Decoded, Observed, decode, decode_for_wire, from_wire, new_executor, warm
from .ingest_metrics import IngestCollector, IngestCounts
from .ingest_options import DEFAULT_DEDUP_WINDOW_S, IngestOptions, IngestResult
from .store_state import StoreHealth, StoreState

__all__ = [
    "DEFAULT_DEDUP_WINDOW_S",
    "Ingest",
    "IngestCollector",
    "IngestCounts",
    "IngestOptions",
    "IngestResult",
]

_log = logging.getLogger("loopwatch.serve")
_DEFAULT_OPTIONS: Final = IngestOptions()  # frozen: one shared default is safe


@dataclass(slots=True)
class _Pending:
    key: str
    batch: SpanBatch
    observed: list[Observed]
    foreign: list[SpanView]
    future: asyncio.Future[bool]
    loop: asyncio.AbstractEventLoop


class Ingest:
    """The live store's only writer; see the module docstring. Call :meth:`start` and
    :meth:`close` from the thread that owns the event loop."""

    def __init__(
        self, store: Store, metrics: MetricsSpanProcessor, options: IngestOptions = _DEFAULT_OPTIONS
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.options = options
        self.counts = IngestCounts()
        self.admission = Admission(options.max_pending_bytes)
        self.store_state = StoreState(options.max_retry_s)
        self._lock = threading.Condition()
        self._queue: list[_Pending] = []
        self._closing = False
        self._draining = False
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._decoder = new_executor(options.decoders)
        self._writer = threading.Thread(target=self._write_loop, name="loopwatch-writer")
        self._writer.daemon = True
        self._last_prune = 0.0
        foreign = options.foreign
        self.foreign = TraceAssembler(foreign) if foreign is not None else None
        self._labels = foreign.task_type_keys if foreign is not None else None

    def start(self) -> None:
        """Load the keys of recently committed requests, start the decoder processes (if any)
        and the writer thread."""
        if self.options.decoders > 0:
            # Pay the processes' start-up (imports) now, not in the first requests.
            warmed = [self._decoder.submit(warm) for _ in range(self.options.decoders)]
            for future in warmed:
                future.result()
        self._load_keys()
        self._writer.start()

    def _load_keys(self) -> None:
        """Remember the requests the store holds from within the window."""
        now = time.time()
        keys = self.store.deliveries_since(int((now - self.options.dedup_window_s) * 1e9))
        with self._lock:
            for key in keys:
                if key not in self._seen:
                    self._seen[key] = now

    # --- admission ---------------------------------------------------------------------------

    def refusal(self) -> str | None:
        """Why a new request is refused before its body is read (answer 503), or ``None``:
        shutting down, the store unavailable (the reason), or the pending cap reached."""
        if self._closing or self._draining:
            return SHUTTING_DOWN
        unavailable = self.store_state.refusal()
        if unavailable is not None:
            return unavailable
        if self.admission.full():
            with self._lock:
                self.counts.refused_busy += 1
            return BUSY
        return None

    def drain(self) -> None:
        """Shutdown begins: refuse new requests and bodies still arriving (503); what is queued
        is still committed and answered."""
        self._draining = True

    @property
    def draining(self) -> bool:
        """Whether shutdown has begun (see :meth:`drain`)."""
        return self._draining

    def hold(self) -> Hold:
        """An empty hold for one request's bytes (see :mod:`.admission`);
        release it once answered."""
        return self.admission.hold()

    def answered(self, status: int) -> None:
        """Count one ``POST /v1/traces`` answer."""
        with self._lock:
            self.counts.answers[status] = self.counts.answers.get(status, 0) + 1

    def snapshot(self) -> tuple[IngestCounts, int]:
        """A consistent copy of the counts, and the pending bytes."""
        with self._lock:
            c = self.counts
            copy = IngestCounts(
                c.requests,
                c.spans_stored,
                c.spans_rejected,
                c.duplicates,
                c.refused_busy + self.admission.refused,
                c.failures,
                dict(c.answers),
            )
            return copy, self.admission.pending

    def store_health(self) -> StoreHealth:
        """Whether the store can commit, as the writer last found it."""
        return self.store_state.snapshot()

    @property
    def writing(self) -> bool:
        """Whether the writer thread runs (it ends only with :meth:`close`)."""
        return self._writer.is_alive()

    @property
    def pending_bytes(self) -> int:
        """Bytes held by requests not yet answered."""
        return self.admission.pending

    # --- a request ---------------------------------------------------------------------------

    async def ingest(self, body: bytes, content_type: str) -> IngestResult:
        """Decode, commit and answer one request body (uncompressed).

        Raises :class:`~loopwatch.queries.ingest.otlp.OtlpDecodeError` for a body that is not an
        OTLP
        request, :class:`StoreError` when the commit failed (nothing of it stored).
        """
        loop = asyncio.get_running_loop()
        key = hashlib.blake2b(body, digest_size=16, person=content_type[:16].encode()).hexdigest()
        with self._lock:
            self.counts.requests += 1
            known = key in self._seen
        if known:
            with self._lock:
                self.counts.duplicates += 1
            return IngestResult(0, 0, "", duplicate=True)
        decoded = await self._decode(body, content_type, key)
        batch = decoded.batch
        message = "; ".join(decoded.reasons)
        if not batch.count:  # nothing to store: nothing to remember either
            with self._lock:
                self.counts.spans_rejected += decoded.rejected
            return IngestResult(0, decoded.rejected, message)
        future: asyncio.Future[bool] = loop.create_future()
        with self._lock:
            if self._closing:
                raise StoreError(SHUTTING_DOWN)
            self._queue.append(
                _Pending(key, batch, decoded.observed, decoded.foreign, future, loop)
            )
            self._lock.notify()
        stored = await future
        with self._lock:
            self.counts.spans_rejected += decoded.rejected
        if not stored:
            return IngestResult(0, decoded.rejected, message, duplicate=True)
        return IngestResult(batch.count, decoded.rejected, message)

    async def _decode(self, body: bytes, content_type: str, key: str) -> Decoded:
        loop = asyncio.get_running_loop()
        decoder = self._decoder
        if isinstance(decoder, concurrent.futures.ThreadPoolExecutor):
            return await loop.run_in_executor(
                decoder, decode, body, content_type, key, self._labels
            )
        try:
            wire = await loop.run_in_executor(
                decoder, decode_for_wire, body, content_type, self._labels
            )
        except concurrent.futures.process.BrokenProcessPool as exc:
            with self._lock:
                if self._decoder is decoder and not self._closing:
                    self._decoder = new_executor(self.options.decoders)
            decoder.shutdown(wait=False)
            raise StoreError("a decoder process died: retry the request") from exc
        return from_wire(wire, key)

    # --- the writer thread -------------------------------------------------------------------

    def _take(self) -> list[_Pending] | None:
        """The next requests to commit; ``None`` once closing and nothing is queued. While
        idle, forgets old retry keys and tries to bring a failed store back."""
        while True:
            with self._lock:
                if self._queue:
                    taken: list[_Pending] = []
                    spans = 0
                    while self._queue and (not taken or spans < self.options.max_batch_spans):
                        item = self._queue.pop(0)
                        taken.append(item)
                        spans += item.batch.count
                    return taken
                if self._closing:
                    return None
                retry = self.store_state.wait_s()
                self._lock.wait(min(1.0, self.options.prune_interval_s, retry or 1.0))
                if self._queue or self._closing:
                    continue
            # Outside the lock: store work must never hold up admission on the event loop.
            self._idle()

    def _write_loop(self) -> None:
        while (items := self._take()) is not None:
            try:
                self._commit(items)
            except BaseException as exc:  # the writer never dies: every request is answered
                _log.exception("loopwatch serve: the writer failed on a batch")
                failure = StoreError(f"spans not committed, retry: {exc}")
                for item in items:
                    _resolve(item, failure)
        self._build_foreign(everything=True)  # shutdown: the traces still pending, as they are

    def _commit(self, items: list[_Pending]) -> None:
        fresh: list[_Pending] = []
        duplicates: list[_Pending] = []
        keys: set[str] = set()
        for item in items:
            if item.key in self._seen or item.key in keys:
                duplicates.append(item)
            else:
                keys.add(item.key)
                fresh.append(item)
        error: BaseException | None = None
        # Taken before the write, so that a key is never remembered past its row in
        # `deliveries` (stamped during the write): both are forgotten at the same prune.
        now = time.time()
        if fresh:
            refusal = self.store_state.refusal()
            try:
                if refusal is not None:
                    raise StoreError(refusal)
                self.store.write(SpanBatch.concat([i.batch for i in fresh]))
            except Exception as exc:  # answered to each request, never lost silently
                error = exc
                if refusal is None:
                    self._store_failed(exc, "a commit failed")
            else:
                self.store_state.succeeded()
        with self._lock:
            if error is None:
                for item in fresh:
                    self._seen[item.key] = now
                    self.counts.spans_stored += item.batch.count
            else:
                self.counts.failures += len(fresh)
            self.counts.duplicates += len(duplicates)
        if error is None:
            # Before the answers: once a sender has its 200, /metrics counts its spans.
            for item in fresh:
                _observe(self.metrics, item.observed)
        for item in fresh:
            _resolve(item, error if error is not None else True)
        for item in duplicates:
            _resolve(item, False)
        if error is None and self.foreign is not None:
            for item in fresh:
                self.foreign.add(item.foreign)
            self._build_foreign()

    def _build_foreign(self, *, everything: bool = False) -> None:
        """Write the runs of the foreign traces final now (docs/foreign.md); a failure is
        logged and never stops ingest (their spans are committed already)."""
        if self.foreign is None or self.store_state.refusal() is not None:
            return
        try:
            tables = self.foreign.tables(everything=everything, paced=True)
            if tables is not None:
                self.store.write_derived(*tables)
        except Exception as exc:  # the writer never dies
            _log.warning("loopwatch serve: could not build foreign runs: %s", exc)

    def _store_failed(self, exc: BaseException, what: str) -> None:
        state = self.store_state.failed(exc)
        _log.warning("loopwatch serve: %s (store %s): %s", what, state, exc)

    def _idle(self) -> None:
        """Between batches: recover a failed store, or forget old retry keys."""
        try:
            wait = self.store_state.wait_s()
            if wait is None:
                self._prune()
                self._build_foreign()
            elif wait <= 0:
                self._recover()
        except Exception as exc:  # the writer never dies
            _log.exception("loopwatch serve: idle store work failed")
            self._store_failed(exc, "idle store work failed")

    def _recover(self) -> None:
        """One attempt to make the store commit again: reopen it when DuckDB invalidated it,
        else a trial commit."""
        reopen = self.store_state.state == "unavailable"
        try:
            if reopen:
                self.store.reopen()
            self.store.probe()
        except Exception as exc:
            self._store_failed(
                exc, "reopening the store failed" if reopen else "a trial commit failed"
            )
            return
        if reopen:
            # A commit answered 503 may have reached the log before DuckDB gave up (a failed
            # checkpoint after it): the reopened file holds it, so its retry must be known.
            self._load_keys()
        if self.store_state.succeeded(reopened=reopen):
            _log.warning(
                "loopwatch serve: the store commits again%s", " (reopened)" if reopen else ""
            )

    def _prune(self) -> None:
        """Forget requests older than the window."""
        now = time.time()
        if now - self._last_prune < self.options.prune_interval_s:
            return
        self._last_prune = now
        cutoff = now - self.options.dedup_window_s
        with self._lock:
            while self._seen:
                seen = next(iter(self._seen.values()))
                if seen >= cutoff:
                    break
                self._seen.popitem(last=False)
        try:
            self.store.forget_deliveries(int(cutoff * 1e9))
        except StoreError as exc:
            self._store_failed(exc, "could not prune delivery keys")

    def close(self, timeout_s: float = 30.0) -> None:
        """Commit what is queued, stop the writer and decoder (the store stays open)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._writer.is_alive():
            self._writer.join(timeout_s)
        self._decoder.shutdown(wait=True)


SHUTTING_DOWN: Final = "loopwatch serve is shutting down: retry later"
"""Why a request is refused once shutdown has begun."""
BUSY: Final = "loopwatch serve is busy committing: retry after a second"
"""Why a request is refused when the pending cap is reached."""


def _resolve(item: _Pending, outcome: BaseException | bool) -> None:
    def settle() -> None:
        if item.future.done():
            return
        if isinstance(outcome, BaseException):
            item.future.set_exception(outcome)
        else:
            item.future.set_result(outcome)

    # A closed loop: nobody waits for this answer any more.
    with contextlib.suppress(RuntimeError):
        item.loop.call_soon_threadsafe(settle)


def _observe(metrics: MetricsSpanProcessor, observed: list[Observed]) -> None:
    """Feed committed run and tool spans to the one span-to-metrics derivation."""
    for attributes, start, end, error, trace_id in observed:
        metrics.observe_span_record(
            attributes, start_time_ns=start, end_time_ns=end, status_error=error, trace_id=trace_id
        )
