"""The public names of each package face stay: a move can never silently drop one.

Each face's ``__all__`` must keep every name pinned here (new names may be added: pin them
too), and each name must resolve (a lazy-name table pointing at a moved module would not).
The old import paths of moved modules (docs/architecture.md, "Old import paths") give the
module at the new path, and their type stubs name only what that module exports.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PUBLIC: dict[str, frozenset[str]] = {
    "loopwatch.instrumentation": frozenset(
        {
            "Action",
            "AgentLoopError",
            "AgentStuck",
            "Approver",
            "AsyncModel",
            "AsyncTools",
            "BreakerState",
            "BudgetSnapshot",
            "Cancel",
            "CircuitBreaker",
            "CountingBatchSpanProcessor",
            "Decision",
            "ErrorInfo",
            "ErrorResult",
            "Guardrail",
            "Instrumentation",
            "LAST_STEP_NOTICE",
            "LIMITS_ENV",
            "LIMIT_OF",
            "LimitPolicy",
            "LimitReached",
            "LoopGuard",
            "LoopLimits",
            "Message",
            "MetricsServer",
            "MetricsSpanProcessor",
            "Model",
            "ModelResponse",
            "ModelStopped",
            "NoOpObserver",
            "OTelObserverFactory",
            "OUTCOME_OF",
            "ObserverFactory",
            "Outcome",
            "ProgressSignal",
            "ProviderSignal",
            "QueueStats",
            "RetryEvent",
            "RetryPolicy",
            "RunConfig",
            "RunFailed",
            "RunInfo",
            "RunInterrupted",
            "RunObserver",
            "RunResult",
            "Step",
            "StepReport",
            "StopReason",
            "ToolCall",
            "ToolError",
            "ToolOutcome",
            "ToolRecord",
            "ToolRegistry",
            "ToolSpec",
            "Tools",
            "Usage",
            "Verifier",
            "arun",
            "call_fingerprint",
            "classify",
            "classify_provider_stop",
            "describe_call",
            "error_fingerprint",
            "get_observer_factory",
            "instrument",
            "resolve_limits",
            "result_fingerprint",
            "run",
            "serve_metrics",
            "set_observer_factory",
            "short_hash",
            "stable_json",
        }
    ),
    "loopwatch.instrumentation.testing": frozenset(
        {
            "CounterModel",
            "FakeClock",
            "FakeModel",
            "HangingModel",
            "LoopingModel",
            "ScriptExhausted",
            "ScriptedTool",
            "failing_tool",
            "flaky_tool",
            "text_response",
            "tool_call",
            "tool_response",
        }
    ),
    "loopwatch.instrumentation.clients": frozenset(
        {
            "MalformedResponse",
            "ModelCallError",
            "ModelCaller",
            "ModelCircuitOpen",
            "ModelPrice",
            "ModelRetryEvent",
        }
    ),
    "loopwatch.instrumentation.integrations": frozenset(),
    "loopwatch.instrumentation.telemetry": frozenset(
        {
            "DB_ENV",
            "DROP_PROCESSOR_FAILED",
            "DROP_STORE_UNAVAILABLE",
            "Instrumentation",
            "instrument",
        }
    ),
    "loopwatch.queries": frozenset(
        {
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
        }
    ),
    "loopwatch.queries.store": frozenset(
        {
            "DB_ENV",
            "DEFAULT_DB",
            "EventRecord",
            "SCHEMA_VERSION",
            "STORE_TABLES",
            "SchemaVersionError",
            "SpanBatch",
            "SpanColumns",
            "SpanRecord",
            "Store",
            "StoreCorruptError",
            "StoreError",
            "StoreLockedError",
            "StoreNotFoundError",
            "UNKNOWN",
            "connect_read_only",
            "is_damaged_store_error",
            "record_from_span",
            "records_from_spans",
            "resolve_db_path",
            "runs_table",
            "spans_table",
            "warm_up_conversion",
            "StoreUnavailableError",
            "is_fatal_store_error",
        }
    ),
    "loopwatch.queries.analysis": frozenset(
        {
            "AnalysisThresholds",
            "BUDGET_FIELDS",
            "DetectorReplay",
            "Evidence",
            "LimitAnalysis",
            "Verdict",
            "WhatIfPoint",
            "analyze_limits",
            "default_candidates",
            "judge",
            "replay_detectors",
            "round_up",
            "what_if",
            "analyze_file",
        }
    ),
    "loopwatch.dashboard": frozenset(),
    "loopwatch.dashboard.cli": frozenset({"build_parser", "build_report", "main"}),
    "loopwatch.dashboard.demo": frozenset(
        {"DemoError", "DemoOptions", "agent_main", "demo_alert_env", "run_demo"}
    ),
}

# Old dotted path -> where the module lives now (the package faces' moved-module tables).
OLD_PATHS: dict[str, str] = {
    "loopwatch.dashboard.api": "loopwatch.dashboard.server.api",
    "loopwatch.dashboard.charts": "loopwatch.dashboard.app.charts",
    "loopwatch.dashboard.cli_args": "loopwatch.dashboard.cli.args",
    "loopwatch.dashboard.cli_demo": "loopwatch.dashboard.cli.demo",
    "loopwatch.dashboard.cli_import": "loopwatch.dashboard.cli.import_logs",
    "loopwatch.dashboard.cli_report": "loopwatch.dashboard.cli.report",
    "loopwatch.dashboard.cli_report_text": "loopwatch.dashboard.cli.report_text",
    "loopwatch.dashboard.cli_serve": "loopwatch.dashboard.cli.serve",
    "loopwatch.dashboard.cli_text": "loopwatch.dashboard.cli.text",
    "loopwatch.dashboard.cli_upgrade": "loopwatch.dashboard.cli.upgrade",
    "loopwatch.dashboard.filters": "loopwatch.dashboard.app.filters",
    "loopwatch.dashboard.fleet": "loopwatch.dashboard.demo.fleet",
    "loopwatch.dashboard.ingest": "loopwatch.dashboard.server.ingest",
    "loopwatch.dashboard.pagekit": "loopwatch.dashboard.app.pagekit",
    "loopwatch.dashboard.ports": "loopwatch.dashboard.server.ports",
    "loopwatch.dashboard.serve": "loopwatch.dashboard.server.serve",
    "loopwatch.dashboard.settings": "loopwatch.dashboard.app.settings",
    "loopwatch.dashboard.source": "loopwatch.dashboard.app.source",
    "loopwatch.dashboard.summary": "loopwatch.dashboard.app.summary",
    "loopwatch.dashboard.theme": "loopwatch.dashboard.app.theme",
    "loopwatch.dashboard.ui": "loopwatch.dashboard.app.ui",
    "loopwatch.instrumentation.decisions": "loopwatch.instrumentation.runtime.decisions",
    "loopwatch.instrumentation.detectors": "loopwatch.instrumentation.runtime.detectors",
    "loopwatch.instrumentation.drops": "loopwatch.instrumentation.runtime.drops",
    "loopwatch.instrumentation.errors": "loopwatch.instrumentation.runtime.errors",
    "loopwatch.instrumentation.explain": "loopwatch.instrumentation.runtime.explain",
    "loopwatch.instrumentation.extras": "loopwatch.instrumentation.runtime.extras",
    "loopwatch.instrumentation.fingerprint": "loopwatch.instrumentation.runtime.fingerprint",
    "loopwatch.instrumentation.guard": "loopwatch.instrumentation.runtime.guard",
    "loopwatch.instrumentation.lazy": "loopwatch.instrumentation.runtime.lazy",
    "loopwatch.instrumentation.limits": "loopwatch.instrumentation.runtime.limits",
    "loopwatch.instrumentation.loop": "loopwatch.instrumentation.runtime.loop",
    "loopwatch.instrumentation.metrics": "loopwatch.instrumentation.telemetry.metrics",
    "loopwatch.instrumentation.observer": "loopwatch.instrumentation.runtime.observer",
    "loopwatch.instrumentation.outcomes": "loopwatch.instrumentation.runtime.outcomes",
    "loopwatch.instrumentation.processor": "loopwatch.instrumentation.telemetry.processor",
    "loopwatch.instrumentation.reasons": "loopwatch.instrumentation.runtime.reasons",
    "loopwatch.instrumentation.retry": "loopwatch.instrumentation.runtime.retry",
    "loopwatch.instrumentation.semconv": "loopwatch.instrumentation.runtime.semconv",
    "loopwatch.instrumentation.settings": "loopwatch.instrumentation.runtime.settings",
    "loopwatch.instrumentation.tools": "loopwatch.instrumentation.runtime.tools",
    "loopwatch.instrumentation.tracing": "loopwatch.instrumentation.telemetry.tracing",
    "loopwatch.instrumentation.types": "loopwatch.instrumentation.runtime.types",
    "loopwatch.instrumentation.validate": "loopwatch.instrumentation.runtime.validate",
    "loopwatch.queries.alerts": "loopwatch.queries.analysis.alerts",
    "loopwatch.queries.chatlogs": "loopwatch.queries.ingest.chatlogs",
    "loopwatch.queries.columns": "loopwatch.queries.store.columns",
    "loopwatch.queries.exporter": "loopwatch.queries.store.exporter",
    "loopwatch.queries.gateway": "loopwatch.queries.analysis.gateway",
    "loopwatch.queries.history": "loopwatch.queries.analysis.history",
    "loopwatch.queries.importer": "loopwatch.queries.ingest.importer",
    "loopwatch.queries.jsonstream": "loopwatch.queries.ingest.jsonstream",
    "loopwatch.queries.migrations": "loopwatch.queries.store.migrations",
    "loopwatch.queries.otlp": "loopwatch.queries.ingest.otlp",
    "loopwatch.queries.store_errors": "loopwatch.queries.store.errors",
    "loopwatch.queries.synthetic": "loopwatch.queries.ingest.synthetic",
    "loopwatch.queries.toml_export": "loopwatch.queries.analysis.toml_export",
    "loopwatch.queries.writer": "loopwatch.queries.store.writer",
}


@pytest.mark.parametrize("face", sorted(PUBLIC))
def test_a_face_keeps_its_public_names(face: str) -> None:
    module = importlib.import_module(face)
    exported = set(module.__all__)
    dropped = sorted(PUBLIC[face] - exported)
    assert not dropped, f"{face} no longer exports {dropped}"


@pytest.mark.parametrize("face", sorted(PUBLIC))
def test_every_exported_name_resolves(face: str) -> None:
    module = importlib.import_module(face)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{face}: in __all__ but not importable: {missing}"
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_import_path_gives_the_moved_module(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(OLD_PATHS[old])


def test_an_old_path_is_bound_on_its_package_like_a_submodule() -> None:
    import loopwatch.instrumentation
    import loopwatch.instrumentation.guard
    import loopwatch.instrumentation.runtime.guard as guard

    assert loopwatch.instrumentation.guard is guard
    from loopwatch.instrumentation.guard import LoopGuard

    assert LoopGuard is guard.LoopGuard


def _stub_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no __all__")


def test_type_stubs_of_old_paths_match_the_moved_modules() -> None:
    stubs = sorted(
        p
        for folder in ("instrumentation", "queries", "dashboard")
        for p in (ROOT / folder).glob("*.pyi")
    )
    assert stubs
    faces = {
        "instrumentation": "loopwatch.instrumentation",
        "queries": "loopwatch.queries",
        "dashboard": "loopwatch.dashboard",
    }
    for stub in stubs:
        old = f"{faces[stub.parent.name]}.{stub.stem}"
        assert old in OLD_PATHS, f"{stub}: not an old path"
        module = importlib.import_module(OLD_PATHS[old])
        public = set(
            getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        )
        extra = sorted(_stub_names(stub) - public)
        assert not extra, f"{stub.name} names what {OLD_PATHS[old]} no longer exports: {extra}"
