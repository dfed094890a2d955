"""loopwatch import: hand-written chat logs with known answers, replayed through the real guard
and stored in a real DuckDB file."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.queries.analysis.history import detector_thresholds, imported_replay
from loopwatch.queries.ingest.chatlogs import (
    ChatLogError,
    ChatLogOptions,
    Conversation,
    parse_conversation,
    task_label,
)
from loopwatch.queries.ingest.importer import (
    IMPORT_SOURCE,
    ImportOptions,
    RunReplay,
    import_chat_log,
    replay_run,
)
from loopwatch.queries.store.database import Store

FIXTURES = Path(__file__).parent / "fixtures" / "import"
OPENAI = FIXTURES / "openai.json"
ANTHROPIC = FIXTURES / "anthropic.jsonl"
OPTIONS = ChatLogOptions(success="outcome", error_prefixes=("Error:",))


def _conversations(options: ChatLogOptions = OPTIONS) -> dict[str, Conversation]:
    records = json.loads(OPENAI.read_text())
    return {r["id"]: parse_conversation(r, options) for r in records}


def _replay(conv: Conversation, limits: LoopLimits | None = None) -> RunReplay:
    (run,) = conv.runs
    return replay_run(run, limits or LoopLimits(), task_type=conv.task_type)


def test_a_run_looping_on_one_call_with_the_same_result_stops_with_repeated_action() -> None:
    conv = _conversations()["same-result-loop"]
    assert conv.success is False
    r = _replay(conv)
    assert r.stop_reason is StopReason.REPEATED_ACTION
    assert r.step == 2
    assert "get_status" in r.explanation
    assert r.peaks["repeated_tool_call"] == 4
    assert r.peaks["repeated_action"] == 4
    # recorded: 5 model calls, 4 tool calls; stopped after 2 of each
    assert r.saved == {"steps": 3.0, "model_calls": 3.0, "tool_calls": 2.0}


def test_a_call_repeated_with_a_changing_result_is_not_a_loop() -> None:
    conv = _conversations()["changing-result"]
    r = _replay(conv)
    assert r.stop_reason is None
    assert r.decision == "finish"
    assert r.step == 5
    assert r.peaks["repeated_tool_call"] == 1
    assert r.peaks["repeated_action"] < 2  # never the same result twice in a row
    assert r.saved == {"steps": 0.0, "model_calls": 0.0, "tool_calls": 0.0}


def test_the_same_error_three_times_stops_with_repeated_error() -> None:
    conv = _conversations()["same-error-3x"]
    (run,) = conv.runs
    codes = [t.error_code for turn in run.turns for t in turn.tools]
    assert codes == ["NOT_FOUND"] * 3
    r = _replay(conv)
    assert r.stop_reason is StopReason.REPEATED_ERROR
    assert r.step == 3
    assert r.peaks["repeated_error"] == 3
    assert r.peaks["tool_failures"] == 3
    # the threshold 4 lets it finish
    assert (
        _replay(conv, LoopLimits(max_same_error=4, max_consecutive_failures=4)).stop_reason is None
    )


def test_three_different_errors_each_fixed_are_not_one_error_repeated() -> None:
    conv = _conversations()["three-errors-fixed"]
    (run,) = conv.runs
    codes = [t.error_code for turn in run.turns for t in turn.tools]
    assert codes == ["UNKNOWN_ERROR", None] * 3  # the Error: prefix rule
    r = _replay(conv)
    assert r.stop_reason is None
    assert r.peaks["repeated_error"] == 1
    assert r.peaks["tool_failures"] == 1
    # without the prefix rule the results are plain text: successes
    (plain,) = _conversations(ChatLogOptions(success="outcome"))["three-errors-fixed"].runs
    assert all(t.error_code is None for turn in plain.turns for t in turn.tools)


def test_a_successful_long_run_is_cut_by_max_steps_and_fits_a_higher_limit() -> None:
    conv = _conversations()["long-success"]
    assert conv.success is True
    (run,) = conv.runs
    assert run.model_calls == 13
    assert run.tokens == 12 * 110 + 220
    r = _replay(conv)
    assert r.stop_reason is StopReason.MAX_STEPS
    assert r.step == 8
    assert r.saved["steps"] == 5
    assert r.saved["tokens"] == run.tokens - 8 * 110
    assert _replay(conv, LoopLimits(max_steps=20)).stop_reason is None


def test_a_conversation_of_three_user_messages_is_three_runs() -> None:
    conv = _conversations()["three-user-messages"]
    assert [r.index for r in conv.runs] == [1, 2, 3]
    assert [r.model_calls for r in conv.runs] == [1, 2, 1]
    assert [r.tool_calls for r in conv.runs] == [0, 1, 0]
    assert [r.loop_end()[0] for r in conv.runs] == [StopReason.COMPLETED] * 3
    assert all(_replay_one(conv, i).stop_reason is None for i in range(3))


def _replay_one(conv: Conversation, i: int) -> RunReplay:
    return replay_run(conv.runs[i], LoopLimits())


def test_the_anthropic_format() -> None:
    record = json.loads(ANTHROPIC.read_text())
    conv = parse_conversation(
        record, ChatLogOptions(format="anthropic", success="success", task_type="task")
    )
    assert conv.id == "anthropic-1"
    assert conv.task_type == "files"
    assert conv.success is True
    first, second = conv.runs
    assert first.model_calls == 3 and first.tool_calls == 2
    tools = [t for turn in first.turns for t in turn.tools]
    assert [t.error_code for t in tools] == ["UNKNOWN_ERROR", None]  # is_error, then a success
    assert tools[0].content == "permission denied: notes.txt"
    assert tools[1].call.arguments == {"path": "./notes.txt", "sudo": True}
    assert first.tokens == 50 + 5 + 60 + 6 + 70 + 7
    assert second.model_calls == 1 and second.tokens == 88
    assert first.loop_end()[0] is StopReason.COMPLETED
    assert replay_run(first, LoopLimits()).stop_reason is None
    # one step allowed: stopped after the first model call
    cut = replay_run(first, LoopLimits(max_steps=1))
    assert cut.stop_reason is StopReason.MAX_STEPS
    assert cut.saved["tokens"] == 60 + 6 + 70 + 7


# --- the store ---------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with Store(tmp_path / "lw.duckdb") as s:
        yield s


def _runs(store: Store) -> list[dict[str, Any]]:
    cur = store.cursor()
    try:
        res = cur.execute(
            "SELECT conversation_id, task_type, stop_reason, outcome, model_calls, tool_calls, "
            "tokens, task_success, source, limit_steps, max_same_call, max_same_error "
            "FROM runs ORDER BY conversation_id, start_ns"
        )
        cols = [c[0] for c in res.description]
        return [dict(zip(cols, row, strict=True)) for row in res.fetchall()]
    finally:
        cur.close()


def _count(store: Store, sql: str) -> int:
    cur = store.cursor()
    try:
        row = cur.execute(sql).fetchone()
        assert row is not None
        return int(row[0])
    finally:
        cur.close()


def test_import_stores_runs_with_labels_usage_and_replay(store: Store) -> None:
    summary = import_chat_log(OPENAI, store, ImportOptions(chat=OPTIONS))
    assert summary.conversations == 6
    assert summary.runs == 8
    assert summary.bad == 0
    assert summary.labels == {"success": 4, "failure": 2}
    assert summary.decisions == {
        "finish": 5,
        "repeated_action": 1,
        "repeated_error": 1,
        "max_steps": 1,
    }
    runs = _runs(store)
    assert len(runs) == 8
    assert {r["source"] for r in runs} == {IMPORT_SOURCE}
    assert {r["task_type"] for r in runs} == {"default"}
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_conv.setdefault(r["conversation_id"], []).append(r)
    assert [r["model_calls"] for r in by_conv["three-user-messages"]] == [1.0, 2.0, 1.0]
    long = by_conv["long-success"][0]
    # the recorded length, not the length the replayed limit would have allowed
    assert long["model_calls"] == 13 and long["tokens"] == 1540
    assert long["outcome"] == "success" and long["task_success"] is True
    assert long["limit_steps"] == 8
    loop = by_conv["same-result-loop"][0]
    assert loop["task_success"] is False and loop["max_same_call"] == 4
    # one tool span per recorded tool call
    assert _count(store, "SELECT count(*) FROM spans WHERE operation = 'execute_tool'") == (
        4 + 4 + 3 + 6 + 12 + 1
    )
    assert (
        _count(
            store,
            "SELECT count(*) FROM spans WHERE operation='execute_tool' AND tool_status='error'",
        )
        == 3 + 3
    )


def test_importing_the_same_file_twice_does_not_double_count(store: Store) -> None:
    first = import_chat_log(OPENAI, store, ImportOptions(chat=OPTIONS))
    spans = _count(store, "SELECT count(*) FROM spans")
    second = import_chat_log(OPENAI, store, ImportOptions(chat=OPTIONS))
    assert first.replaced == 0
    assert second.replaced == second.runs == 8
    assert _count(store, "SELECT count(*) FROM runs") == 8
    assert _count(store, "SELECT count(*) FROM spans") == spans
    # a re-import under other limits replaces the replay
    third = import_chat_log(
        OPENAI,
        store,
        ImportOptions(chat=OPTIONS, limits=LimitPolicy(defaults=LoopLimits(max_steps=20))),
    )
    assert "max_steps" not in third.decisions
    (cut,) = imported_replay(store.connection)
    assert cut.successful_cut == 0
    assert _count(store, "SELECT count(*) FROM runs") == 8


def test_history_queries_on_the_fixtures(store: Store) -> None:
    import_chat_log(OPENAI, store, ImportOptions(chat=OPTIONS))
    (replay,) = imported_replay(store.connection)
    assert replay.task_type == "default"
    assert replay.runs == 8
    # runs of successful tasks: changing-result, three-errors-fixed, long-success, 3 x chat
    assert replay.successful_task_runs == 6
    assert replay.successful_cut == 1  # long-success, by max_steps
    assert replay.failed_task_runs == 2
    assert replay.failed_stopped == 2
    assert replay.spend_measure == "tokens"  # long-success recorded tokens
    assert {s.reason: s.runs for s in replay.stops} == {
        "max_steps": 1,
        "repeated_action": 1,
        "repeated_error": 1,
    }
    found = {(d.detector): d for d in detector_thresholds(store.connection, target=0.2)}
    rtc = found["repeated_tool_call"]
    assert rtc.field == "max_same_call"
    assert rtc.successful_runs == 6 and rtc.failed_runs == 2
    curve = {th: (fs, caught) for th, fs, caught in rtc.curve}
    assert curve[4] == (0.0, 0.5)  # the loop: 4 identical (call, result)
    assert curve[5] == (0.0, 0.0)
    # 6 successful runs cannot show a share under 1%: nothing suggested at the default target
    assert all(d.suggested is None for d in detector_thresholds(store.connection))
    # at 20% (5 runs suffice) the smallest threshold without false stops
    assert rtc.suggested == 2


def test_the_task_label_reads_bools_numbers_and_words() -> None:
    assert task_label(True) is True
    assert task_label(1.0) is True and task_label(0.0) is False
    assert task_label(0.5) is False and task_label(0.5, success_min=0.5) is True
    assert task_label("PASSED") is True and task_label("failed") is False
    assert task_label("maybe") is None and task_label(None) is None
    assert task_label(float("nan")) is False


def test_a_record_without_messages_names_the_key() -> None:
    with pytest.raises(ChatLogError, match=r"no 'messages' key \(keys: 'traj'\).*--messages"):
        parse_conversation({"traj": []}, ChatLogOptions())
    with pytest.raises(ChatLogError, match="'messages' is a string, not a list"):
        parse_conversation({"messages": "hi"}, ChatLogOptions())
    with pytest.raises(ChatLogError, match="message 2 is a number, not an object"):
        parse_conversation({"messages": [{"role": "user"}, 5]}, ChatLogOptions())
    with pytest.raises(ChatLogError, match="tool call 1 has no function name"):
        parse_conversation(
            {"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]},
            ChatLogOptions(),
        )


def test_odd_messages_are_reported_not_fatal() -> None:
    conv = parse_conversation(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "nope", "content": "x"},
                {"role": "critic", "content": "?"},
                {"role": "assistant", "content": "hello"},
            ]
        },
        ChatLogOptions(),
    )
    assert len(conv.runs) == 1
    assert len(conv.problems) == 2
    assert "a tool result for no call" in conv.problems[0]
    assert "unknown role 'critic'" in conv.problems[1]


def test_a_trailing_user_message_no_model_answered_is_not_a_run() -> None:
    conv = parse_conversation(
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "###STOP###"},
            ]
        },
        ChatLogOptions(),
    )
    assert len(conv.runs) == 1


def test_a_run_ending_after_tool_results_is_recorded_as_cancelled() -> None:
    conv = parse_conversation(
        {
            "messages": [
                {"role": "user", "content": "transfer me"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "t", "function": {"name": "transfer", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "t", "content": "Transfer successful"},
            ]
        },
        ChatLogOptions(),
    )
    (run,) = conv.runs
    reason, text = run.loop_end()
    assert reason is StopReason.CANCELLED
    assert "before the model answered" in text
    assert replay_run(run, LoopLimits()).stop_reason is None


def test_runs_read_before_an_interrupt_are_stored(store: Store) -> None:
    def interrupt(done: int, total: int, runs: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_chat_log(
            OPENAI, store, ImportOptions(chat=OPTIONS, batch_runs=1), progress=interrupt
        )
    # the first conversation (one run) was read and replayed before the interrupt
    assert _count(store, "SELECT count(*) FROM runs") == 1


def test_a_store_that_cannot_be_written_fails_the_import(tmp_path: Path) -> None:
    from loopwatch.queries.store.database import StoreError

    path = tmp_path / "lw.duckdb"
    Store(path).close()
    with Store(path, read_only=True) as ro, pytest.raises(StoreError, match="read-only"):
        import_chat_log(OPENAI, ro, ImportOptions(chat=OPTIONS, batch_runs=2))


def test_limits_toml_writes_detector_thresholds() -> None:
    from loopwatch.instrumentation.runtime.limits import LimitPolicy
    from loopwatch.queries.analysis.toml_export import limits_toml

    text = limits_toml([], detectors={"support": {"max_same_call": (4, "measured")}})
    assert "max_same_call = 4  # measured" in text
    assert LimitPolicy.from_toml(text).for_task("support").max_same_call == 4


def _settings(s: Store) -> tuple[str, str]:
    cur = s.cursor()
    try:
        row = cur.execute(
            "SELECT current_setting('checkpoint_threshold'), current_setting('memory_limit')"
        ).fetchone()
        assert row is not None
        return str(row[0]), str(row[1])
    finally:
        cur.close()


def test_the_import_sets_its_checkpoint_and_memory_limit_and_puts_the_stores_back(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, str]] = []
    with Store(tmp_path / "lw.duckdb", checkpoint_mb=8, memory_mb=300) as s:
        before = _settings(s)
        import_chat_log(
            OPENAI,
            s,
            ImportOptions(chat=OPTIONS, checkpoint_mb=48, memory_mb=96),
            progress=lambda *_: seen.append(_settings(s)),
        )
        assert seen and seen[0] == ("45.7 MiB", "91.5 MiB") != before
        assert _settings(s) == before == ("7.6 MiB", "286.1 MiB")

        def interrupt(done: int, total: int, runs: int) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            import_chat_log(OPENAI, s, ImportOptions(chat=OPTIONS), progress=interrupt)
        assert _settings(s) == before
    with Store(tmp_path / "lw.duckdb") as s:  # DuckDB's own settings come back as they were
        before = _settings(s)
        import_chat_log(OPENAI, s, ImportOptions(chat=OPTIONS))
        assert _settings(s) == before
    for name in ("checkpoint_mb", "memory_mb"):
        with pytest.raises(ValueError, match=f"{name} must be at least 1, got 0"):
            ImportOptions(**{name: 0})


def test_the_import_collects_garbage_less_often_and_puts_the_threshold_back(
    tmp_path: Path,
) -> None:
    own = gc.get_threshold()
    seen: list[tuple[int, ...]] = []
    with Store(tmp_path / "lw.duckdb") as s:
        import_chat_log(
            OPENAI,
            s,
            ImportOptions(chat=OPTIONS),
            progress=lambda *_: seen.append(gc.get_threshold()),
        )
    assert seen and seen[0][0] == 50_000 and seen[0][1:] == own[1:]
    assert gc.get_threshold() == own


def test_a_recorded_call_is_the_one_tool_call_record() -> None:
    """A chat log's answered calls are ToolOutcomes (RecordedTool is that class); a call the
    log holds no result for is asked for but has no record, and is let through unanswered."""
    from loopwatch.instrumentation.runtime.toolspec import ToolOutcome
    from loopwatch.queries.ingest.chatlogs import RecordedTool

    assert RecordedTool is ToolOutcome
    call = {"type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}}
    record = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{**call, "id": "c1"}, {**call, "id": "c2"}]},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: no such file"},
        ]
    }
    (run,) = parse_conversation(record, OPTIONS).runs
    (turn,) = run.turns
    assert [c.id for c in turn.calls] == ["c1", "c2"] and run.tool_calls == 2
    (outcome,) = turn.tools
    assert type(outcome) is ToolOutcome and outcome.call is turn.calls[1]
    assert (outcome.ok, outcome.error_code, outcome.attempts) == (False, "UNKNOWN_ERROR", 1)
    assert [(c.id, o) for c, o in turn.answered()] == [("c1", None), ("c2", outcome)]
    replayed = replay_run(run, LoopLimits(max_consecutive_failures=1))
    assert replayed.stop_reason is StopReason.TOOL_FAILURES  # the one answered call failed
    assert replayed.peaks["tool_failures"] == 1
