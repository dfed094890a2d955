"""False stops of the detectors on recorded conversations, replayed one user message at a time.

Reads a tau-bench style file (a JSON list of conversations, messages under ``traj``, success =
``reward == 1.0``, tool errors are results starting with ``Error:``). Each user message that the
assistant answered starts one run: the recorded assistant messages are the model's responses,
the recorded tool results are what the tools return. Every run goes through ``run()`` under the
default limits. Prints, per stop reason, the share of runs of successful conversations (false
stops, for the detectors) and of the other conversations it stopped.

    python benchmarks/replay_trajectories.py [PATH]

Default PATH: ``<repo root>/../shared/data/trajectories/tau-bench-gpt-4o-airline.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loopwatch.instrumentation.limits import LoopLimits
from loopwatch.instrumentation.loop import run
from loopwatch.instrumentation.tools import ToolOutcome
from loopwatch.instrumentation.types import Message, ModelResponse, ToolCall

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


class ReplayModel:
    model = "replay"

    def __init__(self, responses: Sequence[ModelResponse]) -> None:
        self.responses = list(responses)
        self.i = 0

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        if self.i >= len(self.responses):  # the recorded turn ended on a tool result
            return ModelResponse(Message("assistant", ""), "stop")
        self.i += 1
        return self.responses[self.i - 1]


class ReplayTools:
    """Returns the recorded result of each call id; ``Error:`` results are failures."""

    def __init__(self, results: Mapping[str, str]) -> None:
        self.results = results

    def get(self, name: str) -> None:
        return None

    def specs(self) -> list[dict[str, Any]]:
        return []

    def execute(
        self, call: ToolCall, *, on_retry: Callable[[Any], None] | None = None
    ) -> ToolOutcome:
        content = self.results.get(call.id, "")
        if content.startswith("Error:"):
            return ToolOutcome(
                call, False, content, error_code="ERROR", error_message=content, attempts=1
            )
        return ToolOutcome(call, True, content, attempts=1)


def runs_of(traj: Sequence[Mapping[str, Any]]) -> list[tuple[list[ModelResponse], dict[str, str]]]:
    """One (responses, results by call id) per user message the assistant answered."""
    out: list[tuple[list[ModelResponse], dict[str, str]]] = []
    for i, m in enumerate(traj):
        if m["role"] != "user":
            continue
        responses: list[ModelResponse] = []
        results: dict[str, str] = {}
        for r in traj[i + 1 :]:
            if r["role"] == "user":
                break
            if r["role"] == "assistant":
                calls = tuple(
                    ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                    for c in r.get("tool_calls") or ()
                )
                responses.append(
                    ModelResponse(
                        Message("assistant", r.get("content"), calls),
                        "tool_calls" if calls else "stop",
                    )
                )
            elif r["role"] == "tool":
                results[r["tool_call_id"]] = r.get("content") or ""
        if responses:
            out.append((responses, results))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(DEFAULT_PATH))
    args = parser.parse_args()
    data = json.loads(pathlib.Path(args.path).read_text())
    stops: dict[bool, collections.Counter[str]] = {
        True: collections.Counter(),
        False: collections.Counter(),
    }
    totals = {True: 0, False: 0}
    examples: dict[str, list[str]] = collections.defaultdict(list)
    for conv in data:
        ok = conv.get("reward") == 1.0
        for responses, results in runs_of(conv["traj"]):
            result = run(
                ReplayModel(responses),
                ReplayTools(results),
                "replay",
                limits=LoopLimits(),
                raise_on_stop=False,
            )
            totals[ok] += 1
            stops[ok][result.stop_reason.value] += 1
            if ok and result.stop_reason.value in DETECTORS:
                examples[result.stop_reason.value].append(
                    f"task {conv.get('task_id')}: {result.explanation[:160]}"
                )
    print(f"runs: {totals[True]} of successful conversations, {totals[False]} of the others")
    print(f"{'stop reason':22} {'successful':>18} {'others':>18}")
    for reason in sorted(set(stops[True]) | set(stops[False])):
        s, o = stops[True][reason], stops[False][reason]
        print(f"{reason:22} {s:5} ({s / totals[True]:6.2%}) {o:7} ({o / totals[False]:6.2%})")
    for reason in DETECTORS:
        for line in examples[reason][:5]:
            print(f"  {reason}: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
