"""One tool-call record from execution to span to replay, and one argument parser
(docs/architecture.md, "One tool call's record"; docs/tools.md, "Arguments")."""

from __future__ import annotations

from typing import Any

import pytest
from loopwatch.instrumentation import LoopGuard, LoopLimits, ToolOutcome, ToolRecord, ToolRegistry
from loopwatch.instrumentation.runtime import detectors
from loopwatch.instrumentation.runtime.arguments import comparable_arguments, parse_arguments
from loopwatch.instrumentation.runtime.completion import done_answer
from loopwatch.instrumentation.runtime.decisions import StepReport
from loopwatch.instrumentation.runtime.fingerprint import call_fingerprint, result_fingerprint
from loopwatch.instrumentation.runtime.replay import (
    RecordedCall,
    RecordedStep,
    replay,
    replay_peaks,
)
from loopwatch.instrumentation.runtime.types import ModelResponse, ToolCall


def test_the_observer_record_is_the_execution_record() -> None:
    assert ToolRecord is ToolOutcome
    assert detectors.RecordedStep is RecordedStep and detectors.replay is replay


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool()
    def read_file(path: str) -> str:
        """Read a file."""
        return f"text of {path} at 10:00:0{len(path) % 10}"

    return registry


def test_a_progress_signal_gets_the_registrys_own_record() -> None:
    registry = _registry()
    reports: list[StepReport] = []
    guard = LoopGuard(
        LoopLimits(max_steps=3), registry=registry, progress=lambda r: reports.append(r) or True
    )
    call = ToolCall("c1", "read_file", {"path": "a.py"})
    guard.before_step()
    guard.after_model(ModelResponse(_assistant(call), "tool_use"))
    guard.before_tool(call)
    outcome = registry.execute(call)
    guard.after_tool(call, outcome)
    guard.end_step()
    (record,) = reports[0].tools
    assert record is outcome  # not converted: nothing had to be added
    assert record.status == "ok" and record.retries == 0 and record.fingerprint == ""


class _Recording:
    def __init__(self) -> None:
        self.records: list[ToolOutcome] = []

    def tool_call_ended(self, record: ToolOutcome, budget: Any) -> None:
        self.records.append(record)

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def test_an_observer_gets_the_record_with_its_fingerprints() -> None:
    registry = _registry()
    seen = _Recording()
    guard = LoopGuard(LoopLimits(max_steps=3), registry=registry, observer=seen)
    call = ToolCall("c1", "read_file", {"path": "a.py"})
    guard.before_step()
    guard.after_model(ModelResponse(_assistant(call), "tool_use"))
    guard.before_tool(call)
    outcome = registry.execute(call)
    guard.after_tool(call, outcome)
    (record,) = seen.records
    assert isinstance(record, ToolOutcome) and record.call is call
    assert record.content == outcome.content and record.attempts == outcome.attempts
    assert record.fingerprint == call_fingerprint(call)
    # the result's fingerprint normalizes the volatile time, like result_fingerprint
    assert record.result_fingerprint == result_fingerprint(outcome.content, "read_file")
    assert record.error_fingerprint is None and record.status == "ok"


def _assistant(call: ToolCall) -> Any:
    from loopwatch.instrumentation.runtime.types import Message

    return Message("assistant", None, (call,))


def _as_outcome(c: RecordedCall) -> ToolOutcome:
    return ToolOutcome(
        call=ToolCall("", c.name, c.arguments),
        ok=c.ok,
        content=c.result,
        error_code=c.error_code,
        error_message=c.error_message,
    )


@pytest.mark.parametrize(
    "calls",
    [
        # the javac counter: one error, its line counter growing
        [
            RecordedCall(
                "bash",
                {"command": "javac A.java"},
                f"/bin/bash: line {62215 + 15 * i}: javac: command not found",
                ok=False,
                error_code="EXIT_127",
            )
            for i in range(6)
        ],
        # a listing per folder: progress, never stopped
        [RecordedCall("ls", f'{{"path": "src/d{i}"}}', f"a{i}.py b{i}.py") for i in range(8)],
        # the same cd, a fresh prompt time each time
        [RecordedCall("cd", {"path": "src"}, f"now in src at 10:0{i}:00") for i in range(4)],
    ],
)
def test_a_replay_of_outcomes_agrees_with_the_older_record(calls: list[RecordedCall]) -> None:
    old = [RecordedStep(i + 1, [c]) for i, c in enumerate(calls)]
    new = [RecordedStep(i + 1, [_as_outcome(c)]) for i, c in enumerate(calls)]
    assert replay(new, LoopLimits()) == replay(old, LoopLimits())
    assert replay_peaks(new) == replay_peaks(old)


def test_a_recorded_error_fingerprint_is_the_failures_identity() -> None:
    # three different messages, one recorded identity: one error three times
    steps = [
        RecordedStep(
            i + 1,
            [
                ToolOutcome(
                    call=ToolCall("", "book", f"fp-{i}"),
                    ok=False,
                    content=f"res-{i}",
                    error_code="SOLD_OUT",
                    error_fingerprint="efp",
                )
            ],
        )
        for i in range(3)
    ]
    assert replay_peaks(steps)["repeated_error"] == 3


def test_one_parser_underneath_the_detectors_arguments() -> None:
    assert detectors.parse_arguments is comparable_arguments  # the old name, deprecated
    assert detectors.comparable_arguments is comparable_arguments
    assert comparable_arguments('{"b": 1, "a": [1, 2]}') == parse_arguments('{"a":[1,2],"b":1}')
    args = {"path": "a"}
    assert comparable_arguments(args) is args  # the guard's usual case: no copy
    assert comparable_arguments(None) == comparable_arguments("  ") == {}
    # what the one parser refuses is compared as sent
    assert comparable_arguments("[1, 2]") == "[1, 2]"
    assert comparable_arguments("0123456789abcdef") == "0123456789abcdef"
    assert comparable_arguments("{not json") == "{not json"


def test_the_done_answer_reads_the_same_parse() -> None:
    assert done_answer(ToolCall("d", "done", '{"answer": "42"}')) == "42"
    assert done_answer(ToolCall("d", "done", "plain words")) == "plain words"
    assert done_answer(ToolCall("d", "done", {"result": 1})) == '{"result":1}'
