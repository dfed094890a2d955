"""Volatile text in calls and results (issue 17, point 4): repeats that differ only by a counter,
a time or a temp path are stopped; results that differ in substance are not merged.

Each golden case runs the real guard through the reference loop (live) and the replay of the
same recorded steps, which must agree.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopwatch.instrumentation.runtime import fingerprint
from loopwatch.instrumentation.runtime import tally as tally_module
from loopwatch.instrumentation.runtime.detectors import (
    Detectors,
    RecordedCall,
    RecordedStep,
    replay,
    replay_peaks,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    call_fingerprint,
    compare_exactly,
    exact_text_tools,
    normalize_volatile,
    result_fingerprint,
)
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.quickscan import no_digit_pairs
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.toolspec import ToolOutcome
from loopwatch.instrumentation.runtime.types import RunResult, ToolCall
from loopwatch.instrumentation.testing import FakeModel, ScriptedTool, tool_call

LIMITS = LoopLimits(max_steps=80, max_idle_turns=None)


def javac(i: int) -> str:
    return f"/bin/bash: line {62215 + 15 * i}: javac: command not found"


def edit_view(i: int) -> str:
    return (
        f"[File: /repo/src/Main.java ({82 + i} lines total)]\n(69 more lines above)\n"
        "70:     int total = 0;\n71:     return total;\n"
        f"({11 + i} more lines below)\nFile updated. Please review the changes."
    )


def cd_answer(i: int) -> str:
    return (
        "[Python Interpreter: /usr/bin/python]\n"
        f"[Command finished with exit code 0 in 0.0{i % 10 + 1}s at 2024-07-01T10:{i:02d}:13Z]"
    )


def pytest_counts(i: int) -> str:
    return f"==== {20 - i} failed, {10 + i} passed in 1.{i}3s ===="


def listing(i: int) -> str:
    return "  ".join(f"module_{k}.py" for k in range(i + 1))


# --- the steps of each case -------------------------------------------------------------------


def repeated(name: str, command: str, results: Sequence[str]) -> list[RecordedStep]:
    return [
        RecordedStep(i + 1, [RecordedCall(name, {"command": command}, r)])
        for i, r in enumerate(results)
    ]


def cd_interleaved(times: int) -> list[RecordedStep]:
    # cd into the same folder 22 times, a different look around in between
    steps = []
    for i in range(times):
        steps.append(
            RecordedStep(
                2 * i + 1,
                [RecordedCall("bash", {"command": "cd /workspace/django"}, cd_answer(i))],
            )
        )
        steps.append(
            RecordedStep(
                2 * i + 2,
                [RecordedCall("bash", {"command": f"ls tests/t{i}"}, f"test_{i}_a.py")],
            )
        )
    return steps


STOPPED = {
    "javac counter, 20 times": repeated("bash", "javac Main.java", [javac(i) for i in range(20)]),
    "edit returning a growing file": repeated(
        "edit", "edit 70:71 int total = 0;", [edit_view(i) for i in range(20)]
    ),
    "cd into the same folder 22 times": cd_interleaved(22),
}
NOT_MERGED = {
    "different files listed": repeated("bash", "ls", [listing(i) for i in range(20)]),
    "failing tests going down": repeated(
        "bash", "pytest -q", [pytest_counts(i) for i in range(20)]
    ),
}


@pytest.fixture
def bash_exact() -> Iterator[None]:
    compare_exactly(["bash"])
    try:
        yield
    finally:
        compare_exactly(["bash"], exact=False)
    assert "bash" not in exact_text_tools()


def live(steps: Sequence[RecordedStep]) -> RunResult:
    """The same steps through the reference loop and the real guard."""
    calls = [c for s in steps for c in s.calls]
    reg = ToolRegistry(breaker=None)
    tools: dict[str, ScriptedTool] = {}
    for name in sorted({c.call.name for c in calls}):
        tools[name] = ScriptedTool(
            [c.content for c in calls if c.call.name == name], params=("command",), name=name
        )
        reg.register(tools[name], name=name)
    asked = [tool_call(c.call.name, **c.call.arguments) for c in calls]  # type: ignore[arg-type]
    model = FakeModel(asked, then="done")
    return run(model, reg, "fix the build", limits=LIMITS, raise_on_stop=False)


@pytest.mark.parametrize("case", sorted(STOPPED))
def test_volatile_repeats_are_stopped_live_and_in_replay(case: str) -> None:
    steps = STOPPED[case]
    finding = replay(steps, LIMITS)
    assert finding is not None and finding.reason in (
        StopReason.REPEATED_TOOL_CALL,
        StopReason.REPEATED_ACTION,
    ), case
    result = live(steps)
    assert result.stop_reason == finding.reason, case
    assert result.counters["steps"] == finding.step, case
    assert replay_peaks(steps)["repeated_tool_call"] >= 20


@pytest.mark.parametrize("case", sorted(NOT_MERGED))
def test_results_that_differ_in_substance_are_not_merged(case: str) -> None:
    steps = NOT_MERGED[case]
    assert replay(steps, LIMITS) is None, case
    peaks = replay_peaks(steps)
    assert peaks["repeated_tool_call"] == 1 and peaks["repeated_action"] <= 1, case
    assert live(steps).stop_reason == StopReason.COMPLETED


def test_a_tool_compared_exactly_is_not_normalized(bash_exact: None) -> None:
    steps = STOPPED["javac counter, 20 times"]
    assert replay(steps, LIMITS) is None
    assert replay_peaks(steps)["repeated_tool_call"] == 1
    assert live(steps).stop_reason == StopReason.COMPLETED
    assert result_fingerprint(javac(0), "bash") != result_fingerprint(javac(1), "bash")
    assert result_fingerprint(javac(0), "other") == result_fingerprint(javac(1), "other")


def test_fingerprints_normalize_the_same_volatile_text() -> None:
    assert result_fingerprint(javac(0)) == result_fingerprint(javac(19))
    assert result_fingerprint(edit_view(0)) == result_fingerprint(edit_view(7))
    assert result_fingerprint(pytest_counts(0)) != result_fingerprint(pytest_counts(1))
    assert result_fingerprint(listing(2)) != result_fingerprint(listing(3))
    assert call_fingerprint("bash", {"command": "cat /tmp/tmpa8f3k2/out.txt"}) == call_fingerprint(
        "bash", {"command": "cat /tmp/tmpzz91qx/out.txt"}
    )
    assert call_fingerprint("read", {"path": "a.py"}) != call_fingerprint("read", {"path": "b.py"})
    # a recorded fingerprint is already normalized: it is never turned into a placeholder
    fp = result_fingerprint("x")
    assert normalize_volatile(fp) == fp


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        (
            "/bin/bash: line 62215: javac: command not found",
            "/bin/bash: line <n>: javac: command not found",
        ),
        ("(82 lines total)", "(<n> lines total)"),
        ("12:  x = 1\n13:  y = 2", "<n>:  x = 1\n<n>:  y = 2"),
        ("done at 2024-05-13T10:00:00.123Z", "done at <time>"),
        ("id 3f2b8c1e-1a2b-4c3d-9e8f-0123456789ab", "id <id>"),
        ("commit 9fceb02d0ae598e95dc970b74767f19372d61af8", "commit <hex>"),
        ("wrote /tmp/tmpa8f3k2/out.txt", "wrote <tmp>/out.txt"),
        ("Ran 12 tests in 0.53s", "Ran 12 tests in <duration>"),
        ("started pid 4242", "started pid <n>"),
        ("5 failed, 10 passed", "5 failed, 10 passed"),
        ("page 2 of 7", "page 2 of 7"),
        ("a.py b.py test_1.py", "a.py b.py test_1.py"),
        ("/tmp/report.txt", "/tmp/report.txt"),
    ],
)
def test_what_is_volatile(text: str, normalized: str) -> None:
    assert normalize_volatile(text) == normalized


# --- what normalizing costs, and what it leaves alone ------------------------------------------

_VOLATILE_BITS = st.sampled_from(
    [
        "line ",
        "Line ",
        " lines",
        " more lines",
        "pid ",
        "PID:",
        "process #",
        "In [",
        "Out[",
        "/tmp/",
        "/var/folders/ab/cd/T/",
        "0x",
        "-",
        ":",
        "|",
        "\t",
        "\n",
        " ",
        ".",
        "s",
        "ms",
        "µs",
        "us",
        "ns",
        "sec",
        "T",
        "Z",
        "+",
        "]",
        "(",
        ")",
        "a",
        "f",
        "B",
        "E",
        "x",
        "g",
        "tmp",
        "abcdefab",
        "1234",
        "12",
        "7",
        "0",
        "2024-05-13",
        "10:00:00",
        "deadbeef",
        "3f2b8c1e-1a2b-4c3d-9e8f-0123456789ab",
        "abcdefab-1234-abcd-1234-abcdefabcdef",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_VOLATILE_BITS, max_size=12).map("".join))
def test_the_quick_check_never_skips_text_a_pass_would_change(text: str) -> None:
    # normalize_volatile skips the passes on text its quick check clears: the passes applied
    # unconditionally must then leave the text as it is.
    if len(text) == 16 and fingerprint.FINGERPRINT.fullmatch(text):
        return
    full = text
    for pattern, replace, _hints in fingerprint.PASSES:
        full = pattern.sub(replace, full)
    assert normalize_volatile(text) == full


def _ran(name: str, arguments: dict[str, object], result: str) -> ToolOutcome:
    return ToolOutcome(call=ToolCall("", name, arguments), ok=True, content=result)


def test_the_record_keeps_the_text_the_model_saw_and_sent() -> None:
    d = Detectors()
    for i in range(3):
        args = {"command": f"cat /tmp/tmp{i}x9/out.txt"}
        outcome = _ran("bash", args, javac(i))
        found = d.after_call(outcome, i + 1)
        assert outcome.content == javac(i) and outcome.call.arguments is args
        # the tally compares the result normalized; the record keeps the text
        assert d.last_entry is not None and d.last_entry.result != javac(i)
    assert found is not None and found.reason is StopReason.REPEATED_ACTION
    # the evidence names the call as made, not its placeholders
    assert "/tmp/tmp2x9/out.txt" in found.evidence


def test_arguments_are_normalized_only_when_a_result_repeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = Detectors()
    calls: list[object] = []

    def counting(value: object, _depth: int = 0) -> object:
        calls.append(value)
        return fingerprint.normalize_arguments(value, _depth)

    monkeypatch.setattr(tally_module, "normalize_arguments", counting)
    for i in range(20):
        d.after_call(_ran("read", {"path": f"src/f_{i}.py"}, f"text {i}"), i + 1)
    assert calls == []  # every result new: no call compared
    d.after_call(_ran("read", {"path": "src/f_0.py"}, "text 0"), 21)
    assert calls == []  # the same call exactly
    d.after_call(_ran("read", {"path": "/tmp/tmpq1/f.py"}, "text 0"), 22)
    # a seen result from another call: is that call new? each earlier call normalized once
    assert len(calls) == 21
    d.after_call(_ran("read", {"path": "/tmp/tmpz7/f.py"}, "text 1"), 23)
    assert len(calls) == 22  # only the new call's arguments: the others are kept


def test_recent_new_calls_compares_calls_normalized() -> None:
    # the same cat of a fresh temp folder each step is not a new call
    steps = [
        RecordedStep(i + 1, [RecordedCall("bash", {"command": f"cat /tmp/tmp{i}k2/x"}, f"r{i}")])
        for i in range(8)
    ]
    result = live(steps)
    assert result.stop_reason == StopReason.COMPLETED
    assert result.progress["recent_new_calls"] == 0


@pytest.mark.parametrize(
    ("text", "cleared"),
    [
        (" 140891 def function_582(x): return x\n 888598 def function_821(x): return x", True),
        ("collected 12 items, 3 failed", True),
        ("took 0.53s", False),
        ("a.py:12: AssertionError", False),
        ("id deadbeef42", False),
        ("12 more lines", False),
        ("In [3]: x", False),
        ("é 12 items", False),  # not ASCII: not scanned, the pattern decides
    ],
)
def test_the_class_scan_clears_listings_of_numbers_and_keeps_what_may_be_volatile(
    text: str, cleared: bool
) -> None:
    assert no_digit_pairs(text) is cleared
