"""An OTLP/HTTP span exporter that keeps what it cannot send in a bounded on-disk spool.

While the endpoint is unreachable or answers 429/502/503/504, each batch is written to the
spool (:mod:`.spool`) instead of being dropped; a sender thread sends the spool head first, in
order, once the endpoint is back, honouring ``Retry-After``. A loss is counted
(``loopwatch_telemetry_dropped_total``) only when the spool is full (``spool_full``), a record
in it is damaged (``spool_corrupt``) or the endpoint refuses a batch for good (a 400:
``export_failed``). What is still spooled at shutdown stays on disk, not lost: the next process
that takes the slot sends it. HTTP with the standard library only. See docs/telemetry.md,
*The spool*.
"""

from __future__ import annotations

import enum
import gzip
import http.client
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final
from urllib.parse import unquote

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..runtime.drops import record_drop
from ..runtime.settings import env_str
from .spool import DiskSpool, SpoolFull, SpoolRecord, open_slot, read_record

__all__ = [
    "DEFAULT_SPOOL_MAX_MB",
    "DROP_SPOOL_CORRUPT",
    "DROP_SPOOL_FULL",
    "SPOOL_DIR_ENV",
    "SPOOL_MAX_MB_ENV",
    "SpoolingOTLPExporter",
    "otlp_headers_from_env",
]

_log = logging.getLogger(__name__)

SPOOL_DIR_ENV: Final = "LOOPWATCH_SPOOL_DIR"
"""The directory of the spool; unset = no spool (docs/telemetry.md, *The spool*)."""
SPOOL_MAX_MB_ENV: Final = "LOOPWATCH_SPOOL_MAX_MB"
"""The spool's bound in MB on disk."""
DEFAULT_SPOOL_MAX_MB: Final = 128
DROP_SPOOL_FULL: Final = "spool_full"
"""Spans of a batch that found the spool full (the newest batch is refused)."""
DROP_SPOOL_CORRUPT: Final = "spool_corrupt"
"""Spans of a spooled batch whose file was damaged when it was read back."""
_DROP_REJECTED: Final = "export_failed"
_RETRYABLE: Final = frozenset({429, 502, 503, 504})
_FIRST_BACKOFF_S: Final = 0.25
_MAX_BACKOFF_S: Final = 5.0
_MAX_RETRY_AFTER_S: Final = 30.0


class Sent(enum.Enum):
    """What became of one request."""

    OK = "ok"
    RETRY = "retry"  # unreachable, or 429/502/503/504: keep it and try again
    REJECTED = "rejected"  # refused for good (400, 401, 413 ...): retrying cannot help


class SpoolingOTLPExporter(SpanExporter):
    """OTLP/HTTP (protobuf, gzip) with a bounded on-disk spool for the times it cannot send.

    ``spool_dir`` is a parent directory: the exporter takes its first free ``slot-N`` (one
    process per slot, held by a file lock), and sends what an earlier process left there.
    """

    counts_own_drops = True  # spool_full / spool_corrupt / export_failed are counted here

    def __init__(
        self,
        endpoint: str,
        spool_dir: str | Path,
        *,
        max_bytes: int = DEFAULT_SPOOL_MAX_MB << 20,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        sync: bool = True,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.headers = dict(headers if headers is not None else otlp_headers_from_env())
        self.slot, self._slot_lock = open_slot(Path(spool_dir))
        self.spool = DiskSpool(self.slot, max_bytes, sync=sync)
        self._wake = threading.Condition()
        self._closed = False
        self._sender = threading.Thread(target=self._drain, name="loopwatch-spool", daemon=True)
        self._sender.start()

    # --- SpanExporter --------------------------------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Send ``spans`` now when nothing is spooled ahead of them, else spool them."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        payload = encode_spans(spans).SerializeToString()
        if not self._closed and len(self.spool) == 0:
            outcome, _ = self._send(payload)
            if outcome is Sent.OK:
                return SpanExportResult.SUCCESS
            if outcome is Sent.REJECTED:
                record_drop(_DROP_REJECTED, len(spans))
                return SpanExportResult.FAILURE
        return self._keep(payload, len(spans))

    def shutdown(self) -> None:
        """Stop sending; what is spooled stays on disk for the next process."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._sender.join(self.timeout_s + 1)
        if self._slot_lock is not None:
            self._slot_lock.close()  # releases the flock
            self._slot_lock = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until the spool is sent; ``False`` if it was not within the time."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._wake:
            self._wake.notify_all()
        while len(self.spool) and not self._closed:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return len(self.spool) == 0

    # --- spool ---------------------------------------------------------------------------

    def _keep(self, payload: bytes, spans: int) -> SpanExportResult:
        try:
            self.spool.append(payload, spans)
        except SpoolFull:
            record_drop(DROP_SPOOL_FULL, spans)
            return SpanExportResult.FAILURE
        except OSError as exc:  # the disk refused it: counted as the spool's loss
            _log.error("loopwatch: spool write failed, %d spans lost: %s", spans, exc)
            record_drop(DROP_SPOOL_FULL, spans)
            return SpanExportResult.FAILURE
        with self._wake:
            self._wake.notify_all()
        return SpanExportResult.SUCCESS

    def _drain(self) -> None:
        backoff = _FIRST_BACKOFF_S
        while True:
            with self._wake:
                while not self._closed and self.spool.head() is None:
                    self._wake.wait()
                if self._closed:
                    return
            record = self.spool.head()
            if record is None:
                continue
            wait = self._send_head(record)
            if wait is None:
                backoff = _FIRST_BACKOFF_S
                continue
            with self._wake:
                self._wake.wait(wait if wait > 0 else backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _send_head(self, record: SpoolRecord) -> float | None:
        """Send the head record; ``None`` when it is gone (sent or given up), else how long to
        wait before trying again (0: the back-off decides)."""
        payload = read_record(record)
        if payload is None:
            _log.error(
                "loopwatch: damaged spool record %s, %d spans lost", record.path, record.spans
            )
            record_drop(DROP_SPOOL_CORRUPT, record.spans)
            self.spool.remove_head(record)
            return None
        outcome, retry_after = self._send(payload)
        if outcome is Sent.RETRY:
            return retry_after
        if outcome is Sent.REJECTED:
            record_drop(_DROP_REJECTED, record.spans)
        self.spool.remove_head(record)
        return None

    # --- HTTP ----------------------------------------------------------------------------

    def _send(self, payload: bytes) -> tuple[Sent, float]:
        """POST one request; (outcome, seconds the server asked to wait or 0)."""
        request = urllib.request.Request(
            self.endpoint,
            data=gzip.compress(payload, compresslevel=1),
            method="POST",
            headers={
                **self.headers,
                "Content-Type": "application/x-protobuf",
                "Content-Encoding": "gzip",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
                return Sent.OK, 0.0
        except urllib.error.HTTPError as exc:
            exc.read()
            if exc.code in _RETRYABLE:
                return Sent.RETRY, _retry_after(exc.headers.get("Retry-After"))
            _log.error("loopwatch: %s refused a batch for good: HTTP %d", self.endpoint, exc.code)
            return Sent.REJECTED, 0.0
        except (OSError, http.client.HTTPException):  # refused, reset, timed out, unreachable
            return Sent.RETRY, 0.0


def _retry_after(value: str | None) -> float:
    try:
        return min(max(float(value or 0), 0.0), _MAX_RETRY_AFTER_S)
    except ValueError:
        return 0.0


def otlp_headers_from_env() -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` (else ``OTEL_EXPORTER_OTLP_HEADERS``) as OTel
    defines them: ``key=value`` pairs separated by commas, URL-encoded."""
    raw = env_str("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env_str("OTEL_EXPORTER_OTLP_HEADERS")
    headers: dict[str, str] = {}
    for item in (raw or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            headers[unquote(key.strip())] = unquote(value.strip())
    return headers
