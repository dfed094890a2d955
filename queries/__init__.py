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

from loopwatch.instrumentation.runtime.lazy import lazy_names, moved_modules

if TYPE_CHECKING:
    from .analysis.alerts import (
        AlertState,
        AlertThresholds,
        render_rules,
        repeated_error_alerts,
        rules_path,
    )
    from .analysis.gateway import (
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
    from .analysis.history import detector_thresholds, imported_replay, shadow_evaluations
    from .analysis.recommendations import (
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
    from .analysis.toml_export import limits_toml
    from .ingest.chatlogs import ChatLogOptions
    from .ingest.importer import ImportOptions, ImportSummary, import_chat_log
    from .store.database import (
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
    from .store.exporter import CountingBatchSpanProcessor, DuckDBSpanExporter, store_processor

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
    "AlertState": ".analysis.alerts",
    "AlertThresholds": ".analysis.alerts",
    "AnalysisThresholds": ".analysis.recommendations",
    "ChatLogOptions": ".ingest.chatlogs",
    "CountingBatchSpanProcessor": ".store.exporter",
    "DetectorReplay": ".analysis.recommendations",
    "DuckDBSpanExporter": ".store.exporter",
    "Evidence": ".analysis.recommendations",
    "ImportOptions": ".ingest.importer",
    "ImportSummary": ".ingest.importer",
    "LimitAnalysis": ".analysis.recommendations",
    "QueryError": ".analysis.gateway",
    "QueryFailedError": ".analysis.gateway",
    "QueryGateway": ".analysis.gateway",
    "QueryParameterError": ".analysis.gateway",
    "QueryResult": ".analysis.gateway",
    "QueryTimeoutError": ".analysis.gateway",
    "SchemaVersionError": ".store.database",
    "SpanRecord": ".store.database",
    "Store": ".store.database",
    "StoreCorruptError": ".store.database",
    "StoreError": ".store.database",
    "StoreLockedError": ".store.database",
    "StoreNotFoundError": ".store.database",
    "UnknownQueryError": ".analysis.gateway",
    "Verdict": ".analysis.recommendations",
    "WhatIfPoint": ".analysis.recommendations",
    "analyze_limits": ".analysis.recommendations",
    "connect_read_only": ".store.database",
    "detector_thresholds": ".analysis.history",
    "import_chat_log": ".ingest.importer",
    "imported_replay": ".analysis.history",
    "judge": ".analysis.recommendations",
    "limits_toml": ".analysis.toml_export",
    "query_names": ".analysis.gateway",
    "render_rules": ".analysis.alerts",
    "repeated_error_alerts": ".analysis.alerts",
    "replay_detectors": ".analysis.recommendations",
    "resolve_db_path": ".store.database",
    "rules_path": ".analysis.alerts",
    "run_query": ".analysis.gateway",
    "shadow_evaluations": ".analysis.history",
    "store_processor": ".store.exporter",
    "what_if": ".analysis.recommendations",
}

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)

# Modules that moved into subpackages keep their old import paths (docs/architecture.md,
# "Old import paths"); type checkers read the OLD.pyi stubs beside this file.
_MOVED: dict[str, str] = {
    "alerts": ".analysis.alerts",
    "chatlogs": ".ingest.chatlogs",
    "columns": ".store.columns",
    "exporter": ".store.exporter",
    "gateway": ".analysis.gateway",
    "history": ".analysis.history",
    "importer": ".ingest.importer",
    "jsonstream": ".ingest.jsonstream",
    "migrations": ".store.migrations",
    "otlp": ".ingest.otlp",
    "store_errors": ".store.errors",
    "synthetic": ".ingest.synthetic",
    "toml_export": ".analysis.toml_export",
    "writer": ".store.writer",
}
moved_modules(__name__, _MOVED)
