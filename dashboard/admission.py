"""How many request bytes live ingest holds, and who may hold more (docs/serve.md, "Slow senders").

Each ``POST /v1/traces`` takes a :class:`Hold` and grows it as its body's bytes arrive (never by
the ``Content-Length`` it declares: a sender that declares 20 MiB and sends two bytes holds two
bytes), then by what decompressing adds, and gives it all back once answered. The total is
capped by ``max_pending_bytes``, with two rules:

- a request that is alone may always go on, so a body up to the size limit can always be stored;
- bodies still arriving may hold at most ``receive_share`` of the cap together: the rest is kept
  for requests whose bodies have arrived (being decoded and committed), so senders that stall
  mid-body can never take the capacity that committing needs. Stalled bodies are also cut off by
  the body timeout (``loopwatch serve --body-timeout-s``).
"""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["DEFAULT_RECEIVE_SHARE", "Admission", "Hold"]

DEFAULT_RECEIVE_SHARE: Final = 0.5
"""Share of the pending cap that bodies still arriving may hold together."""


class Admission:
    """The byte count behind the pending cap; thread-safe."""

    def __init__(
        self, max_pending_bytes: int, receive_share: float = DEFAULT_RECEIVE_SHARE
    ) -> None:
        self.max_pending_bytes = max_pending_bytes
        self.receive_limit = int(max_pending_bytes * receive_share)
        self._lock = threading.Lock()
        self.pending = 0
        """Bytes held by every request, arriving or not."""
        self.receiving = 0
        """Bytes held by bodies still arriving."""
        self.refused = 0
        """Requests refused because taking their bytes would pass a cap."""

    def hold(self) -> Hold:
        """A new, empty hold for one request."""
        return Hold(self)

    def full(self) -> bool:
        """Whether nothing more can be taken by a new request (it would be refused)."""
        with self._lock:
            return self.pending >= self.max_pending_bytes


class Hold:
    """The bytes one request holds; :meth:`release` once answered."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self.held = 0
        """Bytes this request holds."""
        self.arriving = 0
        """Of them, bytes of a body still arriving."""

    def take(self, size: int, *, arriving: bool) -> bool:
        """Hold ``size`` more bytes; ``False`` (and nothing taken) when that passes a cap while
        other requests hold bytes: answer 503."""
        a = self._admission
        with a._lock:
            alone = a.pending == self.held
            if not alone:
                over_total = a.pending + size > a.max_pending_bytes
                others_arriving = a.receiving - self.arriving
                over_share = (
                    arriving and others_arriving > 0 and a.receiving + size > a.receive_limit
                )
                if over_total or over_share:
                    a.refused += 1
                    return False
            a.pending += size
            self.held += size
            if arriving:
                a.receiving += size
                self.arriving += size
            return True

    def arrived(self) -> None:
        """The whole body is here: its bytes no longer count as arriving."""
        a = self._admission
        with a._lock:
            a.receiving -= self.arriving
            self.arriving = 0

    def release(self) -> None:
        """Give every byte back (idempotent)."""
        a = self._admission
        with a._lock:
            a.pending -= self.held
            a.receiving -= self.arriving
            self.held = self.arriving = 0
