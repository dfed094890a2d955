"""OpenTelemetry and Prometheus: spans (:mod:`.tracing`), span-derived metrics (:mod:`.metrics`),
the bounded span queue (:mod:`.processor`) and :func:`instrument` (:mod:`.pipeline`).

The names below are what ``loopwatch.instrumentation.telemetry`` exported before it became a
package; they are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..runtime.lazy import lazy_names

if TYPE_CHECKING:
    from .pipeline import (
        DB_ENV,
        DROP_PROCESSOR_FAILED,
        DROP_STORE_UNAVAILABLE,
        Instrumentation,
        instrument,
    )

__all__ = [
    "DB_ENV",
    "DROP_PROCESSOR_FAILED",
    "DROP_STORE_UNAVAILABLE",
    "Instrumentation",
    "instrument",
]

# Imported on first use, like the package above it.
_LAZY: dict[str, str] = dict.fromkeys(__all__, ".pipeline")

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)
