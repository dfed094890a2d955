"""``loopwatch report`` on real store files, in all three formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from loopwatch.dashboard.cli import main
from loopwatch.instrumentation.runtime.limits import LimitPolicy
from loopwatch.queries.ingest.synthetic import FleetTruth, SyntheticRun, generate_fleet, write_runs


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FleetTruth]:
    path = tmp_path_factory.mktemp("cli") / "fleet.duckdb"
    truth = generate_fleet(
        path, seed=5, end=datetime.now(UTC).replace(tzinfo=None), span=timedelta(hours=12)
    )
    return path, truth


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_shows_every_section_and_verdict(fleet: tuple[Path, FleetTruth], capsys: Any) -> None:
    path, truth = fleet
    code, out, err = _report(capsys, "--db", str(path))
    assert code == 0, err
    assert out.startswith(f"loopwatch report — {path}, all time, {truth.runs} runs")
    for section in ("Stop reasons", "Hit-the-limit rates", "Verdicts"):
        assert section in out
    lines = out.splitlines()
    for name, tt in truth.task_types.items():
        for budget, bt in tt.budgets.items():
            if bt.verdict is None:
                continue
            field = {"steps": "max_steps", "tokens": "max_tokens", "wall_s": "max_wall_s"}[budget]
            row = [ln for ln in lines if ln.split()[:3] == [name, field, bt.verdict]]
            assert row, (name, budget, bt.verdict)


def test_json_carries_verdicts_evidence_and_sentences(
    fleet: tuple[Path, FleetTruth], capsys: Any
) -> None:
    path, truth = fleet
    code, out, _ = _report(capsys, "--db", str(path), "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["store"] == str(path) and data["runs"] == truth.runs
    assert data["thresholds"]["margin"] == 0.25 and data["thresholds"]["min_runs"] == 30
    by = {e["task_type"]: e for e in data["task_types"]}
    assert set(by) == set(truth.task_types)
    for name, tt in truth.task_types.items():
        assert by[name]["runs"] == tt.runs
        assert sum(r["runs"] for r in by[name]["stop_reasons"]) == tt.runs
        for lim in by[name]["limits"]:
            expected = tt.budgets[lim["budget"]]
            assert lim["verdict"] == expected.verdict
            assert lim["recommended"] == expected.recommended
            assert lim["sentence"]
            assert set(lim["evidence"]) >= {
                "runs",
                "hits",
                "hit_rate",
                "progressing_share",
                "success_p95",
            }


def test_toml_loads_back_through_limit_policy(
    fleet: tuple[Path, FleetTruth], capsys: Any, tmp_path: Path
) -> None:
    path, truth = fleet
    code, out, _ = _report(capsys, "--db", str(path), "--format", "toml")
    assert code == 0
    toml_path = tmp_path / "limits.toml"
    toml_path.write_text(out, encoding="utf-8")
    policy = LimitPolicy.from_toml(toml_path)
    assert set(policy.task_types) == set(truth.task_types)
    loose = truth.task_types["loose"].budgets
    assert policy.for_task("loose").max_steps == loose["steps"].recommended
    assert policy.for_task("loose").max_tokens == loose["tokens"].recommended
    assert (
        policy.for_task("healthy").max_steps == 12 and policy.for_task("healthy").max_wall_s == 30
    )
    assert policy.for_task("looping").max_steps == 12  # stuck, not tight: unchanged
    assert policy.for_task("sparse").max_steps == 10
    tight = policy.for_task("tight").max_steps
    assert tight is not None and tight >= 13
    assert policy.for_task("tight").max_tokens is None  # off stays off


def test_task_type_and_since_filters(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "w.duckdb"
    now = datetime.now(UTC).replace(tzinfo=None)
    runs = [
        SyntheticRun(
            run_id="old", task_type="a", started_at=now - timedelta(days=3), stop_reason="completed"
        ),
        SyntheticRun(
            run_id="new",
            task_type="a",
            started_at=now - timedelta(hours=1),
            stop_reason="max_steps",
        ),
        SyntheticRun(
            run_id="b", task_type="b", started_at=now - timedelta(hours=1), stop_reason="completed"
        ),
    ]
    write_runs(path, runs)
    code, out, _ = _report(
        capsys, "--db", str(path), "--format", "json", "--since", "1d", "--task-type", "a"
    )
    data = json.loads(out)
    assert code == 0 and data["runs"] == 1
    assert [e["task_type"] for e in data["task_types"]] == ["a"]
    assert data["task_types"][0]["stop_reasons"][0]["stop_reason"] == "max_steps"
    code, out, _ = _report(
        capsys, "--db", str(path), "--format", "json", "--task-type", "a", "--task-type", "b"
    )
    assert json.loads(out)["runs"] == 3


def test_injection_in_task_types_matches_nothing(
    fleet: tuple[Path, FleetTruth], capsys: Any
) -> None:
    path, truth = fleet
    code, out, err = _report(
        capsys, "--db", str(path), "--format", "json", "--task-type", "x' OR '1'='1"
    )
    assert code == 2 and out == ""
    assert "no task type \"x' OR '1'='1\" in" in err
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == truth.runs
    con.close()


def test_empty_store_says_how_to_fill_it(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "empty.duckdb"
    write_runs(
        path,
        [
            SyntheticRun(
                run_id="x", task_type="t", started_at=datetime(2020, 1, 1), stop_reason="completed"
            )
        ],
    )
    code, out, _ = _report(capsys, "--db", str(path), "--since", "1h")
    assert code == 0 and "No runs in the window" in out
    code, out, err = _report(capsys, "--db", str(path), "--since", "1h", "--format", "toml")
    assert code == 2 and out == ""
    assert "refusing to write an empty limits file" in err


def test_db_defaults_to_the_environment(
    fleet: tuple[Path, FleetTruth], capsys: Any, monkeypatch: Any
) -> None:
    path, truth = fleet
    monkeypatch.setenv("LOOPWATCH_DB", str(path))
    code, out, _ = _report(capsys, "--format", "json")
    assert code == 0 and json.loads(out)["runs"] == truth.runs


def test_db_defaults_to_the_working_directory(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.delenv("LOOPWATCH_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = _report(capsys)
    assert code == 2
    assert err.strip() == (
        "loopwatch report: loopwatch.duckdb does not exist: check --db/LOOPWATCH_DB, or create the "
        "store first by running agents with instrument(store=...) or `loopwatch serve`."
    )


def test_missing_file_is_one_line_and_exit_2(tmp_path: Path, capsys: Any) -> None:
    code, out, err = _report(capsys, "--db", str(tmp_path / "nope.duckdb"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "does not exist" in err and "--db" in err


def test_foreign_files_are_one_line_and_exit_2(tmp_path: Path, capsys: Any) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    code, _, err = _report(capsys, "--db", str(text))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "is not a readable DuckDB store" in err
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE things (x INTEGER)")
    con.close()
    code, _, err = _report(capsys, "--db", str(other))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "is a DuckDB file but not a loopwatch store" in err


def test_locked_file_names_the_holder_and_exit_2(
    fleet: tuple[Path, FleetTruth], tmp_path: Path, capsys: Any
) -> None:
    path = tmp_path / "locked.duckdb"
    write_runs(
        path,
        [
            SyntheticRun(
                run_id="x", task_type="t", started_at=datetime(2026, 1, 1), stop_reason="completed"
            )
        ],
    )
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from loopwatch.queries.store.database import Store\n"
            f"s = Store({str(path)!r})\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        code, out, err = _report(capsys, "--db", str(path))
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1
        assert "is locked by" in err and f"PID {holder.pid}" in err and "loopwatch serve" in err
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_bad_arguments_exit_2(capsys: Any, tmp_path: Path) -> None:
    for args in (
        ["--since", "yesterday"],
        ["--format", "yaml"],
        ["--min-runs", "0"],
        ["--margin", "x"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(["report", "--db", str(tmp_path / "x.duckdb"), *args])
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid duration 'yesterday'" in err


def test_the_installed_script_runs(fleet: tuple[Path, FleetTruth]) -> None:
    path, _ = fleet
    exe = Path(sys.executable).parent / "loopwatch"
    proc = subprocess.run(
        [str(exe), "report", "--db", str(path), "--format", "toml"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert LimitPolicy.from_toml(proc.stdout).for_task("healthy").max_steps == 12


# --- a store written by instrumented runs of the reference loop -------------------------------
_WRITER = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from loopwatch.instrumentation.runtime.drops import dropped
from loopwatch.instrumentation.telemetry.pipeline import instrument
from loopwatch.queries.ingest.synthetic import run_reference_fleet

handle = instrument(store=sys.argv[1], tracer_provider=TracerProvider())
truth = run_reference_fleet(seed=int(sys.argv[2]), runs_per_type=260)
handle.shutdown()
print(json.dumps({
    "runs": truth.runs,
    "dropped": dropped(),
    "task_types": {
        name: {b: [bt.verdict, bt.recommended, bt.current_limit] for b, bt in tt.budgets.items()}
        for name, tt in truth.task_types.items()
    },
}))
"""


@pytest.fixture(scope="module")
def reference_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("reference") / "agents.duckdb"
    env = dict(os.environ)
    env.pop("LOOPWATCH_DB", None)
    # the whole fleet is produced in about a second: let the batch queue hold it
    env["OTEL_BSP_MAX_QUEUE_SIZE"] = "200000"
    proc = subprocess.run(
        [sys.executable, "-c", _WRITER, str(path), "11"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(proc.stdout.strip().splitlines()[-1])
    assert truth["dropped"] == {}
    return path, truth


def test_report_on_instrumented_reference_runs_table(reference_store: Any, capsys: Any) -> None:
    path, truth = reference_store
    code, out, err = _report(capsys, "--db", str(path))
    assert code == 0, err
    assert f"{truth['runs']} runs" in out.splitlines()[0]
    lines = out.splitlines()
    fields = {"steps": "max_steps", "tokens": "max_tokens", "wall_s": "max_wall_s"}
    for name, budgets in truth["task_types"].items():
        for budget, (verdict, _, _) in budgets.items():
            if verdict is not None:
                assert any(ln.split()[:3] == [name, fields[budget], verdict] for ln in lines), (
                    name,
                    budget,
                )


def test_report_on_instrumented_reference_runs_json(reference_store: Any, capsys: Any) -> None:
    path, truth = reference_store
    code, out, _ = _report(capsys, "--db", str(path), "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["runs"] == truth["runs"]
    seen = 0
    for entry in data["task_types"]:
        for lim in entry["limits"]:
            verdict, recommended, current = truth["task_types"][entry["task_type"]][lim["budget"]]
            assert (lim["verdict"], lim["recommended"], lim["current_limit"]) == (
                verdict,
                recommended,
                current,
            )
            seen += verdict is not None
    assert seen == 8


def test_report_on_instrumented_reference_runs_toml(reference_store: Any, capsys: Any) -> None:
    path, truth = reference_store
    code, out, _ = _report(capsys, "--db", str(path), "--format", "toml")
    assert code == 0
    policy = LimitPolicy.from_toml(out)
    t = truth["task_types"]
    assert policy.for_task("loose").max_steps == t["loose"]["steps"][1]
    assert policy.for_task("loose").max_tokens == t["loose"]["tokens"][1]
    tight = policy.for_task("tight").max_steps
    # runs cut at 10 while progressing went further than any successful run: a floor of 13
    assert t["tight"]["steps"][1] is None and tight == 13
    assert policy.for_task("looping").max_steps == 12
    assert (policy.for_task("healthy").max_steps, policy.for_task("healthy").max_tokens) == (
        12,
        12000,
    )
    assert policy.for_task("healthy").max_wall_s == 30
    assert policy.for_task("sparse").max_steps == 10
    # the policy runs the loop again: the TOML is a working limits file, not just text
    from loopwatch.queries.ingest.synthetic import reference_fleet_limits

    assert policy.for_task("healthy").max_steps == reference_fleet_limits()["healthy"].max_steps


def test_unknown_task_type_names_the_known_ones(
    fleet: tuple[Path, FleetTruth], capsys: Any
) -> None:
    path, truth = fleet
    for fmt in ("table", "toml"):
        code, out, err = _report(
            capsys, "--db", str(path), "--task-type", "nosuch", "--format", fmt
        )
        assert code == 2 and out == ""
        assert f"no task type 'nosuch' in {path}; known task types: " in err
        for name in truth.task_types:
            assert name in err


@pytest.mark.parametrize(
    ("since", "message"),
    [
        ("99999999d", "at most 36500d (100 years)"),
        ("99999999999999999999d", "at most 36500d (100 years)"),
        ("0s", "must be longer than zero"),
        ("7 days", "use a number and a unit"),
    ],
)
def test_bad_since_is_a_usage_error_not_a_traceback(
    fleet: tuple[Path, FleetTruth], capsys: Any, since: str, message: str
) -> None:
    path, _ = fleet
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--db", str(path), f"--since={since}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# --- odd and damaged stores ---------------------------------------------------------------------
def _odd_store(path: Path, *statements: str) -> None:
    con = duckdb.connect(str(path))
    for sql in statements:
        con.execute(sql)
    con.close()


@pytest.mark.parametrize(
    ("statements", "problem"),
    [
        (
            (
                "CREATE TABLE schema_version (version INTEGER)",
                "INSERT INTO schema_version VALUES (1)",
            ),
            "schema version 1 but no runs, spans table",
        ),
        (
            (
                "CREATE TABLE schema_version (version VARCHAR)",
                "INSERT INTO schema_version VALUES ('abc')",
            ),
            "its schema_version holds 'abc', not a number",
        ),
        (("CREATE TABLE schema_version (version INTEGER)",), "its schema_version table is empty"),
    ],
)
def test_odd_stores_say_what_is_wrong(
    tmp_path: Path, capsys: Any, statements: tuple[str, ...], problem: str
) -> None:
    path = tmp_path / "odd.duckdb"
    _odd_store(path, *statements)
    code, out, err = _report(capsys, "--db", str(path))
    assert code == 2 and out == ""
    assert f"{path} is not a usable loopwatch store ({problem}): " in err


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_damaged_store_is_named_damaged_with_advice(
    fleet: tuple[Path, FleetTruth], tmp_path: Path, capsys: Any, damage: str
) -> None:
    good, _ = fleet
    data = bytearray(good.read_bytes())
    half = len(data) // 2
    if damage == "truncated":
        data = data[:half]
    else:
        data[half:] = b"Z" * (len(data) - half)
    path = tmp_path / f"{damage}.duckdb"
    path.write_bytes(bytes(data))
    code, out, err = _report(capsys, "--db", str(path))
    assert code == 2 and out == ""
    assert f"{path} is not a readable DuckDB store (" in err
    assert "move it aside and let loopwatch create a new store there" in err
    assert "directory exists and is writable" not in err


def test_report_loads_only_what_it_prints(fleet: tuple[Path, FleetTruth]) -> None:
    # start-up is over half of a report's time (docs/queries.md, "Speed"): no pandas (pyarrow
    # imports it on a pa.array() of a list), no Arrow compute kernels, no other subcommand
    path, _ = fleet
    unwanted = [
        "pandas",
        "pyarrow.compute",
        "loopwatch.dashboard.demo.fleet",
        "loopwatch.dashboard.cli.import_logs",
        "loopwatch.dashboard.cli.serve",
        "loopwatch.queries.ingest.chatlogs",
    ]
    probe = (
        "import contextlib, io, json, sys\n"
        "from loopwatch.dashboard.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main(['report', '--db', {str(path)!r}])\n"
        f"print(json.dumps([code, 'Verdicts' in out.getvalue(), "
        f"[m for m in {unwanted!r} if m in sys.modules]]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, True, []]


def test_report_reads_the_successful_runs_once_for_both_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limits file and the file with the spend-rate stop are fit on one read of
    ``success_usage`` (``usage=``), not one read each."""
    from loopwatch.dashboard.cli.report import build_report
    from loopwatch.queries.analysis import recommend

    con = duckdb.connect(str(tmp_path / "once.duckdb"))
    start = datetime(2026, 11, 1)
    write_runs(con, [
        SyntheticRun(run_id=f"r{i}", task_type="support", started_at=start + timedelta(minutes=i),
                     stop_reason="completed", steps=i % 7 + 1)
        for i in range(40)
    ])  # fmt: skip
    reads: list[str] = []
    real = recommend.run_query_columns

    def counted(con: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(name)
        return real(con, name, *args, **kwargs)

    monkeypatch.setattr(recommend, "run_query_columns", counted)
    report = build_report(con, spend_rate=True)
    assert reads.count("success_usage") == 1
    assert report["task_types"][0]["file"] is not None
