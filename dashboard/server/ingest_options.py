"""What live ingest (:mod:`.ingest`) is configured with and what it answers each request with
(docs/serve.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from loopwatch.queries.ingest.foreign import ForeignOptions

__all__ = ["DEFAULT_DEDUP_WINDOW_S", "IngestOptions", "IngestResult"]

DEFAULT_DEDUP_WINDOW_S: Final = 3600.0
"""How long a committed request is remembered, to recognise its retries: an hour, far longer than
exporters retry (the OTel SDKs give up after about a minute, the Collector by default after five),
and at most ~250k keys (~40 MB) at full ingest speed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestOptions:
    """How much live ingest holds at once and for how long it recognises retries."""

    max_pending_bytes: int = 64 << 20
    """Request bytes (received, decompressed) held until answered; past it, 503."""
    dedup_window_s: float = DEFAULT_DEDUP_WINDOW_S
    """Retries of a request are recognised for this long after it was committed."""
    max_batch_spans: int = 50_000
    """At most this many spans committed in one transaction."""
    prune_interval_s: float = 60.0
    """How often keys older than the window are forgotten (when the writer is idle)."""
    decoders: int = 0
    """Decoder processes: 0 decodes in a thread of this process (the default: no extra memory);
    N >= 1 starts N processes, which decode on other cores while this one commits."""
    max_retry_s: float = 10.0
    """Longest wait between two attempts to commit again, or reopen, a store that failed."""
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
