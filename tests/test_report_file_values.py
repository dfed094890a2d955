"""``loopwatch report`` shows one set of numbers to act on: the values of each task type's limits
file (what ``--format toml`` writes, fit together and judged as a whole). A detector's threshold
judged alone is shown only as labelled context (docs/queries.md, "What the report shows")."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from loopwatch.dashboard.cli.text import detector_lines
from loopwatch.queries.ingest.chatlogs import ChatLogOptions
from loopwatch.queries.ingest.importer import ImportOptions, import_chat_log
from loopwatch.queries.store.database import Store

REPO = Path(__file__).resolve().parents[1]
TAU = REPO.parent / "shared" / "data" / "trajectories" / "tau-bench-gpt-4o-airline.json"


def _detector(threshold_alone: int | None) -> dict[str, object]:
    # false stops fall as the threshold rises: 3% at 2, 0.5% at 3, 0% from 4
    curve = [(2, 0.03, 0.40), (3, 0.005, 0.30)] + [(n, 0.0, 0.1) for n in range(4, 11)]
    return {
        "task_type": "coding",
        "detector": "repeated_tool_call",
        "field": "max_same_call",
        "curve": curve,
        "target": 0.01,
        "suggested": threshold_alone,
        "successful_runs": 400,
        "false_stop_share": 0.005,
        "caught_share": 0.30,
    }


def _cells(lines: list[str]) -> dict[str, str]:
    header, _, row = lines[-3:]
    starts = [m.start() for m in re.finditer(r"(?<=  )\S|^\S", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    values = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    # two "false stops" and "caught" columns: the first pair is at the current setting
    out: dict[str, str] = {}
    for name, value in zip(names, values, strict=True):
        out[name if name not in out else f"{name} there"] = value
    return out


def test_the_detector_table_shows_the_files_threshold_and_alone_as_context() -> None:
    limits = SimpleNamespace(max_same_call=5)
    lines = detector_lines(
        [_detector(3)], lambda _: limits, "default", {"coding": {"repeated_tool_call": 4}}
    )
    cells = _cells(lines)
    # the file (judged with its other limits) writes 4; judged alone the detector would take 3
    assert cells["in the file"] == "4"
    assert (cells["false stops there"], cells["caught there"]) == ("0.0%", "10.0%")
    assert cells["alone"] == "3"
    assert "context only: not written" in lines[1]
    assert "suggested" not in lines[-3]


def test_without_a_file_value_the_table_says_so_instead_of_the_alone_threshold() -> None:
    limits = SimpleNamespace(max_same_call=5)
    cells = _cells(detector_lines([_detector(3)], lambda _: limits, "default", {"coding": {}}))
    assert cells["in the file"] == "-" and cells["false stops there"] == "-"
    assert cells["alone"] == "3"


def test_the_import_table_keeps_its_suggestion() -> None:
    limits = SimpleNamespace(max_same_call=5)
    cells = _cells(detector_lines([_detector(3)], lambda _: limits, "default"))
    assert cells["suggested"] == "3" and cells["false stops there"] == "0.5%"
    assert "alone" not in cells


@pytest.mark.skipif(not TAU.is_file(), reason=f"{TAU} is not here")
def test_the_report_lists_the_values_its_toml_writes(tmp_path: Path) -> None:
    db = tmp_path / "tau.duckdb"
    chat = ChatLogOptions(
        messages_key="traj", success="reward", task_type="airline", error_prefixes=("Error:",)
    )
    with Store(db) as store:
        import_chat_log(TAU, store, ImportOptions(chat=chat))

    def report(fmt: str) -> str:
        args = ["report", "--db", str(db), "--cut-target", "0.05", "--format", fmt]
        return subprocess.run(
            [sys.executable, "-m", "loopwatch.dashboard.cli", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    written = tomllib.loads(report("toml"))["task_types"]["airline"]
    text = report("table")
    (line,) = [x for x in text.splitlines() if x.startswith("  airline: max_steps")]
    listed = dict(p.split(" = ") for p in line.split(": ", 1)[1].split(" — ")[0].split(", "))
    on = {k: str(v) for k, v in written.items() if v != "off"}
    assert listed == on and on["max_steps"] == "8" and on["max_same_error"] == "2"
    # the detector table's numbers are the file's: each "in the file" is the TOML's value
    table = text[text.index("in the file = the threshold") :].splitlines()[1:]
    checked = 0
    for row in table[2:]:
        cells = row.split()
        if cells[2] in written:
            checked += 1
            assert cells[6] == str(written[cells[2]])
    assert checked == 4
