"""The dashboard's History & shadow page under Streamlit's AppTest, over a real store holding
imported runs and live runs that carried shadow limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import ToolCall
from loopwatch.instrumentation.telemetry.pipeline import instrument
from loopwatch.instrumentation.testing import FakeModel, text_response, tool_response
from loopwatch.queries.ingest.chatlogs import ChatLogOptions
from loopwatch.queries.ingest.importer import ImportOptions, import_chat_log
from loopwatch.queries.store.database import Store
from opentelemetry.sdk.trace import TracerProvider

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app" / "streamlit_app.py"
OPENAI = ROOT / "tests" / "fixtures" / "import" / "openai.json"
PAGE = "app_pages/history.py"


def _live_runs(db: Path, policy: LimitPolicy | None) -> None:
    reg = ToolRegistry()
    reg.register(lambda page: {"page": page}, name="fetch")
    handle = instrument(tracer_provider=TracerProvider(), store=db)
    try:
        for n in (1, 2, 5, 7):
            script = [tool_response(ToolCall(f"c{i}", "fetch", {"page": i})) for i in range(n)]
            run(
                FakeModel([*script, text_response("done")]),
                reg,
                "go",
                limits=policy or LoopLimits(),
                task_type="batch",
            )
        assert handle.force_flush()
    finally:
        handle.shutdown()


def _page(db: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("LOOPWATCH_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    at.switch_page(PAGE)
    at.run()
    assert not at.exception, at.exception
    return at


def _tables(at: Any) -> list[list[dict[str, Any]]]:
    return [df.value.to_dict("records") for df in at.dataframe]


def test_history_and_shadow_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "lw.duckdb"
    _live_runs(db, LimitPolicy(defaults=LoopLimits(max_steps=12), shadow_defaults={"max_steps": 4}))
    with Store(db) as store:
        import_chat_log(
            OPENAI, store, ImportOptions(chat=ChatLogOptions(success="outcome", task_type="batch"))
        )
    at = _page(db, monkeypatch)
    subheaders = [s.value for s in at.subheader]
    assert subheaders == [
        "Imported and live runs",
        "Recorded history, replayed through the guard",
        "Recommendations checked on runs they were not fit on",
        "Shadow limits on live runs (evaluated, not enforced)",
    ]
    sources, replay, detectors, backtest, shadow = _tables(at)
    # a handful of successful runs: no value is promised, the page says how many are needed
    assert {r["task type"] for r in backtest} == {"batch"}
    assert all(r["value"] == "—" for r in backtest)
    notes = "\n".join(str(m.value) for m in at.markdown)
    assert "too few to promise" in notes and "needed" in notes
    assert {(r["source"], r["runs"]) for r in sources} == {("imported", 8), ("live", 4)}
    (row,) = replay
    assert row["successful-task runs cut"] == "1 of 6"
    assert row["failed-task runs stopped earlier"] == "2 of 2"
    assert {r["detector"] for r in detectors} == {
        "repeated_action",
        "repeated_tool_call",
        "repeated_error",
        "tool_failures",
        "no_progress",
    }
    # the numbers to act on are the file's: too few runs here, so it sets no threshold; the
    # detector's alone threshold is there only as labelled context
    assert all(r["in the file"] == "—" for r in detectors)
    assert "suggested" not in detectors[0] and "alone (context)" in detectors[0]
    assert "context only" in notes and "In the file" in notes
    (s,) = shadow
    # runs of 2, 3, 6 and 8 steps: max_steps = 4 would have cut the last two
    assert s["runs"] == 4 and s["successful runs it would cut"] == "2 of 4"
    assert s["would stop with"] == "max_steps 2"


def test_a_live_only_store_says_how_to_add_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "live.duckdb"
    _live_runs(db, None)
    at = _page(db, monkeypatch)
    text = "\n".join(str(e.value) for e in at.info)
    assert "Every run in the window is live" in text
    assert "No live run carried shadow limits" in text
    (sources,) = _tables(at)
    assert sources == [
        {
            "task type": "batch",
            "source": "live",
            "runs": 4,
            "conversations": 0,
            "completed": "100.0%",
            "task success": "—",
        }
    ]


def test_runs_rebuilt_from_foreign_spans_show_their_replay_and_detectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store with only runs rebuilt from other instrumentations' spans (docs/foreign.md):
    the page shows their replay and the detector table, not "every run is live"."""
    import time

    import foreign_spans
    from loopwatch.queries.ingest.foreign import ForeignOptions, TraceAssembler, views_of
    from loopwatch.queries.ingest.otlp import decode_request
    from loopwatch.queries.store.columns import SpanBatch

    monkeypatch.setattr(foreign_spans, "T0", time.time_ns() - 3600 * 10**9)
    db = tmp_path / "foreign.duckdb"
    assembler = TraceAssembler(ForeignOptions(grace_s=0.0))
    with Store(db) as store:
        for trace in (1, 2):
            decoded = decode_request(
                foreign_spans.body(foreign_spans.genai_trace(trace)), "application/json"
            )
            store.write(SpanBatch.from_columns(decoded.columns))
            assembler.add(views_of(decoded.columns, assembler.options.task_type_keys))
        tables = assembler.tables(everything=True)
        assert tables is not None
        store.write_derived(*tables)
    at = _page(db, monkeypatch)
    assert "Recorded history, replayed through the guard" in [s.value for s in at.subheader]
    sources, replay, detectors, *_ = _tables(at)
    assert sources[0]["source"] == "live, rebuilt from foreign spans" and sources[0]["runs"] == 2
    assert replay[0]["task type"] == "refunds"
    assert {r["detector"] for r in detectors} >= {"repeated_action", "repeated_tool_call"}
