"""Who may reach ``loopwatch serve`` without a token (docs/serve.md, "Security").

Without ``--token``, the OTLP, API and metrics ports answer only requests whose ``Host`` header
is an IP address, ``localhost``, the ``--host`` name or a name given with ``--allow-host``. A web
page cannot send such a request to them: DNS rebinding (an attacker's name made to resolve to
127.0.0.1, so that a browser on this machine talks to serve as that name) always carries the
attacker's name as ``Host``, and is refused with 403. With ``--token`` every ``Host`` is served:
a page cannot know the token. Binding beyond loopback without a token is allowed but warned
about at start.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

__all__ = ["HostCheck", "exposure_warning", "host_allowed", "is_loopback"]

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the ports on this machine."""
    if host.lower() == "localhost":
        return True
    address = _ip(host)
    return address is not None and address.is_loopback


def exposure_warning(host: str, token: str | None) -> str | None:
    """The warning printed at start when the ports are bound beyond loopback without a token."""
    if token is not None or is_loopback(host):
        return None
    return (
        f"loopwatch serve: WARNING: listening on {host}, beyond this machine, WITHOUT a token. "
        "Anyone who can reach these ports can send spans, read every run through the API and "
        "/metrics, and open the dashboard. Set --token (or $LOOPWATCH_TOKEN) and put an "
        "authenticating proxy in front of the dashboard port, or bind --host 127.0.0.1."
    )


def _name(header: str) -> str:
    """The host of a ``Host`` header, without its port."""
    header = header.strip()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str, names: Iterable[str]) -> bool:
    """Whether a request with this ``Host`` header is served without a token."""
    name = _name(header).lower().rstrip(".")
    if not name or _ip(name) is not None or name == "localhost":
        return True
    return name in {n.lower().rstrip(".") for n in names}


class HostCheck:
    """ASGI middleware: 403 for a request whose ``Host`` is not allowed (see the module)."""

    def __init__(self, app: _App, names: Iterable[str]) -> None:
        self.app = app
        self.names = frozenset(names)

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or ())
            header = headers.get(b"host", b"").decode("latin-1")
            if not host_allowed(header, self.names):
                await _forbidden(send, header)
                return
        await self.app(scope, receive, send)


async def _forbidden(send: _Send, header: str) -> None:
    body = json.dumps(
        {
            "error": f"Host {header[:100]!r} is not served without a token: use the server's "
            "address, add the name with --allow-host, or set --token"
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
