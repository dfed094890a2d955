"""``loopwatch serve``'s ``POST /v1/traces``: an OTLP/HTTP export request in, an answer out once
its spans are committed (docs/serve.md).

The body is read as it arrives, held byte by byte against the pending cap
(:mod:`.admission`) and within the body timeout, decompressed (every member
of a gzip body; bytes after the stream are refused), then handed to
:class:`~loopwatch.dashboard.server.ingest.Ingest`. Errors are ``google.rpc.Status`` bodies in the
request's encoding, as the OTLP/HTTP specification says.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import zlib
from typing import Final

from google.rpc import status_pb2
from loopwatch.queries.ingest.otlp import (
    CONTENT_TYPE_JSON,
    CONTENT_TYPE_PROTOBUF,
    OtlpDecodeError,
    encode_response,
)
from loopwatch.queries.store.errors import StoreError
from starlette.requests import Request
from starlette.responses import Response

from .admission import STALL_BYTES, STALL_S, Hold
from .ingest import BUSY, SHUTTING_DOWN, Ingest

__all__ = ["RETRY_AFTER_S", "Receiver", "authorized"]

RETRY_AFTER_S: Final = 1
"""Seconds a refused sender is asked to wait (429/503)."""


def _status_body(content_type: str, code: int, message: str) -> tuple[bytes, str]:
    """A ``google.rpc.Status`` in the request's encoding, as OTLP/HTTP says errors are sent."""
    if content_type == CONTENT_TYPE_PROTOBUF:
        status = status_pb2.Status(code=code, message=message)
        return bytes(status.SerializeToString()), CONTENT_TYPE_PROTOBUF
    return json.dumps({"code": code, "message": message}).encode(), CONTENT_TYPE_JSON


# gRPC codes for the Status body of each HTTP error.
_RPC_CODE: Final = {400: 3, 401: 16, 408: 4, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


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
    gzip bomb stops there, never inflated whole), ``ValueError`` for a corrupt stream.

    A gzip body may hold several members (``cat a.gz b.gz`` is legal gzip): every member is
    inflated, so a 200 covers all of them. Bytes after the last member (or after a deflate
    stream) that are not another member are refused, never ignored (docs/serve.md).
    """
    if encoding in ("", "identity"):
        return body
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}[encoding]
    parts: list[bytes] = []
    size = 0
    rest = body
    members = 0
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(rest, limit + 1 - size)
        except zlib.error as exc:
            where = f" (member {members + 1})" if members else ""
            raise ValueError(f"the {encoding} body is corrupt{where} ({exc})") from exc
        size += len(out)
        if size > limit or inflater.unconsumed_tail:
            raise _TooLarge
        if not inflater.eof:
            raise ValueError(f"the {encoding} body is truncated")
        parts.append(out)
        members += 1
        rest = inflater.unused_data
        if not rest:
            return b"".join(parts)
        if encoding != "gzip" or not rest.startswith(_GZIP_MAGIC):
            raise ValueError(
                f"{len(rest)} bytes follow the end of the {encoding} stream and are not another "
                "gzip member: send one well-formed stream"
            )


_GZIP_MAGIC: Final = b"\x1f\x8b"


class Receiver:
    """The ``POST /v1/traces`` endpoint."""

    def __init__(
        self, ingest: Ingest, *, token: str | None, max_body_bytes: int, body_timeout_s: float
    ) -> None:
        self.ingest = ingest
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def handle(self, request: Request) -> Response:
        """Answer one export request."""
        response = await self._answer(request)
        self.ingest.answered(response.status_code)
        return response

    async def _answer(self, request: Request) -> Response:
        media = _media_type(request)
        reply_type = media or CONTENT_TYPE_JSON
        if not authorized(request, self.token):
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
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        try:
            declared_size = int(declared) if declared is not None else None
        except ValueError:
            return _error(400, f"bad Content-Length {declared!r}", media)
        if declared_size is not None and declared_size > limit:
            return _error(
                413, f"body of {declared_size} bytes is over the {limit}-byte limit", media
            )
        refusal = self.ingest.refusal()
        if refusal is not None:
            return _error(503, refusal, media)
        hold = self.ingest.hold()
        try:
            return await self._handle(request, media, encoding, limit, hold)
        finally:
            hold.release()

    async def _handle(
        self, request: Request, media: str, encoding: str, limit: int, hold: Hold
    ) -> Response:
        raw = await self._receive(request, media, limit, hold)
        if isinstance(raw, Response):
            return raw
        try:
            body = _decompress(raw, encoding, limit)
        except _TooLarge:
            return _error(413, f"decompressed body over the {limit}-byte limit", media)
        except ValueError as exc:
            return _error(400, str(exc), media)
        extra = len(body) - hold.held
        if extra > 0 and not hold.take(extra):
            return _error(503, BUSY, media)
        try:
            result = await self.ingest.ingest(body, media)
        except OtlpDecodeError as exc:
            return _error(400, str(exc), media)
        except StoreError as exc:
            message = str(exc)
            if not message.startswith("spans not committed"):
                message = f"spans not committed, retry: {message}"
            return _error(503, message, media)
        message = result.message
        if result.rejected and not result.stored and not result.duplicate:
            # Nothing in the request could be stored: a malformed request, not a partial one.
            return _error(400, f"no span could be stored: {message}", media)
        return Response(
            encode_response(media, result.rejected, message), status_code=200, media_type=media
        )

    async def _receive(
        self, request: Request, media: str, limit: int, hold: Hold
    ) -> bytes | Response:
        """The body as it arrives, held chunk by chunk (never by its declared length), within
        the body timeout; an error response instead when it cannot be (docs/serve.md, "Slow
        senders")."""
        chunks: list[bytes] = []
        size = 0
        timeout_s = self.body_timeout_s
        now = time.monotonic()
        deadline = now + timeout_s
        window_end, window_bytes = now + STALL_S, 0
        while True:
            if self.ingest.draining:  # shutdown must not wait for slow senders
                return _error(503, SHUTTING_DOWN, media)
            if now >= deadline:
                return _error(
                    408,
                    f"the body did not arrive within {timeout_s:g} s ({size} bytes came): send "
                    "it faster, or in smaller requests",
                    media,
                )
            try:
                # uvicorn's receive() may be cancelled: bytes that come meanwhile wait for the
                # next call.
                wait = max(0.0, min(deadline, window_end) - now)
                message = await asyncio.wait_for(request.receive(), wait)
            except TimeoutError:
                message = None
            now = time.monotonic()
            if message is not None:
                if message["type"] == "http.disconnect":
                    return _error(400, "the sender went away before the body was complete", media)
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    window_bytes += len(chunk)
                    if size > limit:
                        return _error(413, f"body over the {limit}-byte limit", media)
                    if not hold.take(len(chunk)):
                        return _error(503, BUSY, media)
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            if now >= window_end:  # judge the last window: moving, or stalled
                if window_bytes >= STALL_BYTES:
                    hold.moving()
                elif not hold.stall():
                    return _error(503, f"{BUSY} (this body stalled)", media)
                window_end, window_bytes = now + STALL_S, 0
        hold.arrived()
        return b"".join(chunks)


def authorized(request: Request, token: str | None) -> bool:
    """Whether ``request`` carries ``Authorization: Bearer TOKEN`` (always, with no token);
    compared in constant time."""
    if token is None:
        return True
    given = request.headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())
