"""``loopwatch import`` from the command line, and ``loopwatch report`` on imported runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard.cli import main
from loopwatch.queries.ingest.synthetic import generate_fleet

FIXTURES = Path(__file__).parent / "fixtures" / "import"
OPENAI = FIXTURES / "openai.json"
ANTHROPIC = FIXTURES / "anthropic.jsonl"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_import_prints_what_it_read_and_what_the_guard_would_do(
    tmp_path: Path, capsys: Any
) -> None:
    db = str(tmp_path / "lw.duckdb")
    code, out, err = _run(
        capsys,
        "import",
        str(OPENAI),
        "--success",
        "outcome",
        "--error-prefix",
        "Error:",
        "--db",
        db,
    )
    assert code == 0, err
    assert err == ""  # nothing skipped, and no progress bar off a terminal
    assert out.startswith(f"Imported 6 conversations (8 runs, 82 messages) from {OPENAI} into {db}")
    assert "Task labels: 4 successful, 2 failed, 0 unlabeled conversations" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("default "))
    assert "1/6" in row  # successful-task runs cut
    assert "2/2" in row  # failed-task runs stopped earlier
    assert "max_steps 1" in row and "repeated_action 1" in row and "repeated_error 1" in row
    assert "Detectors on imported history" in out
    # the same file again: replaced, not added
    code, out, _ = _run(
        capsys,
        "import",
        str(OPENAI),
        "--success",
        "outcome",
        "--error-prefix",
        "Error:",
        "--db",
        db,
    )
    assert code == 0
    assert "8 runs were already in the store (imported before) and were replaced." in out


def test_limits_change_the_replay(tmp_path: Path, capsys: Any) -> None:
    limits = tmp_path / "limits.toml"
    limits.write_text("[defaults]\nmax_steps = 20\nmax_same_call = 5\n")
    db = str(tmp_path / "lw.duckdb")
    code, out, err = _run(
        capsys,
        "import",
        str(OPENAI),
        "--success",
        "outcome",
        "--limits",
        str(limits),
        "--db",
        db,
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["decisions"] == {"finish": 6, "repeated_action": 1, "repeated_error": 1}
    (replay,) = data["replay"]
    assert replay["successful_cut"] == 0 and replay["failed_stopped"] == 2
    assert {d["detector"] for d in data["detectors"]} >= {"repeated_tool_call", "no_progress"}


def test_anthropic_with_task_type_field(tmp_path: Path, capsys: Any) -> None:
    code, out, err = _run(
        capsys,
        "import",
        str(ANTHROPIC),
        "--format",
        "anthropic",
        "--task-type",
        "task",
        "--success",
        "success",
        "--db",
        str(tmp_path / "lw.duckdb"),
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["task_types"] == {"files": 2}
    assert data["task_type_source"] == "field 'task'"
    assert data["replay"][0]["spend_measure"] == "tokens"


def test_skipped_records_are_listed_on_stderr_with_their_position(
    tmp_path: Path, capsys: Any
) -> None:
    log = tmp_path / "log.jsonl"
    good = json.dumps({"messages": [{"role": "user"}, {"role": "assistant", "content": "hi"}]})
    log.write_text(good + "\n{broken\n" + json.dumps({"msgs": []}) + "\n" + good + "\n")
    code, out, err = _run(capsys, "import", str(log), "--db", str(tmp_path / "lw.duckdb"))
    assert code == 0
    assert "Skipped 2 malformed records (listed on stderr)." in out
    assert "loopwatch import: skipped record 2 (line 2): Expecting property name" in err
    assert "loopwatch import: skipped record 3 (line 3): no 'messages' key (keys: 'msgs')" in err


def test_bad_usage_exits_2_and_nothing_importable_exits_1(tmp_path: Path, capsys: Any) -> None:
    db = str(tmp_path / "lw.duckdb")
    code, _, err = _run(capsys, "import", str(tmp_path / "nope.json"), "--db", db)
    assert code == 2 and "nope.json does not exist or is not a file" in err
    bad_limits = tmp_path / "limits.toml"
    bad_limits.write_text("[defaults]\nmax_steps = 0\n")
    code, _, err = _run(capsys, "import", str(OPENAI), "--limits", str(bad_limits), "--db", db)
    assert code == 2 and err.startswith("loopwatch import: --limits:") and "max_steps" in err
    code, _, err = _run(capsys, "import", str(OPENAI), "--messages", "traj", "--db", db)
    assert code == 1
    assert "no conversation imported" in err
    assert "every record keeps its messages under 'messages': add --messages messages." in err
    with pytest.raises(SystemExit) as exc:
        main(["import", str(OPENAI), "--format", "gemini"])
    assert exc.value.code == 2


def test_report_tells_imported_from_live_runs(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "lw.duckdb"
    generate_fleet(db, seed=3, end=datetime.now(UTC).replace(tzinfo=None), span=timedelta(hours=2))
    code, _, err = _run(
        capsys,
        "import",
        str(OPENAI),
        "--success",
        "outcome",
        "--task-type",
        "healthy",
        "--db",
        str(db),
    )
    assert code == 0, err
    code, out, err = _run(capsys, "report", "--db", str(db), "--task-type", "healthy")
    assert code == 0, err
    assert "Imported and live runs" in out
    sources = [ln.split() for ln in out.splitlines() if ln.startswith("healthy ")]
    assert ["healthy", "imported", "8", "6"] in [r[:4] for r in sources]
    assert any(r[:2] == ["healthy", "live"] for r in sources)
    assert "Imported history replayed under the limits given at import" in out
    code, out, _ = _run(capsys, "report", "--db", str(db), "--format", "json")
    data = json.loads(out)
    by_source = {(r["task_type"], r["source"]): r["runs"] for r in data["sources"]}
    assert by_source[("healthy", "import")] == 8
    assert [r["task_type"] for r in data["imported"]] == ["healthy"]


def test_the_progress_bar_shows_on_a_terminal_only(tmp_path: Path) -> None:
    import pty

    db = str(tmp_path / "lw.duckdb")
    cmd = [sys.executable, "-m", "loopwatch.dashboard.cli", "import", str(OPENAI), "--db", db]
    piped = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "importing [" not in piped.stderr
    # stderr on a pseudo-terminal: the bar is drawn there
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=follower, check=True)
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 0
    assert b"importing [##############################] 100.0%" in seen


def test_a_live_too_tight_recommendation_is_a_lower_bound(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "fleet.duckdb"
    generate_fleet(db, seed=5, end=datetime.now(UTC).replace(tzinfo=None), span=timedelta(hours=2))
    code, out, _ = _run(capsys, "report", "--db", str(db), "--format", "json")
    assert code == 0
    limits = {
        (e["task_type"], d["field"]): d for e in json.loads(out)["task_types"] for d in e["limits"]
    }
    tight = limits[("tight", "max_steps")]
    assert tight["verdict"] == "too_tight" and tight["lower_bound"] is True
    assert limits[("loose", "max_steps")]["lower_bound"] is False
    code, out, _ = _run(capsys, "report", "--db", str(db), "--task-type", "tight")
    row = next(ln for ln in out.splitlines() if ln.startswith("tight ") and "too_tight" in ln)
    assert "13+" in row.split()
    assert "(A lower bound: the " in out and "import recorded logs to measure it whole.)" in out


def test_a_store_held_by_another_process_is_a_clear_error(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from loopwatch.queries.store.database import Store; "
            f"s = Store({str(db)!r}); print('ready', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        code, _, err = _run(capsys, "import", str(OPENAI), "--db", str(db))
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    assert code == 2
    assert "is held by another process" in err and f"PID {holder.pid}" in err
    assert "Import into another file (--db)" in err
