"""The ``/metrics`` HTTP endpoint: :func:`serve_metrics` and the :class:`MetricsServer` it returns
(docs/metrics.md)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, start_http_server

from ..runtime.settings import env_int
from ..runtime.validate import check_int

__all__ = [
    "DEFAULT_METRICS_PORT",
    "METRICS_PORT_ENV",
    "HoldsRegistry",
    "MetricsServer",
    "MetricsServerError",
    "serve_metrics",
]

DEFAULT_METRICS_PORT: Final = 9464
METRICS_PORT_ENV: Final = "LOOPWATCH_METRICS_PORT"


@runtime_checkable
class HoldsRegistry(Protocol):
    """Anything that exposes its metrics as a ``registry`` (a ``MetricsSpanProcessor``)."""

    registry: CollectorRegistry


@dataclass(eq=False)
class MetricsServer:
    """A running ``/metrics`` endpoint; stop it with :meth:`stop` or use it as a context manager."""

    host: str
    """The address it is bound to."""
    port: int
    """The port it listens on (the real one when 0 was asked for)."""
    _httpd: Any = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` has been called."""
        return self._stopped

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self, timeout: float = 5.0) -> None:
        """Stops serving and closes the socket. Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MetricsServerError(OSError):
    """The ``/metrics`` server could not start (typically: the port is taken)."""


def serve_metrics(
    registry: CollectorRegistry | HoldsRegistry,
    port: int | None = None,
    *,
    host: str = "127.0.0.1",
) -> MetricsServer:
    """Serves ``registry`` (or a processor's registry) as ``/metrics`` over HTTP in a daemon thread.

    ``port``: argument -> ``LOOPWATCH_METRICS_PORT`` -> 9464; 0 picks a free port (read it from
    :attr:`MetricsServer.port`). Binds 127.0.0.1 unless ``host`` says otherwise.

    Raises:
        ValueError: the port is not an integer in 0..65535.
        MetricsServerError: the server could not bind (the message names host and port).
    """
    if isinstance(registry, HoldsRegistry):
        registry = registry.registry
    if port is None:
        port = env_int(METRICS_PORT_ENV, DEFAULT_METRICS_PORT, minimum=0, maximum=65535)
    check_int("metrics port", port, minimum=0, maximum=65535)
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsServerError(
            exc.errno,
            f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}; pick another port"
            f" (metrics_port=..., {METRICS_PORT_ENV}) or stop the process holding it",
        ) from exc
    return MetricsServer(host=host, port=int(httpd.server_address[1]), _httpd=httpd, _thread=thread)
