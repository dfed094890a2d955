"""False stops of the detectors on recorded conversations, replayed one user message at a time.

Reads a tau-bench style file (a JSON list of conversations, messages under ``traj``, success =
``reward == 1.0``, tool errors are results starting with ``Error:``). Each user message that the
assistant answered starts one run, given the earlier turns as context: the recorded assistant
messages are the model's responses, the recorded tool results are what the tools return (a
``ToolRegistry`` whose tools read their call id and answer with the recorded text; the
``Error:`` prefix is their error rule). Every run goes through ``run()`` under the default
limits. Prints, per stop reason, the share of runs of successful conversations (false stops,
for the detectors) and of the other conversations it stopped.

    python benchmarks/replay_trajectories.py [PATH] [--examples]

Default PATH: ``<repo root>/../shared/data/trajectories/tau-bench-gpt-4o-airline.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.outcomes import tool_error
from loopwatch.instrumentation.runtime.replay import RecordedStep, replay_peaks
from loopwatch.instrumentation.runtime.tools import ToolOutcome, ToolRegistry
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, RunResult, ToolCall
from loopwatch.instrumentation.testing import FakeModel, text_response

DEFAULT_PATH = (
    pathlib.Path(__file__).resolve().parent.parent.parent
    / "shared/data/trajectories/tau-bench-gpt-4o-airline.json"
)
DETECTORS = (
    "repeated_action",
    "repeated_tool_call",
    "repeated_error",
    "tool_failures",
    "no_progress",
)
ERROR_PREFIX = "Error:"
ANY_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": True}


def _message(m: Mapping[str, Any]) -> Message:
    calls = tuple(
        ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in m.get("tool_calls") or ()
    )
    return Message(m["role"], m.get("content"), calls, m.get("tool_call_id"))


@dataclass
class RecordedRun:
    """One user message and what the agent did with it."""

    context: list[Message]
    """The conversation up to and including the user message."""
    responses: list[ModelResponse]
    results: dict[str, str] = field(default_factory=dict)
    """Tool results by call id."""
    tools: set[str] = field(default_factory=set)


def runs_of(traj: Sequence[Mapping[str, Any]]) -> Iterator[RecordedRun]:
    """One run per user message the assistant answered, with the earlier turns as context."""
    for i, m in enumerate(traj):
        if m["role"] != "user":
            continue
        rec = RecordedRun([_message(x) for x in traj[: i + 1]], [])
        for r in traj[i + 1 :]:
            if r["role"] == "user":
                break
            if r["role"] == "assistant":
                msg = _message(r)
                rec.responses.append(ModelResponse(msg, "tool_calls" if msg.tool_calls else "stop"))
                rec.tools.update(c.name for c in msg.tool_calls)
            elif r["role"] == "tool":
                rec.results[r["tool_call_id"]] = r.get("content") or ""
        if rec.responses:
            yield rec


def registry_for(rec: RecordedRun) -> ToolRegistry:
    """Tools that answer each call with its recorded result, ``Error:`` marking a failure."""
    reg = ToolRegistry(breaker=None, error_prefix=ERROR_PREFIX)

    def recorded(tool_call_id: str, **arguments: Any) -> str:
        return rec.results.get(tool_call_id, "")

    for name in sorted(rec.tools):
        reg.register(recorded, name=name, description="recorded", parameters=ANY_ARGUMENTS)
    return reg


def replay_run(rec: RecordedRun, limits: LoopLimits | None = None) -> RunResult:
    """The recorded run through ``run()``; a turn that ended on a tool result ends empty."""
    model = FakeModel(rec.responses, then=text_response(""))
    return run(
        model, registry_for(rec), rec.context, limits=limits or LoopLimits(), raise_on_stop=False
    )


def recorded_steps(rec: RecordedRun) -> list[RecordedStep]:
    """The run's tool-calling steps, for the detectors' own replay (no loop, no registry)."""
    steps = []
    for index, response in enumerate(rec.responses, start=1):
        calls = []
        for c in response.message.tool_calls:
            text = rec.results.get(c.id, "")
            err = tool_error(text, error_prefix=ERROR_PREFIX)
            calls.append(
                ToolOutcome(
                    call=c,
                    ok=err is None,
                    content=text,
                    error_code=None if err is None else err.code,
                    error_message=None if err is None else err.message,
                )
            )
        if calls:
            steps.append(RecordedStep(index, calls))
    return steps


def peak_shares(path: pathlib.Path, thresholds: Sequence[int] = (2, 3, 4, 5)) -> None:
    """Per detector and threshold N: runs whose peak evidence reached N (would be stopped)."""
    peaks: dict[bool, list[dict[str, int]]] = {True: [], False: []}
    for conv in json.loads(path.read_text(encoding="utf-8")):
        for rec in runs_of(conv["traj"]):
            peaks[conv.get("reward") == 1.0].append(replay_peaks(recorded_steps(rec)))
    print("\nwould stop at threshold N (peaks from detectors.replay_peaks; successful | others)")
    print(f"{'detector':20}" + "".join(f"{'N=' + str(n):>22}" for n in thresholds))
    for d in DETECTORS:
        cells = []
        for n in thresholds:
            good = sum(1 for p in peaks[True] if p[d] >= n) / len(peaks[True])
            bad = sum(1 for p in peaks[False] if p[d] >= n) / len(peaks[False])
            cells.append(f"{good:9.2%} | {bad:7.2%}")
        print(f"{d:20}" + "".join(f"{c:>22}" for c in cells))


@dataclass
class Tally:
    runs: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})
    stops: dict[bool, collections.Counter[str]] = field(
        default_factory=lambda: {True: collections.Counter(), False: collections.Counter()}
    )
    false_stops: list[str] = field(default_factory=list)
    """Explanations of the detector stops in successful conversations."""

    def share(self, reason: str, ok: bool = True) -> float:
        return self.stops[ok][reason] / self.runs[ok] if self.runs[ok] else 0.0


def measure(path: pathlib.Path, limits: LoopLimits | None = None) -> Tally:
    tally = Tally()
    for conv in json.loads(path.read_text(encoding="utf-8")):
        ok = conv.get("reward") == 1.0
        for rec in runs_of(conv["traj"]):
            result = replay_run(rec, limits)
            reason = result.stop_reason.value
            tally.runs[ok] += 1
            tally.stops[ok][reason] += 1
            if ok and reason in DETECTORS:
                tally.false_stops.append(f"task {conv.get('task_id')}: {result.explanation}")
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(DEFAULT_PATH))
    parser.add_argument("--examples", action="store_true", help="print each false stop")
    parser.add_argument(
        "--peaks", action="store_true", help="also the shares at other thresholds (2..5)"
    )
    args = parser.parse_args()
    t = measure(pathlib.Path(args.path))
    print(f"runs: {t.runs[True]} of successful conversations, {t.runs[False]} of the others")
    print(f"{'stop reason':22} {'successful':>16} {'others':>16}")
    for reason in sorted(set(t.stops[True]) | set(t.stops[False]) | set(DETECTORS)):
        s, o = t.stops[True][reason], t.stops[False][reason]
        print(f"{reason:22} {s:5} ({t.share(reason):6.2%}) {o:5} ({t.share(reason, False):6.2%})")
    if args.examples:
        for line in t.false_stops:
            print(f"  {line}")
    if args.peaks:
        peak_shares(pathlib.Path(args.path))


if __name__ == "__main__":
    main()
