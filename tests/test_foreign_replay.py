"""A foreign run's replay without a guard (queries/ingest/foreign/replaying.py) gives exactly
the full guard's answer (importer.replay_run), for any recorded run and any limits."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.types import ToolCall
from loopwatch.queries.ingest.chatlogs import RecordedRun, RecordedTool, RecordedTurn
from loopwatch.queries.ingest.foreign.replaying import finish_peaks, replay_foreign_run
from loopwatch.queries.ingest.importer import replay_run

# Few names and values, so that calls, results and errors repeat and the detectors fire.
TOOLS = st.sampled_from(["search", "read_file", "run_tests"])
ARGUMENTS = st.sampled_from([{}, {"q": "a"}, {"q": "b"}, "hjkuvg", "mnopqr", '{"q": "a"}'])
CONTENTS = st.sampled_from([None, "ok", "found 3", "other", "", "Error: boom 17"])
CODES = st.sampled_from([None, None, None, "NOT_FOUND", "ERROR", "CIRCUIT_OPEN"])
MESSAGES = st.sampled_from([None, "", "no such file", "boom"])
FINISH = st.sampled_from(
    [None, None, "tool_calls", "stop", "length", "content_filter", "pause_turn", "end_turn",
     "tool_use", "weird", "max_tokens"]
)  # fmt: skip
TOKENS = st.one_of(st.none(), st.integers(0, 4000))


@st.composite
def tools(draw: Any) -> RecordedTool:
    code = draw(CODES)
    content = draw(CONTENTS)
    call = ToolCall(draw(st.sampled_from(["", "c1", "c2"])), draw(TOOLS), draw(ARGUMENTS))
    if code is None or content is None:
        return RecordedTool(call, content)
    return RecordedTool(call, content, code, draw(MESSAGES))


@st.composite
def turns(draw: Any) -> RecordedTurn:
    calls = draw(st.lists(tools(), max_size=3))
    return RecordedTurn(None, tuple(calls), draw(FINISH), draw(TOKENS), draw(TOKENS), "m")


@st.composite
def runs(draw: Any) -> RecordedRun:
    recorded = draw(st.lists(turns(), min_size=1, max_size=12))
    return RecordedRun(1, tuple(recorded), len(recorded))


@st.composite
def limits(draw: Any) -> LoopLimits:
    thresholds = st.one_of(st.none(), st.integers(1, 4))
    return LoopLimits(
        max_steps=draw(st.one_of(st.none(), st.integers(1, 12))),
        max_same_call=draw(thresholds),
        max_same_error=draw(thresholds),
        max_consecutive_failures=draw(thresholds),
        max_idle_turns=draw(thresholds),
        max_tool_calls=draw(st.one_of(*[st.none()] * 3, st.integers(1, 10))),
        max_tokens=draw(st.one_of(*[st.none()] * 3, st.integers(100, 20000))),
        max_calls_per_tool=draw(st.one_of(*[st.none()] * 3, st.integers(1, 4))),
        count_calls_only=draw(st.booleans()),
        answer_on_last_step=draw(st.sampled_from([False, False, True])),
        on_stuck=draw(st.sampled_from(["stop", "stop", "nudge"])),
    )


EXAMPLES = int(os.environ.get("LOOPWATCH_EXAMPLES", "600"))


@st.composite
def plain_turns(draw: Any) -> RecordedTurn:
    """Turns that mostly run their calls to new results: runs the guard lets finish."""
    calls = tuple(
        RecordedTool(ToolCall("", draw(TOOLS), {"k": draw(st.integers(0, 30))}),
                     draw(st.sampled_from([None, *map(str, range(30))])))
        for _ in range(draw(st.integers(0, 3)))
    )  # fmt: skip
    finish = draw(st.sampled_from([None, "tool_calls", "stop"] if calls else [None, "stop"]))
    return RecordedTurn(None, calls, finish, draw(TOKENS), draw(TOKENS), "m")


@st.composite
def plain_runs(draw: Any) -> RecordedRun:
    recorded = draw(st.lists(plain_turns(), min_size=1, max_size=10))
    return RecordedRun(1, tuple(recorded), len(recorded))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(runs(), plain_runs()), limits())
def test_replay_without_a_guard_is_the_guards_replay(run: RecordedRun, lim: LoopLimits) -> None:
    expected = replay_run(run, lim, task_type="t", run_id="r")
    assert replay_foreign_run(run, lim, task_type="t", run_id="r") == expected
    if finish_peaks(run, lim) is not None:
        event("answered without a guard")
        # answered without the guard only when the guard lets the run finish as recorded
        assert expected.stop_reason is None


def _turn(*calls: tuple[str, Any, str], finish: str | None = "tool_calls") -> RecordedTurn:
    recorded = tuple(RecordedTool(ToolCall("", n, a), c) for n, a, c in calls)
    return RecordedTurn(None, recorded, finish, 10, 5, "m")


def test_a_plain_run_is_answered_by_the_detectors_and_a_stopping_one_by_the_guard() -> None:
    lim = LoopLimits(max_steps=8)
    plain = RecordedRun(1, (_turn(("search", {"q": "a"}, "x")), _turn(finish="stop")), 2)
    peaks = finish_peaks(plain, lim)
    assert peaks is not None and peaks == replay_run(plain, lim).peaks
    same = ("search", {"q": "a"}, "x")
    looping = RecordedRun(1, tuple(_turn(same) for _ in range(4)), 4)
    assert finish_peaks(looping, lim) is None  # repeated_tool_call fires: the guard says
    replayed = replay_foreign_run(looping, lim, task_type="t", run_id="r")
    assert replayed.decision == "repeated_action"
    assert replayed == replay_run(looping, lim, task_type="t", run_id="r")
    # the last allowed step ends with tool calls: max_steps, decided by the guard
    full = RecordedRun(1, tuple(_turn(("read_file", {"p": str(k)}, str(k))) for k in range(8)), 8)
    assert finish_peaks(full, lim) is None
    assert replay_foreign_run(full, lim, task_type="t", run_id="r").decision == "max_steps"


def test_paced_builds_wait_for_the_build_interval() -> None:
    """serve's writer asks for tables after every commit; paced, one build per interval."""
    from foreign_spans import body, genai_trace
    from loopwatch.queries.ingest.foreign import ForeignOptions, TraceAssembler, views_of
    from loopwatch.queries.ingest.otlp import decode_request

    now = [0.0]
    assembler = TraceAssembler(ForeignOptions(grace_s=1.0), lambda: now[0])
    assert assembler.options.build_interval_s == 1.0
    assert ForeignOptions(grace_s=0.3).build_interval_s == 0.3
    assert ForeignOptions().build_interval_s == 1.0  # the grace (5 s), at most a second

    def add(trace: int) -> None:
        columns = decode_request(body(genai_trace(trace)), "application/json").columns
        assembler.add(views_of(columns, assembler.options.task_type_keys))

    add(1)
    now[0] = 0.8
    add(2)
    now[0] = 1.0
    assert assembler.tables(paced=True) is not None  # trace 1 final: built
    assert assembler.counts.traces_built == 1
    now[0] = 1.8  # trace 2 final now, but the last paced build was 0.8 s ago
    assert assembler.tables(paced=True) is None
    now[0] = 2.0
    assert assembler.tables(paced=True) is not None
    assert assembler.counts.traces_built == 2
    add(3)
    now[0] = 3.0
    assert assembler.tables(paced=True) is not None  # a second since the last build
    add(4)
    now[0] = 3.5
    assert assembler.tables(everything=True) is not None  # shutdown: built whatever the pace
    assert assembler.counts.traces_built == 4


def test_the_collector_is_tuned_while_serving_and_put_back_after() -> None:
    import gc

    from loopwatch.dashboard.server.collection import SERVING_THRESHOLD, serving_collector

    own = gc.get_threshold()
    with serving_collector():
        assert gc.get_threshold()[0] == max(own[0], SERVING_THRESHOLD)
        assert gc.get_freeze_count() > 0  # what was alive at start is out of the collector's way
    assert gc.get_threshold() == own
    assert gc.get_freeze_count() == 0
