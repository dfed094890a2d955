"""Live mode's ingest: OTLP bodies in, committed batches out, one writer thread owning the store.

:class:`Ingest` is what ``loopwatch serve``'s ``POST /v1/traces`` hands each request to, once the
body is read and decompressed. It decodes the body (in one decoder thread, off the event loop),
recognises a request it has committed before by the digest of its body (a retry after a lost
acknowledgement: answered without storing anything again), and queues the batch for the writer
thread, which commits whatever is queued in one transaction and then resolves each request's
future: an answer is given only after its spans are committed. Committed spans then feed the
:class:`~loopwatch.instrumentation.metrics.MetricsSpanProcessor`, so ``/metrics`` counts what the
store holds, each span once.

Memory is bounded by :attr:`IngestOptions.max_pending_bytes`: a request that would take the bytes
waiting for decoding and commit past it is refused at once (503 with ``Retry-After``), before its
body is read.
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

from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.metrics import MetricsSpanProcessor
from loopwatch.queries.columns import SpanBatch, SpanColumns
from loopwatch.queries.otlp import DecodedRequest, decode_request
from loopwatch.queries.store import Store, StoreError

__all__ = ["DEFAULT_DEDUP_WINDOW_S", "Ingest", "IngestCounts", "IngestOptions", "IngestResult"]

_log = logging.getLogger("loopwatch.serve")

DEFAULT_DEDUP_WINDOW_S: Final = 24 * 3600.0
"""How long a committed request is remembered, to recognise its retries."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestOptions:
    """How much live ingest holds at once and for how long it recognises retries."""

    max_pending_bytes: int = 64 << 20
    """Request bytes (decompressed) admitted but not yet committed; past it, 503."""
    dedup_window_s: float = DEFAULT_DEDUP_WINDOW_S
    """Retries of a request are recognised for this long after it was committed."""
    max_batch_spans: int = 50_000
    """At most this many spans committed in one transaction."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What became of one request."""

    stored: int
    """Spans committed by this request (0 for a recognised retry)."""
    rejected: int
    """Spans refused (OTLP partial success)."""
    message: str
    """Why spans were refused, empty when none were."""
    duplicate: bool = False
    """The request had been committed before: nothing was stored again."""


@dataclass(slots=True)
class _Pending:
    key: str
    batch: SpanBatch
    columns: SpanColumns
    future: asyncio.Future[bool]
    loop: asyncio.AbstractEventLoop


@dataclass(slots=True)
class IngestCounts:
    """Running totals since start-up (for ``/health`` and the serve's own metrics)."""

    requests: int = 0
    spans_stored: int = 0
    spans_rejected: int = 0
    duplicates: int = 0
    refused_busy: int = 0
    failures: int = 0


class Ingest:
    """The live store's only writer; see the module docstring. Call :meth:`start` and
    :meth:`close` from the thread that owns the event loop."""

    def __init__(
        self, store: Store, metrics: MetricsSpanProcessor, options: IngestOptions = IngestOptions()
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.options = options
        self.counts = IngestCounts()
        self._lock = threading.Condition()
        self._queue: list[_Pending] = []
        self._pending_bytes = 0
        self._closing = False
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._decoder = concurrent.futures.ThreadPoolExecutor(1, "loopwatch-decode")
        self._writer = threading.Thread(target=self._write_loop, name="loopwatch-writer")
        self._writer.daemon = True
        self._last_prune = 0.0

    def start(self) -> None:
        """Load the keys of recently committed requests, then start the writer thread."""
        now = time.time()
        since = int((now - self.options.dedup_window_s) * 1e9)
        for key in self.store.deliveries_since(since):
            self._seen[key] = now
        self._writer.start()

    # --- admission ---------------------------------------------------------------------------

    def admit(self, size: int) -> bool:
        """Reserve ``size`` bytes for a request until its answer (then :meth:`release` them);
        ``False`` when ingest is full or closing (answer 503). A first request is always let
        in, whatever its size, so that a body up to the size limit can always be stored."""
        with self._lock:
            if self._closing:
                return False
            if self._pending_bytes and self._pending_bytes + size > self.options.max_pending_bytes:
                self.counts.refused_busy += 1
                return False
            self._pending_bytes += size
            return True

    def release(self, size: int) -> None:
        """Give back bytes reserved with :meth:`admit`."""
        with self._lock:
            self._pending_bytes -= size

    @property
    def pending_bytes(self) -> int:
        """Bytes admitted and not yet committed."""
        return self._pending_bytes

    # --- a request ---------------------------------------------------------------------------

    async def ingest(self, body: bytes, content_type: str) -> IngestResult:
        """Decode, commit and answer one request body (uncompressed).

        Raises :class:`~loopwatch.queries.otlp.OtlpDecodeError` for a body that is not an OTLP
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
        decoded, batch = await loop.run_in_executor(self._decoder, _decode, body, content_type, key)
        message = "; ".join(decoded.reasons)
        future: asyncio.Future[bool] = loop.create_future()
        with self._lock:
            if self._closing:
                raise StoreError("loopwatch serve is shutting down: retry later")
            self._queue.append(_Pending(key, batch, decoded.columns, future, loop))
            self._lock.notify()
        stored = await future
        with self._lock:
            self.counts.spans_rejected += decoded.rejected
        if not stored:
            return IngestResult(0, decoded.rejected, message, duplicate=True)
        return IngestResult(batch.count, decoded.rejected, message)

    # --- the writer thread -------------------------------------------------------------------

    def _take(self) -> list[_Pending] | None:
        with self._lock:
            while not self._queue:
                if self._closing:
                    return None
                self._lock.wait(1.0)
                if not self._queue:
                    self._prune()
            taken: list[_Pending] = []
            spans = 0
            while self._queue and (not taken or spans < self.options.max_batch_spans):
                item = self._queue.pop(0)
                taken.append(item)
                spans += item.batch.count
            return taken

    def _write_loop(self) -> None:
        while (items := self._take()) is not None:
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
            if fresh:
                try:
                    self.store.write(SpanBatch.concat([i.batch for i in fresh]))
                except BaseException as exc:  # answered to each request, never lost silently
                    error = exc
                    _log.warning("loopwatch serve: a commit failed: %s", exc)
            now = time.time()
            with self._lock:
                if error is None:
                    for item in fresh:
                        self._seen[item.key] = now
                        self.counts.spans_stored += item.batch.count
                else:
                    self.counts.failures += len(fresh)
                self.counts.duplicates += len(duplicates)
            for item in fresh:
                _resolve(item, error if error is not None else True)
            for item in duplicates:
                _resolve(item, False)
            if error is None:
                for item in fresh:
                    _observe(self.metrics, item.columns)

    def _prune(self) -> None:
        """Forget requests older than the window (the caller holds the lock)."""
        now = time.time()
        if now - self._last_prune < 60:
            return
        self._last_prune = now
        cutoff = now - self.options.dedup_window_s
        while self._seen:
            seen = next(iter(self._seen.values()))
            if seen >= cutoff:
                break
            self._seen.popitem(last=False)
        try:
            self.store.forget_deliveries(int(cutoff * 1e9))
        except StoreError as exc:
            _log.warning("loopwatch serve: could not prune delivery keys: %s", exc)

    def close(self, timeout_s: float = 30.0) -> None:
        """Commit what is queued, stop the writer and decoder (the store stays open)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._writer.is_alive():
            self._writer.join(timeout_s)
        self._decoder.shutdown(wait=True)


def _decode(body: bytes, content_type: str, key: str) -> tuple[DecodedRequest, SpanBatch]:
    decoded = decode_request(body, content_type)
    return decoded, SpanBatch.from_columns(decoded.columns, deliveries=(key,))


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


_PREFIXES: Final = (sc.SPAN_RUN, sc.SPAN_TOOL)


def _observe(metrics: MetricsSpanProcessor, columns: SpanColumns) -> None:
    """Feed committed run and tool spans to the one span-to-metrics derivation."""
    for i, name in enumerate(columns.name):
        if name.startswith(_PREFIXES):
            metrics.observe_span_record(
                columns.attributes[i],
                start_time_ns=columns.start_ns[i],
                end_time_ns=columns.end_ns[i],
                status_error=columns.status_code[i] == "ERROR",
            )
