"""Recorded conversations of a real model (tau-bench, gpt-4o, airline), replayed per user message
through ``run()`` under the default limits: every detector stops at most 0.5% of the runs of
successful conversations (docs/runtime.md, "False stops on recorded runs"). Skips when the file
is absent."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared/data/trajectories/tau-bench-gpt-4o-airline.json"
TARGET = 0.005


def _replayer() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "replay_trajectories", ROOT / "benchmarks/replay_trajectories.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not DATA.exists(), reason=f"{DATA} is absent")
def test_detectors_stop_at_most_half_a_percent_of_successful_runs() -> None:
    replayer = _replayer()
    tally = replayer.measure(DATA)
    # 84 successful conversations of 200; one run per user message the assistant answered.
    assert tally.runs == {True: 517, False: 824}
    for detector in replayer.DETECTORS:
        assert tally.share(detector) <= TARGET, (detector, tally.false_stops)
    # The replay is real: the runs complete, and the failing conversations hold stuck runs.
    assert tally.share("completed") > 0.95
    assert sum(tally.stops[False][d] for d in replayer.DETECTORS) >= 1


@pytest.mark.skipif(not DATA.exists(), reason=f"{DATA} is absent")
def test_a_recorded_run_replays_its_messages_and_tool_errors() -> None:
    replayer = _replayer()
    conversations = json.loads(DATA.read_text(encoding="utf-8"))
    runs = [r for c in conversations for r in replayer.runs_of(c["traj"])]
    with_error = next(r for r in runs if any(v.startswith("Error:") for v in r.results.values()))
    result = replayer.replay_run(with_error)
    errors = [s for s in result.steps if s.kind == "tool" and s.detail["status"] == "error"]
    assert errors, "an Error: result counts as a failed call"
    # The context went to the model: the run's messages start with the conversation so far.
    assert result.messages[: len(with_error.context)] == with_error.context
