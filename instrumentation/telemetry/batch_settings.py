"""The batch processor's settings (OTel's ``OTEL_BSP_*`` and loopwatch's shutdown wait), its
counters, and the exporter protocol it can pipeline (docs/telemetry.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ..runtime.settings import env_int as loopwatch_env_int
from ..runtime.settings import otel_env_int

__all__ = [
    "BATCH_SIZE_ENV",
    "DEFAULT_MAX_EXPORT_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_SIZE",
    "DEFAULT_SHUTDOWN_TIMEOUT_MS",
    "EXPORT_TIMEOUT_ENV",
    "QUEUE_SIZE_ENV",
    "SCHEDULE_DELAY_ENV",
    "SHUTDOWN_TIMEOUT_ENV",
    "BatchSettings",
    "PipelinedSpanExporter",
    "QueueStats",
    "env_int",
]

DEFAULT_MAX_QUEUE_SIZE: Final = 2048
"""Queue size when neither the argument nor ``OTEL_BSP_MAX_QUEUE_SIZE`` sets it (OTel's)."""
DEFAULT_MAX_EXPORT_BATCH_SIZE: Final = 512
"""Batch size when neither the argument nor ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` sets it (OTel's)."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counters of a :class:`CountingBatchSpanProcessor` since it was made."""

    received: int
    """Sampled spans that ended while it was running."""
    held: int
    """Spans held now: queued plus the batch being exported."""
    peak_held: int
    """The most spans ever held at once (never above ``max_queue_size``)."""
    dropped_queue_full: int
    """Spans refused because the queue was full (counted as ``queue_full`` drops)."""
    exported: int
    """Spans in batches the exporter accepted."""
    failed: int
    """Spans in batches the exporter refused or raised on."""


QUEUE_SIZE_ENV: Final = "OTEL_BSP_MAX_QUEUE_SIZE"
"""OTel's variable for the most spans held."""
BATCH_SIZE_ENV: Final = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
"""OTel's variable for the most spans per export."""
SCHEDULE_DELAY_ENV: Final = "OTEL_BSP_SCHEDULE_DELAY"
"""OTel's variable for how long a partial batch may wait (ms)."""
EXPORT_TIMEOUT_ENV: Final = "OTEL_BSP_EXPORT_TIMEOUT"
"""OTel's variable for how long one export may take (ms); kept as ``export_timeout_millis``."""
SHUTDOWN_TIMEOUT_ENV: Final = "LOOPWATCH_SHUTDOWN_TIMEOUT_MS"
"""loopwatch's variable for the longest ``shutdown()`` waits for the exporter (ms)."""
DEFAULT_SHUTDOWN_TIMEOUT_MS: Final = 5000
"""Shutdown's wait when neither the argument nor ``LOOPWATCH_SHUTDOWN_TIMEOUT_MS`` sets it: an
agent whose collector is unreachable exits within about this, never half a minute."""


def env_int(name: str, default: int) -> int:
    """The integer in OTel's variable ``name``; ``default`` when unset or not an integer (OTel's
    rule, read in :func:`loopwatch.instrumentation.runtime.settings.otel_env_int`)."""
    return otel_env_int(name, default)


class PipelinedSpanExporter(Protocol):
    """A span exporter that can start a batch before the previous batch's answer is known.

    :class:`CountingBatchSpanProcessor` uses ``begin_export`` instead of ``export`` when the
    exporter's ``pipelined`` is ``True``: it begins batch N+1, then calls batch N's answer,
    which blocks until that batch is stored and returns what ``export`` would have (``SUCCESS``
    only once stored). Answers are asked for in the order batches were begun.
    """

    @property
    def pipelined(self) -> bool:
        """Whether ``begin_export`` should be used (it may depend on configuration)."""
        ...

    def begin_export(self, spans: Sequence[ReadableSpan]) -> Callable[[], SpanExportResult]:
        """Start exporting ``spans``; the returned call waits for and gives the answer."""
        ...


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """A processor's settings, each from its argument, else its variable, else the default."""

    max_queue_size: int
    schedule_delay_millis: float
    max_export_batch_size: int
    export_timeout_millis: float
    shutdown_timeout_millis: float

    @classmethod
    def resolve(
        cls,
        max_queue_size: int | None = None,
        schedule_delay_millis: float | None = None,
        max_export_batch_size: int | None = None,
        export_timeout_millis: float | None = None,
        shutdown_timeout_millis: float | None = None,
    ) -> BatchSettings:
        """The settings in force; ``ValueError`` naming the one that does not fit."""
        if shutdown_timeout_millis is None:
            shutdown_timeout_millis = loopwatch_env_int(
                SHUTDOWN_TIMEOUT_ENV, DEFAULT_SHUTDOWN_TIMEOUT_MS, minimum=0
            )
        settings = cls(
            max_queue_size=int(_or_env(max_queue_size, QUEUE_SIZE_ENV, DEFAULT_MAX_QUEUE_SIZE)),
            schedule_delay_millis=_or_env(schedule_delay_millis, SCHEDULE_DELAY_ENV, 5000),
            max_export_batch_size=int(
                _or_env(max_export_batch_size, BATCH_SIZE_ENV, DEFAULT_MAX_EXPORT_BATCH_SIZE)
            ),
            export_timeout_millis=_or_env(export_timeout_millis, EXPORT_TIMEOUT_ENV, 30000),
            shutdown_timeout_millis=shutdown_timeout_millis,
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Raise ``ValueError`` for sizes and delays that cannot work."""
        queue, batch = self.max_queue_size, self.max_export_batch_size
        if queue <= 0:
            raise ValueError(f"max_queue_size must be positive, got {queue}")
        if batch <= 0:
            raise ValueError(f"max_export_batch_size must be positive, got {batch}")
        if batch > queue:
            raise ValueError(
                f"max_export_batch_size ({batch}) must not exceed max_queue_size ({queue})"
            )
        if self.schedule_delay_millis <= 0:
            raise ValueError(
                f"schedule_delay_millis must be positive, got {self.schedule_delay_millis}"
            )
        if self.shutdown_timeout_millis < 0:
            raise ValueError(
                f"shutdown_timeout_millis must not be negative, got {self.shutdown_timeout_millis}"
            )


def _or_env(value: float | None, name: str, default: int) -> float:
    return otel_env_int(name, default) if value is None else value
