"""What one :func:`~loopwatch.instrumentation.telemetry.instrument` call asks for, resolved.

Every option follows argument -> environment variable -> default (docs/telemetry.md,
*instrument() options*); everything here is checked before the earlier wiring is replaced.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from ..runtime.settings import env_int, env_str
from ..runtime.validate import check_int, check_url
from .metrics import METRICS_PORT_ENV
from .processor import CountingBatchSpanProcessor
from .stores import StoreBackend, find_store

__all__ = [
    "DB_ENV",
    "Wiring",
    "given_outputs",
    "otlp_processor",
    "resolve_metrics_port",
    "resolve_otlp_endpoint",
    "resolve_provider",
    "resolve_spool_dir",
    "resolve_store_path",
]

_log = logging.getLogger(__name__)

DB_ENV: Final = "LOOPWATCH_DB"
"""The DuckDB file spans are written to when ``store`` is not given."""
_OTLP_TRACES_ENV: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_OTLP_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
_OTLP_TRACES_PATH: Final = "/v1/traces"


@dataclass(slots=True, kw_only=True)
class Wiring:
    """What one ``instrument()`` call asked for, checked before anything is replaced."""

    store_path: Path | None
    otlp_endpoint: str | None
    metrics_port: int | None
    metrics_registry: Any
    metrics_host: str
    given: list[SpanProcessor]
    shutdown_timeout_millis: int | None
    spool_dir: Path | None = None
    store: StoreBackend | None = None
    store_missing: ImportError | None = None
    writer: str = ""

    def find_store(self, writer: str | None) -> None:
        """Look the store up now, so that a bad writer setting is refused at the call."""
        if self.store_path is None:
            return
        try:
            self.store = find_store()
        except ImportError as exc:  # MissingExtraError: reported through store_error
            self.store_missing = exc
            return
        self.writer = self.store.resolve_writer(writer)


def given_outputs(
    processors: Sequence[SpanProcessor], exporter: SpanExporter | None, timeout: int | None
) -> list[SpanProcessor]:
    """The outputs handed in (``span_processors``, ``exporter``), checked for their kind."""
    given = list(processors)
    for p in given:
        if not isinstance(p, SpanProcessor):
            raise TypeError(f"span_processors items must be SpanProcessors, got {p!r}")
    if exporter is not None:
        if not isinstance(exporter, SpanExporter):
            raise TypeError(f"exporter must be a SpanExporter, got {exporter!r}")
        given.append(CountingBatchSpanProcessor(exporter, shutdown_timeout_millis=timeout))
    return given


def resolve_provider(
    given: TracerProvider | None, service_name: str | None
) -> tuple[TracerProvider, bool]:
    """The provider to use, and whether it was made here (and set as the global one)."""
    if given is not None:
        _warn_service_name(service_name)
        return given, False
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        _warn_service_name(service_name)
        return current, False
    attrs = {SERVICE_NAME: service_name} if service_name else {}
    provider = TracerProvider(resource=Resource.create(attrs))
    trace.set_tracer_provider(provider)
    # set_tracer_provider refuses a second provider once one is set; use whatever won.
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider) and current is not provider:
        return current, False
    return provider, True


def _warn_service_name(service_name: str | None) -> None:
    if service_name:
        _log.warning(
            "loopwatch: service_name=%r ignored: the application's TracerProvider keeps its own"
            " resource",
            service_name,
        )


def resolve_metrics_port(value: int | None) -> int | None:
    """``metrics_port``: argument -> ``LOOPWATCH_METRICS_PORT`` -> off."""
    if value is None:
        if env_str(METRICS_PORT_ENV) is None:
            return None
        return env_int(METRICS_PORT_ENV, 0, minimum=0, maximum=65535)
    return check_int("metrics_port", value, minimum=0, maximum=65535)


def resolve_store_path(value: str | os.PathLike[str] | None) -> Path | None:
    """``store``: argument -> ``LOOPWATCH_DB`` -> off."""
    if value is None:
        raw = env_str(DB_ENV)
        return Path(raw) if raw else None
    return Path(value)


def resolve_otlp_endpoint(value: str | None, owns_provider: bool) -> str | None:
    """The traces URL: argument, else OTel's variables for a provider made here, else off."""
    if value is not None:
        check_url("otlp_endpoint", value)
        parts = urlsplit(value)
        if parts.path in ("", "/"):
            return value.rstrip("/") + _OTLP_TRACES_PATH
        return value
    if not owns_provider:
        return None
    # As OTel defines them: the traces variable is the full URL, the generic one a base URL.
    traces = env_str(_OTLP_TRACES_ENV)
    if traces:
        return check_url(_OTLP_TRACES_ENV, traces)
    base = env_str(_OTLP_ENV)
    return check_url(_OTLP_ENV, base).rstrip("/") + _OTLP_TRACES_PATH if base else None


def resolve_spool_dir(value: str | os.PathLike[str] | None) -> Path | None:
    """``spool_dir``: argument -> ``LOOPWATCH_SPOOL_DIR`` -> off (docs/telemetry.md, *The
    spool*)."""
    from .spooled import SPOOL_DIR_ENV

    if value is None:
        raw = env_str(SPOOL_DIR_ENV)
        return Path(raw) if raw else None
    return Path(value)


def otlp_processor(
    endpoint: str, shutdown_timeout_millis: int | None, spool_dir: Path | None = None
) -> SpanProcessor:
    """Live mode's output: OTLP/HTTP behind a bounded, counting batch processor; with a
    ``spool_dir``, batches that cannot be sent wait on disk instead of being dropped."""
    exporter: SpanExporter
    if spool_dir is not None:
        from .spooled import DEFAULT_SPOOL_MAX_MB, SPOOL_MAX_MB_ENV, SpoolingOTLPExporter

        max_mb = env_int(SPOOL_MAX_MB_ENV, DEFAULT_SPOOL_MAX_MB, minimum=1)
        exporter = SpoolingOTLPExporter(endpoint, spool_dir, max_bytes=max_mb << 20)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    return CountingBatchSpanProcessor(exporter, shutdown_timeout_millis=shutdown_timeout_millis)
