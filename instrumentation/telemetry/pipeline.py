"""One call that wires loopwatch's telemetry: :func:`instrument`.

It finds (or makes) the ``TracerProvider``, adds the outputs asked for (a DuckDB file, an
OTLP/HTTP endpoint, a Prometheus ``/metrics`` endpoint) and installs the observer factory, so the
reference loop and ``LoopGuard`` emit spans with no further code. Every option follows
constructor argument -> environment variable -> default; every output is off unless asked for.

Telemetry never breaks the agent: an output that cannot start is logged and replaced by one that
counts what it loses (``loopwatch_telemetry_dropped_total``), and a span processor that fails is
skipped for that span and counted. The store is found through an entry point or handed in
(``span_processors``), never imported from the layer above (docs/telemetry.md).
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
from typing import Any

from ..runtime.extras import MissingExtraError

try:
    import opentelemetry.sdk.trace  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("otel", __name__, exc) from exc

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from ..runtime.observer import get_observer_factory, set_observer_factory
from ..runtime.validate import check_url
from .outputs import (
    DROP_PROCESSOR_FAILED,
    DROP_STORE_UNAVAILABLE,
    Fanout,
    Unavailable,
    flush_all,
    lost_spans,
    shutdown_all,
)
from .stores import StoreOutput
from .tracing import OTelObserverFactory, resolve_content_max_chars
from .wiring import (
    DB_ENV,
    Wiring,
    given_outputs,
    otlp_processor,
    resolve_metrics_port,
    resolve_otlp_endpoint,
    resolve_provider,
    resolve_spool_dir,
    resolve_store_path,
)

__all__ = [
    "DB_ENV",
    "DROP_PROCESSOR_FAILED",
    "DROP_STORE_UNAVAILABLE",
    "Instrumentation",
    "instrument",
]

_log = logging.getLogger(__name__)


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
    _store_output: StoreOutput | None = field(default=None, repr=False)
    _drops_seen: int = field(default=0, repr=False)
    _fanout: Fanout | None = field(default=None, repr=False)
    _factory: OTelObserverFactory | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    @property
    def processors(self) -> tuple[SpanProcessor, ...]:
        """The outputs wired, in order: store, OTLP, metrics, then those handed in."""
        return self._processors

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
        if self._store_output is not None:
            return self._store_output.error
        return self._store_error

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Pushes every ended span through to the outputs.

        True only when every output finished in time **and** no span was lost since the last
        ``force_flush`` (or since :func:`instrument`): an endpoint that is down, a locked store
        or a full queue make it False, with the reasons counted in
        ``loopwatch.instrumentation.runtime.drops`` (``loopwatch_telemetry_dropped_total``).
        """
        if self._closed:
            return True
        ok = flush_all(self._processors, timeout_millis)
        total = lost_spans()
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
        shutdown_all(self._processors)
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
_fanouts: weakref.WeakKeyDictionary[TracerProvider, Fanout] = weakref.WeakKeyDictionary()


def _check_arguments(tracer_provider: object, otlp_endpoint: str | None) -> None:
    """Refuse a ``tracer_provider`` that is not an SDK one and an ``otlp_endpoint`` that is not
    an http(s) URL."""
    if tracer_provider is not None and not isinstance(tracer_provider, TracerProvider):
        raise TypeError(
            "tracer_provider must be an opentelemetry.sdk.trace.TracerProvider, got"
            f" {type(tracer_provider).__name__}"
        )
    if otlp_endpoint is not None:
        check_url("otlp_endpoint", otlp_endpoint)


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
    span_processors: Sequence[SpanProcessor] = (),
    exporter: SpanExporter | None = None,
    shutdown_timeout_millis: int | None = None,
    spool_dir: str | os.PathLike[str] | None = None,
) -> Instrumentation:
    """Wires loopwatch's telemetry and returns the handle (``force_flush()``, ``shutdown()``).

    Args:
        service_name: ``service.name`` of the provider made here (argument ->
            ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` -> OTel's ``unknown_service``).
            An application's own provider keeps its own resource.
        store: file mode: spans and runs are written to this DuckDB file (argument ->
            ``LOOPWATCH_DB`` -> off). The store is found through the ``loopwatch.stores``
            entry point (``loopwatch[store]`` registers it), never imported from here; without
            that extra, ``store_error`` holds a ``MissingExtraError`` naming it.
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
        span_processors: further outputs, handed over the OpenTelemetry way (for example
            ``[store_processor(DuckDBSpanExporter(path))]`` from
            ``loopwatch.queries.store.exporter``, or any SDK processor); they are flushed,
            replaced and shut down with the rest.
        exporter: a ``SpanExporter`` to send spans to through a ``CountingBatchSpanProcessor``
            (:mod:`.processor`: bounded memory, every loss counted).
        shutdown_timeout_millis: the longest ``shutdown()`` (and so the process's exit) waits
            for the OTLP endpoint or ``exporter`` to take what is queued (argument ->
            ``LOOPWATCH_SHUTDOWN_TIMEOUT_MS`` -> 5000); what is still held then is counted as
            ``shutdown`` drops (docs/telemetry.md, *Shutdown*).
        spool_dir: live mode: a bounded on-disk spool for what the endpoint cannot take now
            (argument -> ``LOOPWATCH_SPOOL_DIR`` -> off; docs/telemetry.md, *The spool*).

    Calling it again replaces the earlier wiring (the earlier handle is shut down first), so
    spans are never exported twice. An output that cannot start (a locked or unwritable store,
    a taken port) is logged, not raised: the agent runs on and the loss is counted.

    Raises:
        TypeError: ``tracer_provider`` is not an SDK ``TracerProvider``, a ``span_processors``
            item is not a ``SpanProcessor`` or ``exporter`` not a ``SpanExporter``.
        ValueError: ``otlp_endpoint`` (or the OTLP variable used) is not an http(s) URL,
            ``metrics_port`` or ``LOOPWATCH_METRICS_PORT`` is not a port number,
            ``store_writer`` or ``LOOPWATCH_STORE_WRITER`` is not a known writer, or
            ``metrics_registry`` already holds another processor's loopwatch metrics (what the
            call had opened is closed again).
    """
    global _active
    _check_arguments(tracer_provider, otlp_endpoint)  # refused before anything is replaced
    wiring = Wiring(
        store_path=resolve_store_path(store),
        otlp_endpoint=otlp_endpoint,
        metrics_port=resolve_metrics_port(metrics_port),
        metrics_registry=metrics_registry,
        metrics_host=metrics_host,
        given=given_outputs(span_processors, exporter, shutdown_timeout_millis),
        shutdown_timeout_millis=shutdown_timeout_millis,
        spool_dir=resolve_spool_dir(spool_dir),
    )
    wiring.find_store(store_writer)
    content_cap = resolve_content_max_chars(content_max_chars)

    with _lock:
        previous_metrics = None
        if _active is not None:
            previous_metrics = _active.metrics
            _active.shutdown()
        provider, owns = resolve_provider(tracer_provider, service_name)
        handle = Instrumentation(
            tracer_provider=provider, owns_provider=owns, capture_content=False
        )
        handle._drops_seen = lost_spans()
        _open_outputs(handle, wiring, previous_metrics)
        _install(handle, capture_content, content_cap)
        _active = handle
    atexit.register(handle.shutdown)
    return handle


def _open_outputs(handle: Instrumentation, wiring: Wiring, previous_metrics: Any) -> None:
    processors: list[SpanProcessor] = []
    try:
        if wiring.store_path is not None:
            handle.store_path = wiring.store_path
            processors.append(_store_processor(handle, wiring))
        endpoint = resolve_otlp_endpoint(wiring.otlp_endpoint, handle.owns_provider)
        if endpoint is not None:
            handle.otlp_endpoint = endpoint
            processors.append(
                otlp_processor(endpoint, wiring.shutdown_timeout_millis, wiring.spool_dir)
            )
        if wiring.metrics_port is not None or wiring.metrics_registry is not None:
            _wire_metrics(handle, processors, wiring, previous_metrics)
        processors.extend(wiring.given)
    except BaseException:
        # Half-built wiring must not keep a store file locked or a port bound.
        handle._processors = tuple(processors + wiring.given)
        handle.shutdown()
        raise
    if not processors and handle.owns_provider:
        _log.warning(
            "loopwatch: instrument() has no output (store, otlp_endpoint, metrics_port,"
            " span_processors): spans are made but go nowhere"
        )
    handle._processors = tuple(processors)


def _install(handle: Instrumentation, capture_content: bool | None, content_cap: int) -> None:
    provider = handle.tracer_provider
    fanout = _fanouts.get(provider)
    if fanout is None:
        fanout = Fanout()
        provider.add_span_processor(fanout)
        _fanouts[provider] = fanout
    handle._fanout = fanout
    fanout.processors = handle._processors
    factory = OTelObserverFactory(
        provider, capture_content=capture_content, content_max_chars=content_cap
    )
    handle.capture_content = factory.capture_content
    handle._factory = factory
    set_observer_factory(factory)


def _store_processor(handle: Instrumentation, wiring: Wiring) -> SpanProcessor:
    try:
        if wiring.store is None:
            raise wiring.store_missing or MissingExtraError("store", "instrument(store=...)", None)
        # The store tries again on every batch and counts what it cannot write;
        # handle.store_error reads its current error.
        output = wiring.store.open(wiring.store_path or Path(), writer=wiring.writer)
        handle._store_output = output
        return output.processor
    except Exception as exc:
        handle._store_error = f"{type(exc).__name__}: {exc}"
        _log.error(
            "loopwatch: the store %s cannot be used, its spans will be counted as dropped (%s): %s",
            wiring.store_path,
            DROP_STORE_UNAVAILABLE,
            handle.store_error,
        )
        return Unavailable(DROP_STORE_UNAVAILABLE)


def _wire_metrics(
    handle: Instrumentation, processors: list[SpanProcessor], wiring: Wiring, previous: Any
) -> None:
    from .metrics import MetricsSpanProcessor, serve_metrics

    port, registry, host = wiring.metrics_port, wiring.metrics_registry, wiring.metrics_host

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
