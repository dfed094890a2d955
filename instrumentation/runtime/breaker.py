"""The per-name circuit breaker: fail fast on a tool or model whose calls keep failing.

closed --(N failures in a row)--> open --(cooldown passed)--> half_open: one probe call; the
probe succeeding closes the circuit, failing re-opens it (docs/tools.md, *The circuit
breaker*).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .backoff import env_number
from .settings import env_str
from .validate import check_int, check_number

__all__ = ["BREAKER_ENV", "BreakerState", "CircuitBreaker"]

BREAKER_ENV: Mapping[str, str] = {
    "failure_threshold": "LOOPWATCH_BREAKER_FAILURE_THRESHOLD",
    "cooldown_s": "LOOPWATCH_BREAKER_COOLDOWN_S",
}


class BreakerState(StrEnum):
    """A circuit breaker's state for one tool."""

    CLOSED = "closed"
    """Calls go through; consecutive failures are counted."""
    OPEN = "open"
    """Calls fail fast (the tool is not called) until the cooldown has passed."""
    HALF_OPEN = "half_open"
    """The cooldown has passed: one probe call may go through to test the tool."""


@dataclass(slots=True)
class _Circuit:
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    probe_started: float | None = None


class CircuitBreaker:
    """Fails fast on a tool after ``failure_threshold`` consecutive failures, per tool name.

    closed --(N failures in a row)--> open --(cooldown passed)--> half_open: one probe call;
    the probe succeeding closes the circuit, failing re-opens it for another cooldown.
    Thread-safe: sync tools run in worker threads under ``aexecute``.
    """

    def __init__(
        self,
        failure_threshold: int = 5,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_int("failure_threshold", failure_threshold, minimum=1)
        check_number("cooldown_s", cooldown_s)
        self.failure_threshold = failure_threshold
        """Consecutive failures that open the circuit."""
        self.cooldown_s = float(cooldown_s)
        """Seconds an open circuit waits before letting one probe through."""
        self._clock = clock
        self._lock = threading.Lock()
        self._circuits: dict[str, _Circuit] = {}

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        **overrides: Any,
    ) -> CircuitBreaker:
        """A breaker from ``LOOPWATCH_BREAKER_*`` variables (``BREAKER_ENV``); ``overrides`` win."""
        values: dict[str, Any] = {}
        for field_name, var in BREAKER_ENV.items():
            raw = env_str(var, environ)
            if raw is not None:
                values[field_name] = env_number(var, raw, integer=field_name == "failure_threshold")
        values.update(overrides)
        return cls(clock=clock, **values)

    def _circuit(self, tool: str) -> _Circuit:
        circuit = self._circuits.get(tool)
        if circuit is None:
            circuit = self._circuits[tool] = _Circuit()
        return circuit

    def allow(self, tool: str) -> bool:
        """Whether a call to ``tool`` may go through now; past the cooldown, ONE probe may."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is None or circuit.state is BreakerState.CLOSED:
                return True
            now = self._clock()
            if circuit.state is BreakerState.OPEN:
                if now - circuit.opened_at < self.cooldown_s:
                    return False
                circuit.state = BreakerState.HALF_OPEN
                circuit.probe_started = now
                return True
            # Half-open with a probe out. A probe that never reported back (its caller died)
            # must not block the tool forever: after another cooldown, let a new probe through.
            if circuit.probe_started is not None and now - circuit.probe_started < self.cooldown_s:
                return False
            circuit.probe_started = now
            return True

    def record_success(self, tool: str) -> None:
        """A call to ``tool`` worked: close the circuit and forget the failures."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is not None:
                circuit.state = BreakerState.CLOSED
                circuit.failures = 0
                circuit.probe_started = None

    def record_failure(self, tool: str) -> None:
        """A call to ``tool`` failed: count it; open at the threshold, or when the probe failed."""
        with self._lock:
            circuit = self._circuit(tool)
            circuit.failures += 1
            if circuit.state is BreakerState.HALF_OPEN or (
                circuit.state is BreakerState.CLOSED and circuit.failures >= self.failure_threshold
            ):
                circuit.state = BreakerState.OPEN
                circuit.opened_at = self._clock()
                circuit.probe_started = None

    def state(self, tool: str) -> BreakerState:
        """``tool``'s circuit state; an open one whose cooldown has passed reads ``half_open``."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is None:
                return BreakerState.CLOSED
            if (
                circuit.state is BreakerState.OPEN
                and self._clock() - circuit.opened_at >= self.cooldown_s
            ):
                return BreakerState.HALF_OPEN
            return circuit.state

    def failures(self, tool: str) -> int:
        """Consecutive failures recorded for ``tool`` since it last succeeded."""
        with self._lock:
            circuit = self._circuits.get(tool)
            return 0 if circuit is None else circuit.failures

    def retry_in(self, tool: str) -> float:
        """Seconds until an open circuit lets a probe through (0 when calls may go through now)."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is None or circuit.state is not BreakerState.OPEN:
                return 0.0
            return max(self.cooldown_s - (self._clock() - circuit.opened_at), 0.0)

    def reset(self, tool: str | None = None) -> None:
        """Close ``tool``'s circuit (every circuit when ``tool`` is None)."""
        with self._lock:
            if tool is None:
                self._circuits.clear()
            else:
                self._circuits.pop(tool, None)
