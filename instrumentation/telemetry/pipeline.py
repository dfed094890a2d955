"""One call that wires loopwatch's telemetry: :func:`instrument`.

It finds (or makes) the ``TracerProvider``, adds the outputs asked for (a DuckDB file, an
OTLP/HTTP endpoint, a Prometheus ``/metrics`` endpoint) and installs the observer factory, so the
reference loop and ``LoopGuard`` emit spans with no further code. Every option follows
constructor argument -> environment variable -> default; every output is off unless asked for.

Telemetry never breaks the agent: an output that cannot start is logged and replaced by one that
counts what it loses (``loopwatch_telemetry_dropped_total``), and a span processor that fails is
skipped for that span and counted.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from ..runtime.extras import MissingExtraError

try:
    import opentelemetry.sdk.trace  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("otel", __name__, exc) from exc

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from ..runtime.drops import dropped, record_drop
from ..runtime.observer import get_observer_factory, set_observer_factory
from ..runtime.settings import env_int, env_str
from ..runtime.validate import check_int, check_url
from .metrics import METRICS_PORT_ENV
from .processor import CountingBatchSpanProcessor
from .tracing import OTelObserverFactory, resolve_content_max_chars

__all__ = [
    "DB_ENV",
    "DROP_PROCESSOR_FAILED",
    "DROP_STORE_UNAVAILABLE",
    "Instrumentation",
    "instrument",
]

_log = logging.getLogger(__name__)

DB_ENV: Final = "LOOPWATCH_DB"
"""The DuckDB file spans are written to when ``store`` is not given."""
_OTLP_TRACES_ENV: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_OTLP_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
_OTLP_TRACES_PATH: Final = "/v1/traces"

# --- drop reasons (loopwatch_telemetry_dropped_total{reason}) ------------------------------------
DROP_PROCESSOR_FAILED: Final = "processor_failed"
"""A span processor raised on a span; that processor skipped it."""
DROP_STORE_UNAVAILABLE: Final = "store_unavailable"
"""The DuckDB store could not be opened; every span meant for it is counted here."""


class _Fanout(SpanProcessor):
    """The one processor loopwatch adds to a provider; it forwards to the active wiring.

    A provider cannot drop a processor once added, so calling :func:`instrument` again swaps what
    this forwards to instead of stacking a second set of exporters.
    """

    def __init__(self) -> None:
        self.processors: tuple[SpanProcessor, ...] = ()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for p in self.processors:
            try:
                p.on_start(span, parent_context)
            except Exception:
                record_drop(DROP_PROCESSOR_FAILED)

    def on_end(self, span: ReadableSpan) -> None:
        for p in self.processors:
            try:
                p.on_end(span)
            except Exception:
                record_drop(DROP_PROCESSOR_FAILED)

    def shutdown(self) -> None:
        # The application shut its provider down: flush and close loopwatch's outputs with it.
        processors, self.processors = self.processors, ()
        _shutdown(processors)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return _flush(self.processors, timeout_millis)


def _lost() -> int:
    # Spans lost on the way out; observer errors lose no exported span.
    return sum(n for reason, n in dropped().items() if reason != "observer_error")


def _shutdown(processors: Sequence[SpanProcessor]) -> None:
    for p in processors:
        try:
            p.shutdown()
        except Exception:
            _log.exception("loopwatch: shutting down %s failed", type(p).__name__)


def _flush(processors: Sequence[SpanProcessor], timeout_millis: int) -> bool:
    ok = True
    for p in processors:
        try:
            ok = p.force_flush(timeout_millis) and ok
        except Exception:
            _log.exception("loopwatch: flushing %s failed", type(p).__name__)
            ok = False
    return ok


class _Unavailable(SpanProcessor):
    """Stands in for an output that could not start: counts every span it would have written."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def on_end(self, span: ReadableSpan) -> None:
        record_drop(self.reason)


@dataclass(eq=False)
class Instrumentation:
    """What :func:`instrument` wired. Flush it before reading the outputs; shut it down at the end
    (also done at interpreter exit)."""

    tracer_provider: TracerProvider
    """The provider loopwatch's spans go through (the application's own when it had one)."""
    owns_provider: bool
    """True when :func:`instrument` made the provider (and set it as the global one)."""
    capture_content: bool
    """Whether raw tool arguments/results and message content are recorded."""
    store_path: Path | None = None
    """The DuckDB file spans are written to (file mode), or ``None``."""
    _store_error: str | None = field(default=None, repr=False)
    otlp_endpoint: str | None = None
    """The URL spans are sent to over OTLP/HTTP (live mode), or ``None``."""
    metrics: Any = None
    """The ``MetricsSpanProcessor`` turning spans into Prometheus metrics, or ``None``."""
    metrics_server: Any = None
    """The running ``/metrics`` server (``.port``, ``.url``), or ``None``."""
    _processors: tuple[SpanProcessor, ...] = field(default=(), repr=False)
    _store_exporter: Any = field(default=None, repr=False)
    _drops_seen: int = field(default=0, repr=False)
    _fanout: _Fanout | None = field(default=None, repr=False)
    _factory: OTelObserverFactory | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    @property
    def metrics_url(self) -> str | None:
        """``http://127.0.0.1:<port>/metrics`` when metrics are served."""
        return None if self.metrics_server is None else str(self.metrics_server.url)

    @property
    def store_error(self) -> str | None:
        """Why the store cannot be written, while it cannot (its spans are counted as dropped).

        Live: the exporter tries again on every batch, and once it has opened the file (the
        process that held the lock exited) this is ``None`` again.
        """
        exporter = self._store_exporter
        if exporter is not None:
            error = exporter.open_error
            return None if error is None else str(error)
        return self._store_error

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Pushes every ended span through to the outputs.

        True only when every output finished in time **and** no span was lost since the last
        ``force_flush`` (or since :func:`instrument`): an endpoint that is down, a locked store
        or a full queue make it False, with the reasons counted in
        ``loopwatch.instrumentation.drops`` (``loopwatch_telemetry_dropped_total``).
        """
        if self._closed:
            return True
        ok = _flush(self._processors, timeout_millis)
        total = _lost()
        lost, self._drops_seen = total - self._drops_seen, total
        return ok and lost == 0

    def shutdown(self) -> None:
        """Flushes, closes the outputs and stops the ``/metrics`` server. Safe to call twice.

        Runs after this no longer emit loopwatch spans. An application's own provider and its
        other processors are left as they were.
        """
        global _active
        with _lock:
            if self._closed:
                return
            self._closed = True
            if self._fanout is not None and self._fanout.processors == self._processors:
                self._fanout.processors = ()
            if self._factory is not None and get_observer_factory() is self._factory:
                set_observer_factory(None)
            if _active is self:
                _active = None
        atexit.unregister(self.shutdown)
        _shutdown(self._processors)
        if self.metrics_server is not None:
            try:
                self.metrics_server.stop()
            except Exception:
                _log.exception("loopwatch: stopping the /metrics server failed")

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


_lock = threading.RLock()
_active: Instrumentation | None = None
_fanouts: weakref.WeakKeyDictionary[TracerProvider, _Fanout] = weakref.WeakKeyDictionary()


def instrument(
    *,
    service_name: str | None = None,
    store: str | os.PathLike[str] | None = None,
    otlp_endpoint: str | None = None,
    metrics_port: int | None = None,
    tracer_provider: TracerProvider | None = None,
    capture_content: bool | None = None,
    metrics_registry: Any = None,
    metrics_host: str = "127.0.0.1",
    store_writer: str | None = None,
    content_max_chars: int | None = None,
) -> Instrumentation:
    """Wires loopwatch's telemetry and returns the handle (``force_flush()``, ``shutdown()``).

    Args:
        service_name: ``service.name`` of the provider made here (argument ->
            ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` -> OTel's ``unknown_service``).
            An application's own provider keeps its own resource.
        store: file mode: spans and runs are written to this DuckDB file (argument ->
            ``LOOPWATCH_DB`` -> off).
        otlp_endpoint: live mode: spans go to this OTLP/HTTP endpoint, e.g.
            ``http://127.0.0.1:4318`` (``/v1/traces`` is added to a URL without a path).
            Without it, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``
            are honoured as OTel defines them, only when the provider is made here (an
            application's provider has its exporters already). Default: off.
        metrics_port: serve Prometheus ``/metrics`` on ``metrics_host:port`` (argument ->
            ``LOOPWATCH_METRICS_PORT`` -> off); 0 picks a free port.
        tracer_provider: the SDK provider to use. Default: the global one when it is an SDK
            ``TracerProvider``, else a new one, set as the global provider. Sampling is whatever
            that provider does (for a new one, OTel's ``OTEL_TRACES_SAMPLER`` settings).
        capture_content: record raw tool arguments/results and message content (argument ->
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` -> off).
        metrics_registry: a ``prometheus_client`` registry to register the metrics in (e.g. the
            application's ``REGISTRY``), instead of a private one; metrics are derived whenever
            this or a port is given.
        metrics_host: the address ``/metrics`` binds to.
        store_writer: who writes the store file (argument -> ``LOOPWATCH_STORE_WRITER`` ->
            ``inline``): ``inline`` (this process) or ``process`` (a writer process that owns
            the file while this process converts spans; faster for span-heavy batch jobs,
            see ``DuckDBSpanExporter``).
        content_max_chars: the size cap of one captured-content attribute, in characters
            (argument -> ``LOOPWATCH_CONTENT_MAX_CHARS`` -> 16384; 0 = no cap). A cut value ends
            with ``…[truncated at N of M chars]`` and is named in ``loopwatch.content.truncated``.

    Calling it again replaces the earlier wiring (the earlier handle is shut down first), so
    spans are never exported twice. An output that cannot start (a locked or unwritable store,
    a taken port) is logged, not raised: the agent runs on and the loss is counted.

    Raises:
        TypeError: ``tracer_provider`` is not an SDK ``TracerProvider``.
        ValueError: ``otlp_endpoint`` (or the OTLP variable used) is not an http(s) URL,
            ``metrics_port`` or ``LOOPWATCH_METRICS_PORT`` is not a port number,
            ``store_writer`` or ``LOOPWATCH_STORE_WRITER`` is not a known writer, or
            ``metrics_registry`` already holds another processor's loopwatch metrics (what the
            call had opened is closed again).
    """
    global _active
    if tracer_provider is not None and not isinstance(tracer_provider, TracerProvider):
        raise TypeError(
            "tracer_provider must be an opentelemetry.sdk.trace.TracerProvider, got"
            f" {type(tracer_provider).__name__}"
        )
    if otlp_endpoint is not None:
        check_url("otlp_endpoint", otlp_endpoint)  # refused before anything is replaced
    port = _metrics_port(metrics_port)
    content_cap = resolve_content_max_chars(content_max_chars)
    store_path = _store_path(store)
    writer = _store_writer(store_writer) if store_path is not None else None

    with _lock:
        previous_metrics = None
        if _active is not None:
            previous_metrics = _active.metrics
            _active.shutdown()

        provider, owns = _provider(tracer_provider, service_name)
        handle = Instrumentation(
            tracer_provider=provider, owns_provider=owns, capture_content=False
        )
        handle._drops_seen = _lost()
        processors: list[SpanProcessor] = []
        try:
            if store_path is not None:
                handle.store_path = store_path
                processors.append(_store_processor(store_path, handle, writer))
            endpoint = _otlp_endpoint(otlp_endpoint, owns)
            if endpoint is not None:
                handle.otlp_endpoint = endpoint
                processors.append(_otlp_processor(endpoint))
            if port is not None or metrics_registry is not None:
                _wire_metrics(
                    handle, processors, port, metrics_registry, metrics_host, previous_metrics
                )
        except BaseException:
            # Half-built wiring must not keep a store file locked or a port bound.
            handle._processors = tuple(processors)
            handle.shutdown()
            raise

        if not processors and owns:
            _log.warning(
                "loopwatch: instrument() has no output (store, otlp_endpoint, metrics_port):"
                " spans are made but go nowhere"
            )
        fanout = _fanouts.get(provider)
        if fanout is None:
            fanout = _Fanout()
            provider.add_span_processor(fanout)
            _fanouts[provider] = fanout
        handle._processors = tuple(processors)
        handle._fanout = fanout
        fanout.processors = handle._processors

        factory = OTelObserverFactory(
            provider, capture_content=capture_content, content_max_chars=content_cap
        )
        handle.capture_content = factory.capture_content
        handle._factory = factory
        set_observer_factory(factory)
        _active = handle
    atexit.register(handle.shutdown)
    return handle


def _provider(
    given: TracerProvider | None, service_name: str | None
) -> tuple[TracerProvider, bool]:
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


def _metrics_port(value: int | None) -> int | None:
    if value is None:
        if env_str(METRICS_PORT_ENV) is None:
            return None
        return env_int(METRICS_PORT_ENV, 0, minimum=0, maximum=65535)
    return check_int("metrics_port", value, minimum=0, maximum=65535)


def _store_path(value: str | os.PathLike[str] | None) -> Path | None:
    if value is None:
        raw = env_str(DB_ENV)
        return Path(raw) if raw else None
    return Path(value)


def _otlp_endpoint(value: str | None, owns_provider: bool) -> str | None:
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


def _otlp_processor(endpoint: str) -> SpanProcessor:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return CountingBatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))


def _store_writer(value: str | None) -> str | None:
    try:
        from loopwatch.queries.store.exporter import resolve_writer
    except ImportError:  # the store's own dependencies are missing: reported when it is made
        return value
    return resolve_writer(value)


def _store_processor(path: Path, handle: Instrumentation, writer: str | None) -> SpanProcessor:
    try:
        from loopwatch.queries.store.exporter import DuckDBSpanExporter, store_processor

        exporter = DuckDBSpanExporter(path, writer=writer)
        # The exporter tries again on every batch and counts what it cannot write;
        # handle.store_error reads its current error.
        handle._store_exporter = exporter
        # File mode's defaults (bigger batches and queue) fit a batch job ending spans fast.
        return store_processor(exporter)
    except Exception as exc:
        handle._store_error = f"{type(exc).__name__}: {exc}"
        _log.error(
            "loopwatch: the store %s cannot be used, its spans will be counted as dropped (%s): %s",
            path,
            DROP_STORE_UNAVAILABLE,
            handle.store_error,
        )
        return _Unavailable(DROP_STORE_UNAVAILABLE)


def _wire_metrics(
    handle: Instrumentation,
    processors: list[SpanProcessor],
    port: int | None,
    registry: Any,
    host: str,
    previous: Any,
) -> None:
    from .metrics import MetricsSpanProcessor, serve_metrics

    # Counters live for the process: a second instrument() keeps counting in the same series
    # (a registry holds one processor's metrics only).
    if previous is not None and (registry is None or registry is previous.registry):
        processor = previous
    else:
        processor = MetricsSpanProcessor(registry)
    handle.metrics = processor
    processors.append(processor)
    if port is None:
        return
    try:
        handle.metrics_server = serve_metrics(processor, port, host=host)
    except OSError as exc:
        _log.error("loopwatch: /metrics is not served: %s", exc)
