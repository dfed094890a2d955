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
import hmac
import json
import logging
import signal
import socket
import sys
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
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
from google.rpc import status_pb2
from loopwatch.instrumentation.telemetry.metrics import MetricsSpanProcessor
from loopwatch.queries.ingest.otlp import (
    CONTENT_TYPE_JSON,
    CONTENT_TYPE_PROTOBUF,
    OtlpDecodeError,
    encode_response,
)
from loopwatch.queries.store.database import Store, StoreError
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..app import source
from . import api
from .ingest import Ingest, IngestCollector, IngestOptions

__all__ = [
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
RETRY_AFTER_S: Final = 1
"""Seconds a refused sender is asked to wait (429/503)."""
_BUSY: Final = "loopwatch serve is busy committing: retry after a second"


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
    ui: bool = True
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    memory_mb: int = DEFAULT_MEMORY_MB
    """DuckDB's buffer pool cap (cached blocks, query working memory; large queries spill)."""
    ingest: IngestOptions = field(default_factory=IngestOptions)


# --- OTLP/HTTP ------------------------------------------------------------------------------


def _status_body(content_type: str, code: int, message: str) -> tuple[bytes, str]:
    """A ``google.rpc.Status`` in the request's encoding, as OTLP/HTTP says errors are sent."""
    if content_type == CONTENT_TYPE_PROTOBUF:
        status = status_pb2.Status(code=code, message=message)
        return bytes(status.SerializeToString()), CONTENT_TYPE_PROTOBUF
    return json.dumps({"code": code, "message": message}).encode(), CONTENT_TYPE_JSON


# gRPC codes for the Status body of each HTTP error.
_RPC_CODE: Final = {400: 3, 401: 16, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


def _error(status: int, message: str, content_type: str = CONTENT_TYPE_JSON) -> Response:
    body, media = _status_body(content_type, _RPC_CODE.get(status, 2), message)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status in (429, 503) else None
    return Response(body, status_code=status, media_type=media, headers=headers)


def _media_type(request: Request) -> str | None:
    raw = request.headers.get("content-type", "")
    media = raw.split(";", 1)[0].strip().lower()
    if media in (CONTENT_TYPE_PROTOBUF, CONTENT_TYPE_JSON):
        return media
    return None


class _TooLarge(Exception):
    pass


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body without its ``Content-Encoding``; :class:`_TooLarge` past ``limit`` bytes (a
    gzip bomb stops there, never inflated whole), ``ValueError`` for a corrupt stream."""
    if encoding in ("", "identity"):
        return body
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}[encoding]
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"the {encoding} body is corrupt ({exc})") from exc
    if len(out) > limit or inflater.unconsumed_tail:
        raise _TooLarge
    if not inflater.eof:
        raise ValueError(f"the {encoding} body is truncated")
    return out


class _Receiver:
    """The ``POST /v1/traces`` endpoint."""

    def __init__(self, ingest: Ingest, options: ServeOptions) -> None:
        self.ingest = ingest
        self.options = options

    async def handle(self, request: Request) -> Response:
        """Answer one export request."""
        response = await self._answer(request)
        self.ingest.answered(response.status_code)
        return response

    async def _answer(self, request: Request) -> Response:
        media = _media_type(request)
        reply_type = media or CONTENT_TYPE_JSON
        if not _authorized(request, self.options.token):
            return _error(401, "missing or wrong bearer token", reply_type)
        if media is None:
            return _error(
                415,
                f"unsupported content type {request.headers.get('content-type', '')!r}: send "
                f"{CONTENT_TYPE_PROTOBUF} or {CONTENT_TYPE_JSON}",
            )
        encoding = request.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip", "deflate"):
            return _error(
                415, f"unsupported content encoding {encoding!r}: send gzip or none", media
            )
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length")
        try:
            declared_size = int(declared) if declared is not None else None
        except ValueError:
            return _error(400, f"bad Content-Length {declared!r}", media)
        if declared_size is not None and declared_size > limit:
            return _error(
                413, f"body of {declared_size} bytes is over the {limit}-byte limit", media
            )
        held = [declared_size if declared_size is not None else limit]
        if not self.ingest.admit(held[0]):
            return _error(503, _BUSY, media)
        try:
            return await self._handle(request, media, encoding, limit, held)
        finally:
            self.ingest.release(held[0])

    async def _handle(
        self, request: Request, media: str, encoding: str, limit: int, held: list[int]
    ) -> Response:
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return _error(413, f"body over the {limit}-byte limit", media)
                chunks.append(chunk)
        except ClientDisconnect:
            return _error(400, "the sender went away before the body was complete", media)
        raw = b"".join(chunks)
        try:
            body = _decompress(raw, encoding, limit)
        except _TooLarge:
            return _error(413, f"decompressed body over the {limit}-byte limit", media)
        except ValueError as exc:
            return _error(400, str(exc), media)
        extra = len(body) - held[0]
        if extra > 0:
            if not self.ingest.grow(held[0], extra):
                return _error(503, _BUSY, media)
            held[0] += extra
        try:
            result = await self.ingest.ingest(body, media)
        except OtlpDecodeError as exc:
            return _error(400, str(exc), media)
        except StoreError as exc:
            return _error(503, f"spans not committed, retry: {exc}", media)
        message = result.message
        if result.rejected and not result.stored and not result.duplicate:
            # Nothing in the request could be stored: a malformed request, not a partial one.
            return _error(400, f"no span could be stored: {message}", media)
        return Response(
            encode_response(media, result.rejected, message), status_code=200, media_type=media
        )


def _authorized(request: Request, token: str | None) -> bool:
    if token is None:
        return True
    given = request.headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def otlp_app(ingest: Ingest, store: Store, options: ServeOptions) -> Starlette:
    """The Starlette app of the OTLP port: ``/v1/traces``, ``/health`` and the JSON API."""
    receiver = _Receiver(ingest, options)

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

        spans, runs = await asyncio.to_thread(counts)
        totals, pending = ingest.snapshot()
        return JSONResponse(
            {
                "status": "ok",
                "spans": spans,
                "runs": runs,
                "db": str(store.path),
                "ingest": {
                    "requests": totals.requests,
                    "spans_stored": totals.spans_stored,
                    "spans_rejected": totals.spans_rejected,
                    "duplicates": totals.duplicates,
                    "refused_busy": totals.refused_busy,
                    "pending_bytes": pending,
                },
            }
        )

    def guarded(
        endpoint: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def call(request: Request) -> Response:
            if not _authorized(request, options.token):
                return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
            return await endpoint(request)

        return call

    routes = [
        Route("/v1/traces", receiver.handle, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        *(
            Route(route.path, guarded(route.endpoint), methods=["GET"])
            for route in api.routes(store)
        ),
    ]
    return Starlette(routes=routes)


def metrics_app(metrics: MetricsSpanProcessor, options: ServeOptions) -> Starlette:
    """The Starlette app of the metrics port: ``GET /metrics``."""

    async def scrape(request: Request) -> Response:
        if not _authorized(request, options.token):
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
        """Open the store, serve until :meth:`stop`, then shut down cleanly."""
        options = self.options
        store = self.store = Store(options.db, memory_mb=options.memory_mb)
        try:
            store.warm_up()
            metrics = self.metrics = MetricsSpanProcessor()
            ingest = self.ingest = Ingest(store, metrics, options.ingest)
            metrics.registry.register(IngestCollector(ingest))
            ingest.start()
            source.set_live_store(store)
            try:
                await self._serve(store, ingest, metrics)
            finally:
                source.clear_live_store()
                ingest.close()
        finally:
            store.close()
            print("loopwatch serve: store closed", file=self.out, flush=True)

    async def _serve(self, store: Store, ingest: Ingest, metrics: MetricsSpanProcessor) -> None:
        options = self.options
        apps: list[tuple[str, int, Any, Literal["on", "off"], str]] = [
            ("otlp", options.otlp_port, otlp_app(ingest, store, options), "off", "/v1/traces"),
            ("metrics", options.metrics_port, metrics_app(metrics, options), "off", "/metrics"),
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

    asyncio.run(main())
    return 0
