"""The one place settings are read from the environment.

Every variable loopwatch reads is listed in :data:`ENVIRONMENT` and read through these
functions, with one rule: an unset or empty (whitespace-only) variable means *not given* and the
default applies; a value that is given but invalid is an error (``ValueError`` naming the
variable and the value), never silently replaced by the default. Booleans accept
``true/1/yes/on`` and ``false/0/no/off`` (any case). One exception, on purpose: OTel's batch
processor variables (``OTEL_BSP_*``) follow OTel's own rule (an invalid value is logged and the
default used), so loopwatch and the OTel SDK read the same variable the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Final

from .validate import check_int

__all__ = ["ENVIRONMENT", "env_bool", "env_int", "env_str", "otel_env_int"]

ENVIRONMENT: Final[Mapping[str, str]] = {
    "LOOPWATCH_DB": "the DuckDB store file (instrument(store=...), loopwatch CLI --db)",
    "LOOPWATCH_STORE_WRITER": "who writes the store file: inline or process",
    "LOOPWATCH_METRICS_PORT": "serve /metrics on this port (instrument(metrics_port=...))",
    "LOOPWATCH_MAX_TASK_TYPES": "task_type label values before new ones become `other` (50)",
    "LOOPWATCH_MAX_TOOLS": "tool label values before new ones become `other` (100)",
    "LOOPWATCH_MAX_MODELS": "model label values before new ones become `other` (50)",
    "LOOPWATCH_LIMITS": "a TOML file of limits per task type",
    "LOOPWATCH_LIMITS_URL": "loopwatch serve's address: runs follow the limits it holds",
    "LOOPWATCH_LIMITS_CACHE": "file the last good served limits are kept in",
    "LOOPWATCH_LIMITS_POLL_S": "seconds between two polls of serve's limits (10)",
    "LOOPWATCH_SERVE_URL": "loopwatch serve's address for task-success feedback",
    "LOOPWATCH_WRITE_TOKEN": "the token of serve's write endpoints (serve --write-token)",
    "LOOPWATCH_CONTENT_MAX_CHARS": "size cap of one captured-content attribute (16384; 0 = none)",
    "LOOPWATCH_RETRY_MAX_ATTEMPTS": "tool retry policy: attempts per call",
    "LOOPWATCH_RETRY_BASE_DELAY_S": "tool retry policy: first backoff",
    "LOOPWATCH_RETRY_MAX_DELAY_S": "tool retry policy: largest backoff",
    "LOOPWATCH_RETRY_MAX_RETRY_AFTER_S": "tool retry policy: longest Retry-After honoured",
    "LOOPWATCH_BREAKER_FAILURE_THRESHOLD": "circuit breaker: failures in a row that open it",
    "LOOPWATCH_BREAKER_COOLDOWN_S": "circuit breaker: seconds before a trial call",
    "LOOPWATCH_QUERY_MAX_ROWS": "named queries: row cap",
    "LOOPWATCH_QUERY_TIMEOUT_S": "named queries: time limit",
    "LOOPWATCH_TOKEN": "the bearer token `loopwatch serve` requires",
    "LOOPWATCH_FOREIGN_TASK_TYPE": "serve: span attributes giving foreign runs their task type",
    "LOOPWATCH_FOREIGN_GRACE_S": "serve: seconds a foreign trace waits for late spans (5)",
    "LOOPWATCH_ALERT_SHORT_WINDOW": "dashboard: the repeated_error alert's short window (15m)",
    "LOOPWATCH_ALERT_BASELINE_WINDOW": "dashboard: the alert's baseline window (6h)",
    "LOOPWATCH_ALERT_MIN_RUNS": "dashboard: the fewest runs that can fire the alert (20)",
    "LOOPWATCH_REFRESH_S": "dashboard: seconds between live refreshes (5)",
    "LOOPWATCH_STREAMLIT_TOOLBAR": "dashboard: Streamlit's toolbar mode (viewer; developer)",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "record message and tool content",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "OTLP/HTTP traces URL (used as given)",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "OTLP/HTTP base URL (/v1/traces appended)",
    "OTEL_BSP_MAX_QUEUE_SIZE": "batch processor queue (OTel's rule: invalid = default + warning)",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "batch processor batch size (OTel's rule)",
    "OTEL_BSP_SCHEDULE_DELAY": "batch processor delay, ms (OTel's rule)",
    "OTEL_BSP_EXPORT_TIMEOUT": "batch processor export timeout, ms (OTel's rule)",
    "LOOPWATCH_SHUTDOWN_TIMEOUT_MS": "longest wait for the exporter at shutdown/exit, ms (5000)",
    "LOOPWATCH_EXACT_TEXT_TOOLS": "comma-separated tools whose calls and results compare as exact "
    "text (no volatile-text normalization)",
    "LOOPWATCH_SPOOL_DIR": "live mode: the agent's on-disk spool for spans serve cannot take now",
    "LOOPWATCH_SPOOL_MAX_MB": "the spool's bound on disk, MB (128)",
    "LOOPWATCH_CACHE_DIR": "where --archive readers keep their reader store (~/.cache/loopwatch)",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "headers the spooling exporter sends (OTel's format)",
    "OTEL_EXPORTER_OTLP_HEADERS": "the same, when the traces variable is unset",
}
"""Every environment variable loopwatch reads, and what it sets."""

_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})


def env_str(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The stripped value of ``name``; ``None`` when unset or empty."""
    raw = (os.environ if environ is None else environ).get(name, "")
    value = raw.strip()
    return value or None


def env_bool(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """``name`` as a boolean; ``default`` when unset or empty."""
    value = env_str(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """``name`` as an integer within ``minimum..maximum``; ``default`` when unset or empty."""
    value = env_str(name, environ)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        parsed = None
    if parsed is None:
        check_int(name, value, minimum=minimum, maximum=maximum)  # raises with the message
    return check_int(name, parsed, minimum=minimum, maximum=maximum)


_log = logging.getLogger(__name__)


def otel_env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """One of OTel's own integer variables (``OTEL_BSP_*``), read by OTel's rule: ``default``
    when unset, empty or not an integer (the last logged as a warning)."""
    value = env_str(name, environ)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        _log.warning("loopwatch: ignoring %s=%r: not an integer", name, value)
        return default
