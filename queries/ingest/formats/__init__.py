"""Recorded trace files and coding-agent logs read by ``loopwatch import`` (docs/import.md).

The format names live here, apart from the readers, so that the CLI can offer them without
importing the store (``loopwatch --help`` loads no DuckDB)."""

from typing import Final

__all__ = ["CODING_FORMATS", "OTLP_JSON", "RECORDED_FORMATS"]

CODING_FORMATS: Final = ("swe-agent", "openhands", "claude-code")
"""Coding agents' logs."""
OTLP_JSON: Final = "otlp-json"
"""OTLP/JSON trace files (a Collector's file exporter output)."""
RECORDED_FORMATS: Final = (*CODING_FORMATS, OTLP_JSON)
"""The ``loopwatch import --format`` values :mod:`.importing` reads."""
