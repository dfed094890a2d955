"""The optional dependencies (extras) and the one error for a missing one.

The runtime needs only the standard library. What else a part needs is an extra of the
``loopwatch`` distribution, and a part used without its extra raises :class:`MissingExtraError`
naming the extra to install, e.g.::

    loopwatch.instrumentation.telemetry.tracing needs the 'otel' extra:
    pip install 'loopwatch[otel]'
    (missing module: opentelemetry)
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXTRAS", "MissingExtraError"]

EXTRAS: Final = {
    "otel": "spans (OpenTelemetry SDK, OTLP/HTTP export) and Prometheus metrics",
    "store": "the DuckDB store, its exporter, the named queries, OTLP decoding",
    "dashboard": "the Streamlit dashboard and `loopwatch serve`",
    "all": "otel, store and dashboard",
}
"""Each extra and what it brings (the per-integration extras are listed in the README)."""


class MissingExtraError(ImportError):
    """A part of loopwatch was used without the extra it needs installed."""

    def __init__(self, extra: str, feature: str, missing: str | None) -> None:
        self.extra = extra
        self.feature = feature
        message = f"{feature} needs the '{extra}' extra: pip install 'loopwatch[{extra}]'"
        if missing:
            message += f" (missing module: {missing})"
        super().__init__(message, name=missing)

    @classmethod
    def of(cls, extra: str, feature: str, exc: ImportError) -> MissingExtraError:
        """The error for ``exc``, raised while ``feature`` imported what ``extra`` brings."""
        missing = exc.name.split(".")[0] if exc.name else None
        return cls(extra, feature, missing)
