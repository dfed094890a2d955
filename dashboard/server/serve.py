"""``loopwatch serve``: live mode, one process owning the store (docs/serve.md).

Three ports, one event loop, one store:

- OTLP/HTTP (default 127.0.0.1:4318): ``POST /v1/traces`` (protobuf or JSON, gzip or not),
  answered 200 only once its spans are committed; ``GET /health``; the read-only JSON API under
  ``/api/v1/`` (see :mod:`loopwatch.dashboard.server.api`).
- ``/metrics`` (default 127.0.0.1:9464): the metrics of docs/metrics.md for every span received.
- the Streamlit dashboard (default 127.0.0.1:8501), an ``st.App`` reading the same store through
  :mod:`loopwatch.dashboard.app.source`; left out with ``ui=False`` (``--no-ui``).

Each port is a Starlette app served by its own ``uvicorn.Server`` in the same asyncio loop. On
SIGTERM or SIGINT the servers stop accepting, requests in flight are committed and answered, the
writer commits what it holds, and the store is checkpointed and closed. See docs/serve.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TextIO

from loopwatch.instrumentation.runtime.extras import MissingExtraError

from .ports import DEFAULT_METRICS_PORT, DEFAULT_OTLP_PORT, DEFAULT_UI_PORT

try:
    import starlette  # noqa: F401 (fail early, naming the extra)
    import uvicorn
except ImportError as exc:
    raise MissingExtraError.of("dashboard", __name__, exc) from exc

import uvicorn
from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor
from loopwatch.queries.store.database import Store
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..app import source
from . import api, tuning_api
from .collection import serving_collector
from .hosts import HostCheck, exposure_warning
from .housekeeping import Housekeeper, HousekeepingOptions, start_housekeeping
from .ingest import Ingest, IngestCollector, IngestOptions
from .receiver import RETRY_AFTER_S, Receiver, authorized

__all__ = [
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MEMORY_MB",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_OTLP_PORT",
    "DEFAULT_UI_PORT",
    "ServeOptions",
    "Server",
    "serve",
]

_log = logging.getLogger("loopwatch.serve")

DEFAULT_MAX_BODY_BYTES: Final = 20 << 20
"""Largest request body, compressed or not (the OpenTelemetry Collector's default: 20 MiB)."""
DEFAULT_MEMORY_MB: Final = 1024
"""DuckDB's memory cap in serve: without one, the blocks of a growing file stay cached up to 80%
of RAM (measured: RSS grew 195 -> 440 MB over 1M spans; capped at 256 MB it stayed at ~270 MB)."""
DEFAULT_BODY_TIMEOUT_S: Final = 60.0
"""Seconds a request body may take to arrive (at the 20 MiB body limit: ~350 KB/s at least)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeOptions:
    """Everything ``loopwatch serve`` takes; ports may be 0 (any free port)."""

    db: Path
    host: str = "127.0.0.1"
    otlp_port: int = DEFAULT_OTLP_PORT
    metrics_port: int = DEFAULT_METRICS_PORT
    ui_port: int = DEFAULT_UI_PORT
    token: str | None = None
    """When set, every request but ``GET /health`` must carry ``Authorization: Bearer TOKEN``."""
    write_token: str | None = None
    """The token of the write endpoints (limits, feedback); ``None``: ``token``; with neither,
    writes are taken only from loopback clients (docs/serve.md, "Limits held by serve")."""
    ui: bool = True
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    memory_mb: int = DEFAULT_MEMORY_MB
    """DuckDB's buffer pool cap (cached blocks, query working memory; large queries spill)."""
    checkpoint_mb: int | None = None
    """Write-ahead log DuckDB lets grow before folding it into the file (``None``: 16 MB)."""
    ingest: IngestOptions = field(default_factory=IngestOptions)
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    """A request body that has not arrived whole within this many seconds gets 408."""
    verify: bool = True
    """Read every block of the store at start, refusing a damaged file (docs/serve.md)."""
    allowed_hosts: tuple[str, ...] = ()
    """Names besides IP addresses, ``localhost`` and ``host`` that the ``Host`` header may carry
    when there is no token (see :mod:`loopwatch.dashboard.server.hosts`)."""
    housekeeping: HousekeepingOptions = field(default_factory=HousekeepingOptions)
    """Retention, rollups and the archive, run in the background (docs/store.md)."""


# --- the apps -------------------------------------------------------------------------------


def otlp_app(ingest: Ingest, store: Store, options: ServeOptions, reader: Any = None) -> Starlette:
    """The OTLP port's app: ``/v1/traces``, ``/health``, the JSON API (read through ``reader``)."""
    receiver = Receiver(
        ingest,
        token=options.token,
        max_body_bytes=options.max_body_bytes,
        body_timeout_s=options.body_timeout_s,
    )

    async def health(request: Request) -> Response:
        def counts() -> tuple[int, int]:
            cur = store.cursor()
            try:
                row = cur.execute(
                    "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM runs)"
                ).fetchone()
            finally:
                cur.close()
            assert row is not None
            return int(row[0]), int(row[1])

        state = ingest.store_health()
        status, error = state.state, state.error
        spans: int | None = None
        runs: int | None = None
        if status != "unavailable":
            try:
                spans, runs = await asyncio.to_thread(counts)
            except Exception as exc:  # the store cannot be read: say so, never "ok"
                status, error = "unavailable", f"the store cannot be read: {exc}"
        totals, pending = ingest.snapshot()
        since = datetime.fromtimestamp(state.since, UTC).isoformat().replace("+00:00", "Z")
        return JSONResponse(
            {
                "status": status,
                "spans": spans,
                "runs": runs,
                "db": str(store.path),
                "store": {"state": status, "error": error, "since": since},
                "ingest": {
                    "requests": totals.requests,
                    "spans_stored": totals.spans_stored,
                    "spans_rejected": totals.spans_rejected,
                    "duplicates": totals.duplicates,
                    "refused_busy": totals.refused_busy,
                    "failures": totals.failures,
                    "pending_bytes": pending,
                },
            },
            # A load balancer or start-up check reads the code: 200 only while commits work.
            status_code=200 if status == "ok" else 503,
            headers=None if status == "ok" else {"Retry-After": str(RETRY_AFTER_S)},
        )

    def guarded(
        endpoint: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def call(request: Request) -> Response:
            if not authorized(request, options.token):
                return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
            return await endpoint(request)

        return call

    routes = [
        Route("/v1/traces", receiver.handle, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        *(
            Route(route.path, guarded(route.endpoint), methods=["GET"])
            for route in api.routes(store, reader)
        ),
        *tuning_api.routes(store, token=options.token, write_token=options.write_token),
    ]
    return Starlette(routes=routes)


def metrics_app(metrics: MetricsSpanProcessor, options: ServeOptions) -> Starlette:
    """The Starlette app of the metrics port: ``GET /metrics``."""

    async def scrape(request: Request) -> Response:
        if not authorized(request, options.token):
            return Response("missing or wrong bearer token\n", status_code=401)
        # OpenMetrics when the scraper asks for it (Prometheus does): exemplars and # UNIT lines.
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(metrics.registry), media_type=content_type)

    return Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])


# --- the process ----------------------------------------------------------------------------


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to :class:`Server` (several share one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _quiet_uvicorn() -> None:
    # Access lines for every OTLP request would flood the output; errors still show.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(
            exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}; pick another port"
        ) from exc
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(slots=True)
class _Listener:
    name: str
    sock: socket.socket
    server: uvicorn.Server
    path: str

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])


class Server:
    """A running ``loopwatch serve``: build it, then ``await run()`` until :meth:`stop`."""

    def __init__(self, options: ServeOptions, *, out: TextIO | None = None) -> None:
        self.options = options
        self.out = out if out is not None else sys.stdout
        self.store: Store | None = None
        self.ingest: Ingest | None = None
        self.metrics: MetricsSpanProcessor | None = None
        self.housekeeper: Housekeeper | None = None
        self._listeners: list[_Listener] = []
        self._stopping = asyncio.Event()

    @property
    def ports(self) -> dict[str, int]:
        """The bound port of each listener (``otlp``, ``metrics``, ``ui``)."""
        return {listener.name: listener.port for listener in self._listeners}

    def stop(self) -> None:
        """Begin a clean shutdown (safe from a signal handler on the loop)."""
        self._stopping.set()

    async def run(self) -> None:
        """Open (and check) the store, serve until :meth:`stop`, then shut down cleanly."""
        options = self.options
        warning = exposure_warning(options.host, options.token)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
        store = self.store = Store(
            options.db, memory_mb=options.memory_mb, checkpoint_mb=options.checkpoint_mb
        )
        try:
            if options.verify:
                # A damaged block would otherwise surface later, as failed commits.
                store.verify()
            store.warm_up()
            metrics = self.metrics = MetricsSpanProcessor()
            ingest = self.ingest = Ingest(store, metrics, options.ingest)
            metrics.registry.register(IngestCollector(ingest))
            keeper = self.housekeeper = start_housekeeping(
                store, options.housekeeping, lambda: ingest.store_state.state == "ok", metrics
            )
            ingest.start()  # after housekeeping: every write marks its late rows
            source.set_live_store(store, reader=keeper.reader)
            source.set_write_token(options.write_token or options.token)
            try:
                await self._serve(store, ingest, metrics)
            finally:
                source.clear_live_store()
                keeper.stop()
                ingest.close()
        finally:
            try:
                store.close()
            except Exception as exc:  # e.g. the final checkpoint on a full disk
                print(
                    f"loopwatch serve: the store was closed without its final checkpoint ({exc}): "
                    "what was committed is in its write-ahead log, replayed at the next start",
                    file=sys.stderr,
                    flush=True,
                )
            print("loopwatch serve: store closed", file=self.out, flush=True)

    async def _serve(self, store: Store, ingest: Ingest, metrics: MetricsSpanProcessor) -> None:
        options = self.options
        otlp: Any = otlp_app(ingest, store, options, source.live_reader())
        scrape: Any = metrics_app(metrics, options)
        if options.token is None:
            # No token: refuse requests a web page could make through DNS rebinding.
            names = (options.host, *options.allowed_hosts)
            otlp, scrape = HostCheck(otlp, names), HostCheck(scrape, names)
        apps: list[tuple[str, int, Any, Literal["on", "off"], str]] = [
            ("otlp", options.otlp_port, otlp, "off", "/v1/traces"),
            ("metrics", options.metrics_port, scrape, "off", "/metrics"),
        ]
        if options.ui:
            from ..app.ui import share_gil_with_ingest, ui_app

            share_gil_with_ingest()
            apps.append(("ui", options.ui_port, ui_app(), "on", "/"))
        try:
            for name, port, app, lifespan, path in apps:
                sock = _bind(options.host, port)
                config = uvicorn.Config(
                    app,
                    lifespan=lifespan,
                    log_config=None,
                    log_level="warning",
                    access_log=False,
                    timeout_graceful_shutdown=30,
                    limit_concurrency=None,
                    h11_max_incomplete_event_size=64 * 1024,
                )
                self._listeners.append(_Listener(name, sock, _QuietServer(config), path))
        except OSError:
            for listener in self._listeners:
                listener.sock.close()
            raise
        _quiet_uvicorn()
        tasks = [
            asyncio.create_task(listener.server.serve(sockets=[listener.sock]))
            for listener in self._listeners
        ]
        while not all(listener.server.started for listener in self._listeners):
            if any(task.done() for task in tasks):
                break
            await asyncio.sleep(0.02)
        _quiet_uvicorn()  # again: Streamlit sets its own levels when its app starts
        labels = {"otlp": "OTLP/HTTP ", "metrics": "metrics   ", "ui": "dashboard "}
        host = _url_host(options.host)
        for listener in self._listeners:
            print(
                f"{labels[listener.name]} http://{host}:{listener.port}{listener.path}",
                file=self.out,
                flush=True,
            )
        print(f"store      {store.path}", file=self.out, flush=True)
        stopper = asyncio.create_task(self._stopping.wait())
        await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        print("loopwatch serve: shutting down", file=self.out, flush=True)
        ingest.drain()
        # The OTLP port first: no new spans, those in flight committed and answered.
        for listener in self._listeners:
            listener.server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        stopper.cancel()
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.sock.close()


def serve(options: ServeOptions, *, out: TextIO | None = None) -> int:
    """Run ``loopwatch serve`` in this thread until SIGTERM or SIGINT; returns the exit code."""
    server = Server(options, out=out)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, server.stop)
        await server.run()

    with serving_collector():
        asyncio.run(main())
    return 0
