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

Memory is bounded by :attr:`IngestOptions.max_pending_bytes`: a request that would take the bytes
waiting for decoding and commit past it is refused at once (503 with ``Retry-After``), before its
body is read; retry keys are kept for :attr:`IngestOptions.dedup_window_s` only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import multiprocessing
import signal
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from loopwatch.instrumentation.telemetry.metrics import SPAN_PREFIXES, MetricsSpanProcessor
from loopwatch.queries.ingest.foreign import ForeignOptions, SpanView, TraceAssembler, views_of
from loopwatch.queries.ingest.otlp import DecodedRequest, decode_request
from loopwatch.queries.store.columns import SpanBatch, SpanColumns
from loopwatch.queries.store.database import Store, StoreError
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = [
    "DEFAULT_DEDUP_WINDOW_S",
    "Ingest",
    "IngestCollector",
    "IngestCounts",
    "IngestOptions",
    "IngestResult",
]

_log = logging.getLogger("loopwatch.serve")

DEFAULT_DEDUP_WINDOW_S: Final = 3600.0
"""How long a committed request is remembered, to recognise its retries: an hour, far longer than
exporters retry (the OTel SDKs give up after about a minute, the Collector by default after five),
and at most ~250k keys (~40 MB) at full ingest speed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestOptions:
    """How much live ingest holds at once and for how long it recognises retries."""

    max_pending_bytes: int = 64 << 20
    """Request bytes (decompressed) admitted but not yet committed; past it, 503."""
    dedup_window_s: float = DEFAULT_DEDUP_WINDOW_S
    """Retries of a request are recognised for this long after it was committed."""
    max_batch_spans: int = 50_000
    """At most this many spans committed in one transaction."""
    prune_interval_s: float = 60.0
    """How often keys older than the window are forgotten (when the writer is idle)."""
    decoders: int = 0
    """Decoder processes: 0 decodes in a thread of this process (the default: no extra memory);
    N >= 1 starts N processes, which decode on other cores while this one commits."""
    foreign: ForeignOptions | None = field(default_factory=ForeignOptions)
    """How spans of other instrumentations become runs (docs/foreign.md); ``None``: they do
    not (stored as received only)."""


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


_Observed = tuple[dict[str, Any], int, int, bool, str]
"""A run, model-call or tool span as the metrics read it: attributes, start, end, status is
ERROR, trace id."""


@dataclass(slots=True)
class _Decoded:
    batch: SpanBatch
    rejected: int
    reasons: tuple[str, ...]
    observed: list[_Observed]
    foreign: list[SpanView]


@dataclass(slots=True)
class _Pending:
    key: str
    batch: SpanBatch
    observed: list[_Observed]
    foreign: list[SpanView]
    future: asyncio.Future[bool]
    loop: asyncio.AbstractEventLoop


@dataclass(slots=True)
class IngestCounts:
    """Running totals since start-up (for ``/health`` and the serve's own metrics)."""

    requests: int = 0
    """Requests decoded or recognised (those refused before, e.g. 415 or 503, are not)."""
    spans_stored: int = 0
    spans_rejected: int = 0
    duplicates: int = 0
    """Requests recognised as retries of committed ones."""
    refused_busy: int = 0
    failures: int = 0
    """Requests whose commit failed."""
    answers: dict[int, int] = field(default_factory=dict)
    """``POST /v1/traces`` answers by HTTP status code."""


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
        self._decoder = self._new_decoder()
        self._writer = threading.Thread(target=self._write_loop, name="loopwatch-writer")
        self._writer.daemon = True
        self._last_prune = 0.0
        self.foreign = TraceAssembler(options.foreign) if options.foreign is not None else None
        self._labels = options.foreign.task_type_keys if options.foreign is not None else None

    def _new_decoder(self) -> concurrent.futures.Executor:
        if self.options.decoders <= 0:
            return concurrent.futures.ThreadPoolExecutor(1, "loopwatch-decode")
        # spawn, not fork: this process runs threads (the event loop, the writer).
        return concurrent.futures.ProcessPoolExecutor(
            self.options.decoders,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_ignore_interrupts,
        )

    def start(self) -> None:
        """Load the keys of recently committed requests, start the decoder processes (if any)
        and the writer thread."""
        if self.options.decoders > 0:
            # Pay the processes' start-up (imports) now, not in the first requests.
            warm = [self._decoder.submit(_warm) for _ in range(self.options.decoders)]
            for future in warm:
                future.result()
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

    def grow(self, held: int, extra: int) -> bool:
        """Reserve ``extra`` more bytes for a request already holding ``held`` (its body grew
        when decompressed); ``False`` when that would pass the limit while other requests are
        pending (answer 503). The caller still releases only what it holds."""
        with self._lock:
            others = self._pending_bytes - held
            if others > 0 and self._pending_bytes + extra > self.options.max_pending_bytes:
                self.counts.refused_busy += 1
                return False
            self._pending_bytes += extra
            return True

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
                c.refused_busy,
                c.failures,
                dict(c.answers),
            )
            return copy, self._pending_bytes

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
                raise StoreError("loopwatch serve is shutting down: retry later")
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

    async def _decode(self, body: bytes, content_type: str, key: str) -> _Decoded:
        loop = asyncio.get_running_loop()
        decoder = self._decoder
        if isinstance(decoder, concurrent.futures.ThreadPoolExecutor):
            return await loop.run_in_executor(
                decoder, _decode, body, content_type, key, self._labels
            )
        try:
            wire = await loop.run_in_executor(
                decoder, _decode_for_wire, body, content_type, self._labels
            )
        except concurrent.futures.process.BrokenProcessPool as exc:
            with self._lock:
                if self._decoder is decoder and not self._closing:
                    self._decoder = self._new_decoder()
            decoder.shutdown(wait=False)
            raise StoreError("a decoder process died: retry the request") from exc
        return _from_wire(wire, key)

    # --- the writer thread -------------------------------------------------------------------

    def _take(self) -> list[_Pending] | None:
        with self._lock:
            while not self._queue:
                if self._closing:
                    return None
                self._lock.wait(min(1.0, self.options.prune_interval_s))
                if not self._queue:
                    self._prune()
                    if self.foreign is not None and not self._closing:
                        return []  # idle: let the writer build the foreign traces now final
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
            if error is None:
                # Before the answers: once a sender has its 200, /metrics counts its spans.
                for item in fresh:
                    _observe(self.metrics, item.observed)
            for item in fresh:
                _resolve(item, error if error is not None else True)
            for item in duplicates:
                _resolve(item, False)
            if self.foreign is not None:
                if error is None:
                    for item in fresh:
                        self.foreign.add(item.foreign)
                self._build_foreign()
        if self.foreign is not None:
            self._build_foreign(everything=True)

    def _build_foreign(self, *, everything: bool = False) -> None:
        """Write the runs of foreign traces that are final now (docs/foreign.md); a failure is
        logged and never stops ingest (the spans are stored already)."""
        assert self.foreign is not None
        try:
            tables = self.foreign.tables(everything=everything)
            if tables is not None:
                self.store.write_derived(*tables)
        except Exception as exc:  # telemetry never breaks ingest
            _log.warning("loopwatch serve: could not build foreign runs: %s", exc)

    def _prune(self) -> None:
        """Forget requests older than the window (the caller holds the lock)."""
        now = time.time()
        if now - self._last_prune < self.options.prune_interval_s:
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


def _observed(columns: SpanColumns) -> list[_Observed]:
    """The run and tool spans of a batch, as the metrics read them."""
    return [
        (
            columns.attributes[i],
            columns.start_ns[i],
            columns.end_ns[i],
            columns.status_code[i] == "ERROR",
            columns.trace_id[i],
        )
        for i, name in enumerate(columns.name)
        if name.startswith(SPAN_PREFIXES)
    ]


def _decode(
    body: bytes, content_type: str, key: str, labels: tuple[str, ...] | None = None
) -> _Decoded:
    decoded: DecodedRequest = decode_request(body, content_type)
    batch = SpanBatch.from_columns(decoded.columns, deliveries=(key,))
    foreign = views_of(decoded.columns, labels) if labels is not None else []
    return _Decoded(batch, decoded.rejected, decoded.reasons, _observed(decoded.columns), foreign)


_Wire = tuple[
    bytes | None, bytes | None, int, int, tuple[str, ...], list[_Observed], list[SpanView]
]


def _ipc(table: pa.Table | None) -> bytes | None:
    if table is None:
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return bytes(sink.getvalue())


def _decode_for_wire(
    body: bytes, content_type: str, labels: tuple[str, ...] | None = None
) -> _Wire:
    """In a decoder process: :func:`_decode`, with the Arrow tables as IPC bytes to send back."""
    decoded = _decode(body, content_type, "", labels)
    batch = decoded.batch
    return (
        _ipc(batch.spans),
        _ipc(batch.runs),
        batch.count,
        decoded.rejected,
        decoded.reasons,
        decoded.observed,
        decoded.foreign,
    )


def _from_wire(wire: _Wire, key: str) -> _Decoded:
    spans, runs, count, rejected, reasons, observed, foreign = wire
    batch = SpanBatch(
        spans=pa.ipc.open_stream(spans).read_all() if spans is not None else None,
        runs=pa.ipc.open_stream(runs).read_all() if runs is not None else None,
        count=count,
        deliveries=(key,),
    )
    return _Decoded(batch, rejected, reasons, observed, foreign)


def _ignore_interrupts() -> None:
    # A Ctrl-C reaches the whole process group: the server shuts down cleanly and ends its
    # decoders itself; a decoder interrupted first would break requests still in flight.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _warm() -> None:
    """Run in each decoder process at start: the imports and the first conversion's costs."""
    _decode_for_wire(b"", "application/x-protobuf")


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


def _observe(metrics: MetricsSpanProcessor, observed: list[_Observed]) -> None:
    """Feed committed run and tool spans to the one span-to-metrics derivation."""
    for attributes, start, end, error, trace_id in observed:
        metrics.observe_span_record(
            attributes, start_time_ns=start, end_time_ns=end, status_error=error, trace_id=trace_id
        )


class IngestCollector:
    """The receiver's own Prometheus metrics, next to the span-derived ones on ``/metrics``:

    - ``loopwatch_ingest_requests_total{code}``: ``POST /v1/traces`` answers by HTTP status;
    - ``loopwatch_ingest_spans_total{result}``: spans ``stored`` or ``rejected``;
    - ``loopwatch_ingest_retries_total``: retried requests recognised (nothing stored again);
    - ``loopwatch_ingest_pending_bytes``: request bytes held, waiting for decoding and commit.
    """

    def __init__(self, ingest: Ingest) -> None:
        self._ingest = ingest

    def describe(self) -> list[Metric]:
        return self._families(IngestCounts(), 0)

    def collect(self) -> list[Metric]:
        counts, pending = self._ingest.snapshot()
        return self._families(counts, pending)

    @staticmethod
    def _families(counts: IngestCounts, pending: int) -> list[Metric]:
        requests = CounterMetricFamily(
            "loopwatch_ingest_requests",
            "OTLP export requests answered by loopwatch serve, by HTTP status code.",
            labels=("code",),
        )
        for code, n in sorted(counts.answers.items()):
            requests.add_metric((str(code),), n)
        spans = CounterMetricFamily(
            "loopwatch_ingest_spans",
            "Spans received by loopwatch serve: stored (committed) or rejected (partial success).",
            labels=("result",),
        )
        spans.add_metric(("stored",), counts.spans_stored)
        spans.add_metric(("rejected",), counts.spans_rejected)
        retries = CounterMetricFamily(
            "loopwatch_ingest_retries",
            "Retried requests recognised as already committed (their spans not stored again).",
        )
        retries.add_metric((), counts.duplicates)
        pending_bytes = GaugeMetricFamily(
            "loopwatch_ingest_pending_bytes",
            "Request bytes held by loopwatch serve, waiting to be decoded and committed.",
        )
        pending_bytes.add_metric((), pending)
        return [requests, spans, retries, pending_bytes]
