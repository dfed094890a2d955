"""Whether ``loopwatch serve``'s store can commit, as its writer thread last found it.

Three states (docs/serve.md, "When the store fails"):

- ``ok``: the last commit (or trial commit) succeeded;
- ``failing``: the last commit failed but the database is still usable (a write-ahead-log write
  on a full disk): requests are still tried, each failure answered 503 with its reason, and the
  idle writer makes trial commits until one succeeds;
- ``unavailable``: DuckDB invalidated the database after a fatal error (a checkpoint on a full
  disk): new requests are refused at once (503 with the reason) and the writer reopens the file
  (which replays its write-ahead log) until it can, waiting longer after each failed attempt.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Final, Literal

from loopwatch.queries.store.errors import is_fatal_store_error, one_line

__all__ = ["FIRST_RETRY_S", "STATES", "State", "StoreHealth", "StoreState"]

State = Literal["ok", "failing", "unavailable"]
STATES: Final[tuple[State, ...]] = ("ok", "failing", "unavailable")
"""Every state, in order of health."""

FIRST_RETRY_S: Final = 0.5
"""Wait before the first trial commit or reopen after a failure; doubled after each failure."""


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """A copy of the state, for ``/health`` and ``/metrics``."""

    state: State
    error: str
    """The last failure's message (empty when ``ok``)."""
    since: float
    """Unix time the state began."""
    reopens: int
    """Times the store was reopened since start-up."""
    failures: int
    """Failed commits, trial commits and reopens since start-up."""


class StoreState:
    """The state and when the writer should next try to leave it; thread-safe."""

    def __init__(self, max_retry_s: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._state: State = "ok"
        self._error = ""
        self._since = time.time()
        self._reopens = 0
        self._failures = 0
        self._delay = FIRST_RETRY_S
        self._next_try = 0.0
        self._max_retry_s = max_retry_s

    @property
    def state(self) -> State:
        """The current state."""
        return self._state

    def snapshot(self) -> StoreHealth:
        """A consistent copy."""
        with self._lock:
            return StoreHealth(self._state, self._error, self._since, self._reopens, self._failures)

    def refusal(self) -> str | None:
        """Why a new request is refused at once (``None``: it is not)."""
        with self._lock:
            if self._state == "unavailable":
                return f"spans not committed, retry later: {self._error}"
            return None

    def succeeded(self, *, reopened: bool = False) -> bool:
        """A commit, trial commit or reopen succeeded; whether the state changed."""
        with self._lock:
            if reopened:
                self._reopens += 1
            changed = self._state != "ok"
            if changed:
                self._state, self._error, self._since = "ok", "", time.time()
            self._delay = FIRST_RETRY_S
            return changed

    def failed(self, exc: BaseException) -> State:
        """A commit, trial commit or reopen failed with ``exc``; returns the new state."""
        with self._lock:
            self._failures += 1
            fatal = is_fatal_store_error(exc) or self._state == "unavailable"
            state: State = "unavailable" if fatal else "failing"
            if state != self._state:
                self._since = time.time()
                self._delay = FIRST_RETRY_S
            self._state = state
            self._error = one_line(str(exc))[:500] or type(exc).__name__
            self._next_try = time.monotonic() + self._delay
            self._delay = min(self._delay * 2, self._max_retry_s)
            return state

    def wait_s(self) -> float | None:
        """Seconds until the writer should try again (``None``: nothing to try)."""
        with self._lock:
            if self._state == "ok":
                return None
            return max(0.0, self._next_try - time.monotonic())
