"""The rough edges a new user hit importing recorded runs (issue 17): each is refused, named or
said once, and one meaning of "successful" holds across every query."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard.cli import main
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.queries.analysis.history import detector_thresholds
from loopwatch.queries.analysis.recommendations import analyze_limits, replay_detectors
from loopwatch.queries.ingest.chatlogs import ChatLogOptions, parse_conversation
from loopwatch.queries.ingest.importer import ImportOptions, end_label, import_chat_log
from loopwatch.queries.store.database import Store, connect_read_only

FIXTURES = Path(__file__).parent / "fixtures" / "import"
OPENAI = FIXTURES / "openai.json"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _tool_run(content: str = "ok") -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "t", "function": {"name": "transfer", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "t", "content": content},
    ]


def test_a_success_field_no_record_has_is_refused_naming_the_keys(
    tmp_path: Path, capsys: Any
) -> None:
    db = tmp_path / "lw.duckdb"
    code, _, err = _run(capsys, "import", str(OPENAI), "--success", "rewardx", "--db", str(db))
    assert code == 2
    assert "--success 'rewardx': no conversation read has a field of that name" in err
    assert "'messages'" in err and "'outcome'" in err  # the keys it has
    with Store(db, read_only=True) as store:
        assert store.connection.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_a_run_without_a_final_answer_says_what_happened() -> None:
    conv = parse_conversation(
        {
            "messages": [
                {"role": "user", "content": "transfer me"},
                *_tool_run(),
                {"role": "user", "content": "and again"},
                *_tool_run(),
            ]
        },
        ChatLogOptions(),
    )
    first, last = conv.runs
    reason, text = last.loop_end(True)
    assert reason is StopReason.CANCELLED and "the recording ends after tool results" in text
    assert "its own step or cost cap" in text
    _, text = first.loop_end(False)
    assert "the next user message arrived before the model answered" in text
    assert end_label(last, True) == "no final answer, recording ends"
    assert end_label(first, False) == "no final answer, user moved on"


def test_the_messages_key_hint_is_said_once(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "traj.json"
    log.write_text(
        json.dumps(
            [{"traj": [{"role": "user", "content": f"q{i}"}], "reward": 1} for i in range(7)]
        )
    )
    code, _, err = _run(capsys, "import", str(log), "--db", str(tmp_path / "lw.duckdb"))
    assert code == 1
    assert err.count("add --messages traj") == 2  # the first skipped record, then the summary
    assert "every record keeps its messages under 'traj': add --messages traj." in err
    assert "more skipped records" not in err


def test_no_time_recommendation_from_runs_without_durations(tmp_path: Path) -> None:
    db = tmp_path / "lw.duckdb"
    with Store(db) as store:
        import_chat_log(OPENAI, store, ImportOptions(chat=ChatLogOptions(success="outcome")))
    con = connect_read_only(db)
    try:
        (wall,) = [a for a in analyze_limits(con, include_off=True) if a.budget == "wall_s"]
    finally:
        con.close()
    assert wall.recommended is None
    assert "no successful run recorded wall_s" in wall.sentence
    assert "0.0s" not in wall.sentence


def test_one_successful_run_is_worded_as_one(tmp_path: Path) -> None:
    log = tmp_path / "one.json"
    log.write_text(
        json.dumps(
            [
                {
                    "outcome": "success",
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "hello"},
                    ],
                }
            ]
        )
    )
    db = tmp_path / "lw.duckdb"
    with Store(db) as store:
        import_chat_log(log, store, ImportOptions(chat=ChatLogOptions(success="outcome")))
    con = connect_read_only(db)
    try:
        (steps,) = [a for a in analyze_limits(con) if a.budget == "steps"]
    finally:
        con.close()
    assert "Only 1 run under" in steps.sentence
    assert "1 successful runs" not in steps.sentence + steps.promise
    assert "only 1 successful run (labelled successful):" in steps.promise


def test_import_detectors_and_detector_replay_agree_on_successful_runs(tmp_path: Path) -> None:
    # a labelled-successful conversation whose run ended without a final answer (a cap exit)
    # counts as successful for both queries, as for the recommendations
    log = tmp_path / "caps.json"
    records = [
        {"outcome": "success", "messages": [{"role": "user", "content": "go"}, *_tool_run()]},
        {"outcome": "success", "messages": [{"role": "user", "content": "on"}, *_tool_run("k")]},
        {
            "outcome": "failure",
            "messages": [
                {"role": "user", "content": "go"},
                *_tool_run(),
                {"role": "assistant", "content": "done"},
            ],
        },
    ]
    log.write_text(json.dumps(records))
    db = tmp_path / "lw.duckdb"
    with Store(db) as store:
        import_chat_log(log, store, ImportOptions(chat=ChatLogOptions(success="outcome")))
    con = connect_read_only(db)
    try:
        from_import = {d.detector: d for d in detector_thresholds(con)}
        replayed = {(r.detector, r.threshold): r for r in replay_detectors(con)}
        counts = {(a.budget): a.evidence.successes for a in analyze_limits(con, include_off=True)}
    finally:
        con.close()
    assert from_import["repeated_tool_call"].successful_runs == 2
    assert replayed[("repeated_tool_call", 2)].successful_runs == 2
    assert replayed[("repeated_tool_call", 2)].failed_runs == 1
    assert counts["steps"] == 2


def test_error_rules_are_suggested_when_no_result_is_an_error(tmp_path: Path, capsys: Any) -> None:
    def javac_run(k: int) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"build {k}"}]
        for i in range(5):
            msgs += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "function": {"name": "bash", "arguments": '{"cmd": "javac A.java"}'},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": f"c{i}",
                    "content": f"/bin/bash: line {600 + 15 * i}: javac: command not found",
                },
            ]
        return [*msgs, {"role": "assistant", "content": "cannot build"}]

    log = tmp_path / "coding.json"
    log.write_text(json.dumps([{"outcome": "failure", "messages": javac_run(k)} for k in range(3)]))
    db = tmp_path / "lw.duckdb"
    code, out, err = _run(capsys, "import", str(log), "--success", "outcome", "--db", str(db))
    assert code == 0, err
    assert "Only 0 of 15 tool results were classified as errors" in out
    assert "--error-prefix '/bin/bash:' (12 results before a repeat of the same call)" in out
    code, out, _ = _run(capsys, "report", "--db", str(db))
    assert "only 0 of 15 tool results were classified as errors" in out
    assert not any(ln.split()[1:2] == ["repeated_error"] for ln in out.splitlines() if ln.strip())
    # with the rule, the errors are seen and the volatile repeats are one error
    code, out, _ = _run(capsys, "import", str(log), "--error-prefix", "/bin/bash:", "--db", str(db))
    assert code == 0 and "were classified as errors" not in out
