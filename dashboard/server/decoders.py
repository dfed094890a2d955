"""``loopwatch serve --decoders N``: OTLP decoding in N child processes that die with the server.

Each child decodes a body into the store's Arrow tables (sent back as IPC bytes) and the spans the
metrics read. A child must never outlive the server, whatever ends it (``kill -9`` included):
on Linux each child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), and
on every platform a watchdog thread in the child exits once its parent is gone. Multiprocessing's
resource tracker exits by itself once the server and the children have closed its pipe.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any, Final

from loopwatch.instrumentation.telemetry.metrics import SPAN_PREFIXES
from loopwatch.queries.ingest.foreign import SpanView, views_of
from loopwatch.queries.ingest.otlp import DecodedRequest, decode_request
from loopwatch.queries.store.columns import SpanBatch, SpanColumns
from loopwatch.queries.store.ipc import table_bytes, table_from_bytes

__all__ = ["Decoded", "Observed", "decode", "decode_for_wire", "from_wire", "new_executor"]

Observed = tuple[dict[str, Any], int, int, bool, str]
"""A run, model-call or tool span as the metrics read it: attributes, start, end, status is
ERROR, trace id."""

Wire = tuple[bytes | None, bytes | None, int, int, tuple[str, ...], list[Observed], list[SpanView]]
"""What a decoder process sends back: spans and runs as Arrow IPC, span count, rejected spans,
the reasons, the observed spans, the foreign spans (docs/foreign.md)."""

_PR_SET_PDEATHSIG: Final = 1  # linux/prctl.h
_WATCH_INTERVAL_S: Final = 0.5


class Decoded:
    """One decoded request: its batch, the spans refused and why, the spans the metrics read,
    and its foreign spans as views (runs are rebuilt from them, docs/foreign.md)."""

    __slots__ = ("batch", "foreign", "observed", "reasons", "rejected")

    def __init__(
        self,
        batch: SpanBatch,
        rejected: int,
        reasons: tuple[str, ...],
        observed: list[Observed],
        foreign: list[SpanView] | None = None,
    ) -> None:
        self.batch = batch
        self.rejected = rejected
        self.reasons = reasons
        self.observed = observed
        self.foreign = foreign if foreign is not None else []


def new_executor(decoders: int) -> concurrent.futures.Executor:
    """One decoder thread (``decoders`` <= 0) or a pool of ``decoders`` processes."""
    if decoders <= 0:
        return concurrent.futures.ThreadPoolExecutor(1, "loopwatch-decode")
    # spawn, not fork: this process runs threads (the event loop, the writer).
    return concurrent.futures.ProcessPoolExecutor(
        decoders,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_child,
        initargs=(os.getpid(),),
    )


def _observed(columns: SpanColumns) -> list[Observed]:
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


def decode(
    body: bytes, content_type: str, key: str, labels: tuple[str, ...] | None = None
) -> Decoded:
    """Decode one body (uncompressed) into a batch carrying the delivery ``key``; with
    ``labels`` (the task-type keys), also its foreign spans' views."""
    decoded: DecodedRequest = decode_request(body, content_type)
    batch = SpanBatch.from_columns(decoded.columns, deliveries=(key,))
    foreign = views_of(decoded.columns, labels) if labels is not None else []
    return Decoded(batch, decoded.rejected, decoded.reasons, _observed(decoded.columns), foreign)


def decode_for_wire(body: bytes, content_type: str, labels: tuple[str, ...] | None = None) -> Wire:
    """In a decoder process: :func:`decode`, with the Arrow tables as IPC bytes to send back."""
    decoded = decode(body, content_type, "", labels)
    batch = decoded.batch
    return (
        table_bytes(batch.spans),
        table_bytes(batch.runs),
        batch.count,
        decoded.rejected,
        decoded.reasons,
        decoded.observed,
        decoded.foreign,
    )


def from_wire(wire: Wire, key: str) -> Decoded:
    """A decoder process's answer as a :class:`Decoded` carrying the delivery ``key``."""
    spans, runs, count, rejected, reasons, observed, foreign = wire
    batch = SpanBatch(
        spans=table_from_bytes(spans),
        runs=table_from_bytes(runs),
        count=count,
        deliveries=(key,),
    )
    return Decoded(batch, rejected, reasons, observed, foreign)


def warm() -> None:
    """Run in each decoder process at start: the imports and the first conversion's costs."""
    decode_for_wire(b"", "application/x-protobuf")


def _start_child(parent: int) -> None:
    """A decoder process's initializer: tie its life to ``parent``'s."""
    # A Ctrl-C reaches the whole process group: the server shuts down cleanly and ends its
    # decoders itself; a decoder interrupted first would break requests still in flight.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(0)
    watchdog = threading.Thread(
        target=_watch_parent, args=(parent,), name="loopwatch-parent-watch", daemon=True
    )
    watchdog.start()


def _watch_parent(parent: int) -> None:
    # Where there is no PDEATHSIG (macOS) or it did not fire: an orphan is re-parented.
    while os.getppid() == parent:
        time.sleep(_WATCH_INTERVAL_S)
    os._exit(0)
