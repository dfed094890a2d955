"""How many request bytes live ingest holds, and who may hold more (docs/serve.md, "Slow senders").

Each ``POST /v1/traces`` takes a :class:`Hold` and grows it as its body's bytes arrive (never by
the ``Content-Length`` it declares: a sender that declares 20 MiB and sends two bytes holds two
bytes), then by what decompressing adds, and gives it all back once answered. The total is
capped by ``max_pending_bytes``, with two rules:

- a request that is alone may always go on, so a body up to the size limit can always be stored;
- bodies that have stalled (fewer than :data:`STALL_BYTES` in the last :data:`STALL_S`) may
  hold at most ``stalled_share`` of
  the cap together; a stalled body that finds them over it is cut off (503, its sender retries).
  The rest of the cap is kept for requests that are moving (arriving, decoding, committing), so
  senders that stop mid-body can never take what others need. Every body is also bounded in time
  (``loopwatch serve --body-timeout-s``).
"""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["DEFAULT_STALLED_SHARE", "STALL_BYTES", "STALL_S", "Admission", "Hold"]

DEFAULT_STALLED_SHARE: Final = 0.5
"""Share of the pending cap that stalled bodies may hold together."""
STALL_S: Final = 1.0
"""The window over which a body's progress is judged."""
STALL_BYTES: Final = 1024
"""A body that received fewer bytes than this in the last window has stalled (a sender dripping
a few bytes a second is not moving)."""


class Admission:
    """The byte count behind the pending cap; thread-safe."""

    def __init__(
        self, max_pending_bytes: int, stalled_share: float = DEFAULT_STALLED_SHARE
    ) -> None:
        self.max_pending_bytes = max_pending_bytes
        self.stalled_limit = int(max_pending_bytes * stalled_share)
        self.lock = threading.Lock()
        self.pending = 0
        """Bytes held by every request."""
        self.stalled = 0
        """Of them, bytes held by bodies that have stalled."""
        self.refused = 0
        """Requests refused because taking their bytes would pass a cap."""

    def hold(self) -> Hold:
        """A new, empty hold for one request."""
        return Hold(self)

    def full(self) -> bool:
        """Whether a new request would be refused (nothing more can be taken)."""
        with self.lock:
            return self.pending >= self.max_pending_bytes


class Hold:
    """The bytes one request holds; :meth:`release` once answered."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self.held = 0
        """Bytes this request holds."""
        self.stalled = False
        """Its body has stalled (its bytes count in :attr:`Admission.stalled`)."""

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes; ``False`` (and nothing taken) when that passes the cap
        while other requests hold bytes: answer 503."""
        a = self._admission
        with a.lock:
            if a.pending != self.held and a.pending + size > a.max_pending_bytes:
                a.refused += 1
                return False
            a.pending += size
            self.held += size
            return True

    def stall(self) -> bool:
        """The body has stalled; ``False`` when stalled bodies now hold more than their share
        while others hold bytes too (then cut this one off: answer 503)."""
        a = self._admission
        with a.lock:
            if not self.stalled:
                self.stalled = True
                a.stalled += self.held
            if a.stalled > a.stalled_limit and a.pending != self.held:
                a.refused += 1
                return False
            return True

    def moving(self) -> None:
        """The body is moving (again): its bytes leave the stalled share."""
        with self._admission.lock:
            self._unstall()

    def arrived(self) -> None:
        """The whole body is here: it is moving (decoding, committing)."""
        with self._admission.lock:
            self._unstall()

    def _unstall(self) -> None:
        # The caller holds the admission's lock.
        if self.stalled:
            self.stalled = False
            self._admission.stalled -= self.held

    def release(self) -> None:
        """Give every byte back (idempotent)."""
        a = self._admission
        with a.lock:
            self._unstall()
            a.pending -= self.held
            self.held = 0
