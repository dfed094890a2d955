"""`loopwatch import` of coding agents' logs and OTLP/JSON trace files (docs/import.md): example
files written for these tests in each format's documented shape, a real store, the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("duckdb")

from foreign_spans import body, genai_trace
from loopwatch.dashboard.cli import main
from loopwatch.queries.ingest.formats.importing import import_recorded
from loopwatch.queries.store.database import Store

DATA = Path(__file__).parent / "data" / "recorded"
COLUMNS = (
    "source, task_type, stop_reason, limit_name, steps, tool_calls, input_tokens, "
    "replay_decision, peak_repeated_tool_call, peak_tool_failures, explanation"
)


def runs(store: Store) -> list[dict[str, Any]]:
    cur = store.cursor()
    rows = cur.execute(f"SELECT {COLUMNS} FROM runs ORDER BY start_ns").fetchall()
    return [dict(zip([c.strip() for c in COLUMNS.split(",")], r, strict=True)) for r in rows]


def tools(store: Store) -> list[tuple[Any, ...]]:
    return (
        store.cursor()
        .execute(
            "SELECT step, tool_name, tool_status, error_code FROM spans "
            "WHERE operation = 'execute_tool' ORDER BY start_ns"
        )
        .fetchall()
    )


def test_swe_agent_traj_submitted_with_shell_error_and_repeats(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        summary = import_recorded(DATA / "swe_agent_submitted.traj", store, "swe-agent")
        (run,) = runs(store)
        calls = tools(store)
    assert (summary.conversations, summary.runs, summary.bad) == (1, 1, 0)
    assert (run["source"], run["task_type"], run["stop_reason"]) == (
        "import",
        "swe-agent",
        "completed",
    )
    assert (run["steps"], run["tool_calls"], run["input_tokens"]) == (7, 6, 12000)
    # `pytset` is not a command: the shell's error makes the call a failure
    assert calls[1] == (2, "pytset", "error", "shell_error")
    assert [c[2] for c in calls].count("error") == 1
    # three identical `cat` calls with the same output: the detectors' evidence
    assert run["peak_repeated_tool_call"] == 3
    assert run["replay_decision"] == "repeated_action"


def test_swe_agent_exit_cost_is_the_cost_budget(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        import_recorded(DATA / "swe_agent_cost.traj", store, "swe-agent", task_type="swe-bench")
        (run,) = runs(store)
        calls = tools(store)
    assert (run["task_type"], run["stop_reason"], run["limit_name"]) == (
        "swe-bench", "cost_budget", "cost_usd"
    )  # fmt: skip
    assert "exit_cost" in run["explanation"]
    assert calls[1][2:] == ("error", "shell_error")  # a Python traceback


def test_openhands_events_exit_codes_errors_and_max_iterations(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        import_recorded(DATA / "openhands_events.json", store, "openhands")
        import_recorded(DATA / "openhands_max_iterations.json", store, "openhands")
        finished, limited = runs(store)
        calls = tools(store)
    assert finished["stop_reason"] == "completed"
    assert (finished["steps"], finished["tool_calls"], finished["input_tokens"]) == (3, 2, 10000)
    assert calls[:2] == [
        (1, "execute_bash", "error", "exit_code_1"),
        (2, "str_replace_editor", "error", "error"),
    ]
    assert finished["peak_tool_failures"] == 2
    assert (limited["stop_reason"], limited["limit_name"]) == ("max_steps", "steps")
    assert "maximum iteration" in limited["explanation"]


def test_claude_code_session_runs_per_prompt_errors_and_bad_lines(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        summary = import_recorded(DATA / "claude_code_session.jsonl", store, "claude-code")
        first, second = runs(store)
        calls = tools(store)
    assert summary.runs == 2
    assert summary.bad_records == [
        f"{DATA / 'claude_code_session.jsonl'} line 10: " + summary.bad_records[0].split(": ", 1)[1]
    ]
    assert "not JSON" in summary.bad_records[0]
    # one response written as two lines (text, then tool_use) is one model call
    assert (first["steps"], first["tool_calls"], first["input_tokens"]) == (3, 2, 1150)
    assert first["stop_reason"] == "completed"
    assert calls[0] == (1, "Bash", "error", "is_error")
    assert second["stop_reason"] == "output_truncated"


def test_claude_agent_sdk_result_max_turns(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        import_recorded(DATA / "claude_agent_sdk_max_turns.jsonl", store, "claude-code")
        (run,) = runs(store)
    assert (run["stop_reason"], run["limit_name"]) == ("max_steps", "steps")
    assert "error_max_turns" in run["explanation"]


def test_import_again_replaces_and_a_directory_reads_every_file(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        import_recorded(DATA, store, "swe-agent")
        again = import_recorded(DATA, store, "swe-agent")
        assert again.replaced == 2
        assert len(runs(store)) == 2


def test_otlp_json_file_from_a_collector_file_exporter(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    lines = [body(genai_trace(1)), b"{not json", body(genai_trace(2, repeats=1)[1:]),
             body(genai_trace(2, repeats=1)[:1])]  # fmt: skip
    path.write_bytes(b"\n".join(lines) + b"\n")
    with Store(tmp_path / "s.duckdb") as store:
        summary = import_recorded(path, store, "otlp-json")
        first = runs(store)
        again = import_recorded(path, store, "otlp-json")
        assert runs(store) == first
        spans = store.cursor().execute("SELECT count(*) FROM spans").fetchone()
    assert summary.bad == 1 and summary.bad_records[0].startswith(f"{path} line 2: not valid JSON")
    assert [(r["source"], r["stop_reason"], r["replay_decision"]) for r in first] == [
        ("foreign", "completed", "repeated_action"), ("foreign", "completed", "finish")
    ]  # fmt: skip
    assert again.replaced == 3  # lines stored before are not stored again
    assert spans == (len(genai_trace(1)) + len(genai_trace(2, repeats=1)),)


def test_cli_imports_a_coding_agent_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cli.duckdb"
    code = main(["import", str(DATA / "claude_code_session.jsonl"), "--format", "claude-code",
                 "--db", str(db), "--json", "--no-progress"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (out["runs"], out["bad"]) == (2, 1)
    assert out["loop_ends"] == {"completed": 1, "output_truncated": 1}


def _stored(store: Store) -> tuple[list[Any], list[Any]]:
    """Every runs and spans column but the times (set from the import's clock)."""
    cur = store.cursor()
    out = []
    for table in ("runs", "spans"):
        names = [r[0] for r in cur.execute(f"DESCRIBE {table}").fetchall()]
        kept = ", ".join(n for n in names if n not in ("start_ns", "end_ns", "started_at"))
        out.append(sorted(cur.execute(f"SELECT {kept} FROM {table}").fetchall(), key=repr))
    return out[0], out[1]


@pytest.mark.parametrize("fmt", ["swe-agent", "claude-code"])
def test_worker_processes_store_what_one_process_stores(tmp_path: Path, fmt: str) -> None:
    """Sessions read by worker processes give the same runs, spans, fingerprints, detector
    results and report (malformed files by position, in the files' order) as in one process."""
    from loopwatch.queries.ingest.formats.sessions import workers_for

    logs = tmp_path / "logs"
    logs.mkdir()
    examples = sorted(DATA.glob("*.traj" if fmt == "swe-agent" else "*.jsonl"))
    for k in range(24):
        example = examples[k % len(examples)]
        (logs / f"{k:03d}-{example.name}").write_bytes(example.read_bytes())
        if k % 9 == 4:  # a file that is not JSON
            (logs / f"{k:03d}-bad{example.suffix}").write_bytes(b"{not json\n")
    found = []
    for workers in (0, 2):
        with Store(tmp_path / f"w{workers}.duckdb") as store:
            summary = import_recorded(logs, store, fmt, workers=workers)
            found.append((_stored(store), {**summary.to_dict(), "seconds": 0}))
    assert found[0] == found[1]
    (runs_rows, spans_rows), report = found[0]
    assert report["runs"] == len(runs_rows) >= 24 and len(spans_rows) > 24
    assert sum(r.startswith(str(logs / "004-bad")) for r in report["bad_records"]) == 1
    assert workers_for(sorted(logs.iterdir()), None) == 0  # a few kB: read in this process


def test_a_worker_imports_neither_pandas_nor_pyarrow_compute(tmp_path: Path) -> None:
    """A worker's whole chunk (read, replay, the Arrow batch and its IPC bytes), in a fresh
    interpreter set up as a worker: pandas is refused and not needed, and pyarrow.compute is
    not imported (each cost every worker ~0.3 / ~0.08 CPU s: docs/import.md, "Speed")."""
    code = f"""
import sys
from pathlib import Path
from loopwatch.queries.ingest.formats import sessions
from loopwatch.queries.store.columns import SpanBatch
from loopwatch.queries.store.ipc import table_bytes
sessions.prepare_worker()
runs = 0
for fmt, pattern in (("swe-agent", "*.traj"), ("openhands", "*.json"),
                     ("claude-code", "*.jsonl")):
    files = list(enumerate(sorted(Path({str(DATA)!r}).glob(pattern))))
    chunk = sessions.read_chunk(sessions.SessionJob(fmt, fmt, None, 0), files)
    batch = SpanBatch.from_records(chunk.records, source="import")
    assert table_bytes(batch.spans) and table_bytes(batch.runs)
    runs += batch.runs.num_rows
try:
    import pandas
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("pandas was imported")
print(runs, "pandas" in sys.modules, "pyarrow.compute" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "False", "False"]


def test_cli_workers_option_reads_in_workers_or_refuses_a_bad_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for k in range(6):
        (logs / f"{k}.traj").write_bytes((DATA / "swe_agent_submitted.traj").read_bytes())
    stored = []
    for workers in ("0", "2"):
        db = tmp_path / f"w{workers}.duckdb"
        code = main(["import", str(logs), "--format", "swe-agent", "--workers", workers,
                     "--db", str(db), "--json", "--no-progress"])  # fmt: skip
        assert code == 0 and json.loads(capsys.readouterr().out)["runs"] == 6
        with Store(db) as store:
            stored.append(_stored(store))
    assert stored[0] == stored[1]
    with pytest.raises(SystemExit) as refused:
        main(["import", str(logs), "--format", "swe-agent", "--workers", "-1",
              "--db", str(tmp_path / "bad.duckdb")])  # fmt: skip
    assert refused.value.code == 2
    assert "invalid worker count '-1': must be 0..64" in capsys.readouterr().err
