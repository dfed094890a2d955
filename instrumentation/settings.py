"""The one place settings are read from the environment.

Every variable loopwatch reads is listed in :data:`ENVIRONMENT` and read through these
functions, with one rule: an unset or empty (whitespace-only) variable means *not given* and the
default applies; a value that is given but invalid is an error (``ValueError`` naming the
variable and the value), never silently replaced by the default. Booleans accept
``true/1/yes/on`` and ``false/0/no/off`` (any case). The OTel SDK's own variables
(``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``) are read here too, with the same
rule, where loopwatch acts on them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from .validate import check_int

__all__ = ["ENVIRONMENT", "env_bool", "env_int", "env_str"]

ENVIRONMENT: Final[Mapping[str, str]] = {
    "LOOPWATCH_DB": "the DuckDB store file (instrument(store=...), loopwatch CLI --db)",
    "LOOPWATCH_STORE_WRITER": "who writes the store file: inline or process",
    "LOOPWATCH_METRICS_PORT": "serve /metrics on this port (instrument(metrics_port=...))",
    "LOOPWATCH_LIMITS": "a TOML file of limits per task type",
    "LOOPWATCH_CONTENT_MAX_CHARS": "size cap of one captured-content attribute (0 = none)",
    "LOOPWATCH_TOKEN": "the bearer token `loopwatch serve` requires",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "record message and tool content",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "OTLP/HTTP traces URL (used as given)",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "OTLP/HTTP base URL (/v1/traces appended)",
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
