"""Process-wide count of telemetry that was lost, by reason.

Telemetry never breaks the agent it observes: whatever fails to be recorded or exported is
counted here instead, and exposed as ``loopwatch_telemetry_dropped_total{reason}``.
"""

from __future__ import annotations

import threading

__all__ = ["dropped", "record_drop", "reset_drops"]

_lock = threading.Lock()
_counts: dict[str, int] = {}


def record_drop(reason: str, n: int = 1) -> None:
    """Count ``n`` lost spans (or observer calls) under ``reason``.

    Reasons are short snake_case words such as ``queue_full`` or ``export_failed``.
    """
    if n <= 0:
        return
    with _lock:
        _counts[reason] = _counts.get(reason, 0) + n


def dropped() -> dict[str, int]:
    """A copy of the counts so far."""
    with _lock:
        return dict(_counts)


def reset_drops() -> None:
    """Forget the counts (for tests)."""
    with _lock:
        _counts.clear()
