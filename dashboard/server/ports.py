"""The default ports of ``loopwatch serve`` (and ``loopwatch dashboard``), importable without the
``dashboard`` extra so that ``loopwatch --help`` can show them without loading the server."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_METRICS_PORT", "DEFAULT_OTLP_PORT", "DEFAULT_UI_PORT"]

DEFAULT_OTLP_PORT: Final = 4318
"""OTLP/HTTP, as OTel's exporters default to."""
DEFAULT_METRICS_PORT: Final = 9464
"""Prometheus ``/metrics``, as OTel's Prometheus exporter defaults to."""
DEFAULT_UI_PORT: Final = 8501
"""The Streamlit dashboard, as Streamlit defaults to."""
