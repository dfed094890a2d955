"""A scripted HTTP server on 127.0.0.1 that speaks a provider's wire format, for client tests.

Each request is answered by the next scripted reply (status, JSON body or raw text, headers);
when the script runs out, by ``default``. Every request's path and JSON body is recorded.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    """A JSON-able value, or a str sent as is."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    """Wait this long before answering (a slow provider)."""


@dataclass
class WireServer:
    url: str
    script: deque[Reply]
    default: Reply | None
    requests: list[dict[str, Any]]

    def add(self, *replies: Reply) -> None:
        self.script.extend(replies)

    @property
    def bodies(self) -> list[Any]:
        return [r["json"] for r in self.requests]


@contextmanager
def wire_server(*replies: Reply, default: Reply | None = None) -> Iterator[WireServer]:
    state = WireServer("", deque(replies), default, [])
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                parsed = json.loads(raw or b"null")
            except ValueError:
                parsed = None
            with lock:
                state.requests.append(
                    {"path": self.path, "json": parsed, "headers": dict(self.headers)}
                )
                reply = state.script.popleft() if state.script else state.default
            if reply is None:
                reply = Reply(599, {"error": {"message": "script exhausted"}})
            if reply.delay_s:
                time.sleep(reply.delay_s)
            body = reply.body
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(reply.status)
            ctype = "text/plain" if isinstance(body, str) else "application/json"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
