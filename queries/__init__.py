"""The DuckDB store, the named queries, limit analysis and alert rules.

- :class:`Store`, :class:`DuckDBSpanExporter`: spans and runs into one DuckDB file.
- :func:`run_query`: every question the dashboard and CLI ask, as a named ``.sql`` file, through
  one gateway that binds parameters, caps rows and times each query.
- :func:`analyze_limits`, :func:`what_if`, :func:`replay_detectors`: which limits are too tight
  or too loose, and what to set them to.
- :func:`repeated_error_alerts`, :func:`render_rules`: the repeated_error alert in SQL, and the
  same thresholds as Prometheus rules.
- :func:`import_chat_log`: recorded chat logs → runs replayed through the guard;
  :func:`imported_replay`, :func:`detector_thresholds`, :func:`shadow_evaluations`: what
  imported history and shadow limits say about limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwatch.instrumentation.lazy import lazy_names

if TYPE_CHECKING:
    from .alerts import AlertState, AlertThresholds, render_rules, repeated_error_alerts, rules_path
    from .analysis import (
        AnalysisThresholds,
        DetectorReplay,
        Evidence,
        LimitAnalysis,
        Verdict,
        WhatIfPoint,
        analyze_limits,
        judge,
        replay_detectors,
        what_if,
    )
    from .chatlogs import ChatLogOptions
    from .exporter import CountingBatchSpanProcessor, DuckDBSpanExporter, store_processor
    from .gateway import (
        QueryError,
        QueryFailedError,
        QueryGateway,
        QueryParameterError,
        QueryResult,
        QueryTimeoutError,
        UnknownQueryError,
        query_names,
        run_query,
    )
    from .history import detector_thresholds, imported_replay, shadow_evaluations
    from .importer import ImportOptions, ImportSummary, import_chat_log
    from .store import (
        SchemaVersionError,
        SpanRecord,
        Store,
        StoreCorruptError,
        StoreError,
        StoreLockedError,
        StoreNotFoundError,
        connect_read_only,
        resolve_db_path,
    )
    from .toml_export import limits_toml

__all__ = [
    "AlertState",
    "AlertThresholds",
    "AnalysisThresholds",
    "ChatLogOptions",
    "CountingBatchSpanProcessor",
    "DetectorReplay",
    "DuckDBSpanExporter",
    "Evidence",
    "ImportOptions",
    "ImportSummary",
    "LimitAnalysis",
    "QueryError",
    "QueryFailedError",
    "QueryGateway",
    "QueryParameterError",
    "QueryResult",
    "QueryTimeoutError",
    "SchemaVersionError",
    "SpanRecord",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "UnknownQueryError",
    "Verdict",
    "WhatIfPoint",
    "analyze_limits",
    "connect_read_only",
    "detector_thresholds",
    "import_chat_log",
    "imported_replay",
    "judge",
    "limits_toml",
    "query_names",
    "render_rules",
    "repeated_error_alerts",
    "replay_detectors",
    "resolve_db_path",
    "rules_path",
    "run_query",
    "shadow_evaluations",
    "store_processor",
    "what_if",
]

# Every name is imported on first use: `loopwatch --help` and the pure modules (analysis,
# gateway, alerts) never load DuckDB or Arrow (the `store` extra).
_LAZY: dict[str, str] = {
    "AlertState": ".alerts",
    "AlertThresholds": ".alerts",
    "AnalysisThresholds": ".analysis",
    "ChatLogOptions": ".chatlogs",
    "CountingBatchSpanProcessor": ".exporter",
    "DetectorReplay": ".analysis",
    "DuckDBSpanExporter": ".exporter",
    "Evidence": ".analysis",
    "ImportOptions": ".importer",
    "ImportSummary": ".importer",
    "LimitAnalysis": ".analysis",
    "QueryError": ".gateway",
    "QueryFailedError": ".gateway",
    "QueryGateway": ".gateway",
    "QueryParameterError": ".gateway",
    "QueryResult": ".gateway",
    "QueryTimeoutError": ".gateway",
    "SchemaVersionError": ".store",
    "SpanRecord": ".store",
    "Store": ".store",
    "StoreCorruptError": ".store",
    "StoreError": ".store",
    "StoreLockedError": ".store",
    "StoreNotFoundError": ".store",
    "UnknownQueryError": ".gateway",
    "Verdict": ".analysis",
    "WhatIfPoint": ".analysis",
    "analyze_limits": ".analysis",
    "connect_read_only": ".store",
    "detector_thresholds": ".history",
    "import_chat_log": ".importer",
    "imported_replay": ".history",
    "judge": ".analysis",
    "limits_toml": ".toml_export",
    "query_names": ".gateway",
    "render_rules": ".alerts",
    "repeated_error_alerts": ".alerts",
    "replay_detectors": ".analysis",
    "resolve_db_path": ".store",
    "rules_path": ".alerts",
    "run_query": ".gateway",
    "shadow_evaluations": ".history",
    "store_processor": ".exporter",
    "what_if": ".analysis",
}

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)
