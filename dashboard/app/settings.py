"""What the dashboard reads from the environment: alert windows and the refresh interval.

The alert thresholds default to those of docs/queries.md, "Alerts" (15 minutes against 6 hours,
at least 20 runs).
``loopwatch demo`` compresses an hour of traffic into minutes, so it starts ``serve`` with
shorter windows through these variables; a deployment may set them too, to match the windows
of its Prometheus rules (``render_rules(AlertThresholds(...))``).
"""

from __future__ import annotations

from dataclasses import replace

from loopwatch.instrumentation.runtime.settings import env_str
from loopwatch.queries.analysis.alerts import AlertThresholds

__all__ = [
    "ALERT_BASELINE_ENV",
    "ALERT_MIN_RUNS_ENV",
    "ALERT_SHORT_ENV",
    "DEFAULT_REFRESH_S",
    "REFRESH_ENV",
    "SettingsError",
    "alert_thresholds",
    "refresh_seconds",
]

ALERT_SHORT_ENV = "LOOPWATCH_ALERT_SHORT_WINDOW"
"""The repeated_error alert's short window, a duration like ``15m`` (default 15m)."""
ALERT_BASELINE_ENV = "LOOPWATCH_ALERT_BASELINE_WINDOW"
"""Its baseline window, longer than the short one (default 6h)."""
ALERT_MIN_RUNS_ENV = "LOOPWATCH_ALERT_MIN_RUNS"
"""The fewest runs in the short window that can fire (default 20)."""
REFRESH_ENV = "LOOPWATCH_REFRESH_S"
"""Seconds between live refreshes of a page (default 5; at least 1)."""
DEFAULT_REFRESH_S = 5.0


class SettingsError(ValueError):
    """An environment variable of the dashboard has a value it cannot use."""


def alert_thresholds() -> AlertThresholds:
    """:class:`AlertThresholds` with the windows and run minimum the environment names."""
    t = AlertThresholds()
    changes: dict[str, object] = {}
    short = env_str(ALERT_SHORT_ENV)
    base = env_str(ALERT_BASELINE_ENV)
    runs = env_str(ALERT_MIN_RUNS_ENV)
    if short:
        changes["short_window"] = short
    if base:
        changes["baseline_window"] = base
    if runs:
        try:
            changes["min_runs"] = int(runs)
        except ValueError:
            raise SettingsError(f"{ALERT_MIN_RUNS_ENV}={runs!r}: use a whole number") from None
    try:
        return replace(t, **changes)  # type: ignore[arg-type]
    except ValueError as exc:
        raise SettingsError(
            f"alert settings from {ALERT_SHORT_ENV}/{ALERT_BASELINE_ENV}/"
            f"{ALERT_MIN_RUNS_ENV}: {exc}"
        ) from None


def refresh_seconds() -> float:
    """The live refresh interval in seconds."""
    text = env_str(REFRESH_ENV)
    if text is None:
        return DEFAULT_REFRESH_S
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{REFRESH_ENV}={text!r}: use a number of seconds") from None
    return max(value, 1.0)
