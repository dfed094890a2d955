"""Property-based tests: every run ends within its bounds with exactly one stop reason, and
fingerprints do not depend on key order at any depth."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopwatch.instrumentation.runtime.fingerprint import (
    call_fingerprint,
    result_fingerprint,
    stable_json,
)
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import arun, run
from loopwatch.instrumentation.runtime.reasons import OUTCOME_OF, StopReason
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import ModelResponse, RunResult, ToolCall, Usage
from loopwatch.instrumentation.testing import (
    FakeModel,
    text_response,
    tool_response,
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)
OBJECTS = st.dictionaries(st.text(max_size=5), JSON, max_size=5)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same data with every dict's keys in a new order, at every depth."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: shuffled(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@given(OBJECTS, st.randoms(use_true_random=False))
def test_fingerprints_ignore_key_order_at_any_depth(
    args: dict[str, Any], rng: random.Random
) -> None:
    other = shuffled(args, rng)
    assert stable_json(other) == stable_json(args)
    assert call_fingerprint("tool", other) == call_fingerprint("tool", args)
    assert call_fingerprint(ToolCall("a", "tool", other)) == call_fingerprint(
        ToolCall("b", "tool", args)
    )
    # Raw JSON text from the model is parsed first: its key order does not matter either.
    assert call_fingerprint(ToolCall("c", "tool", json.dumps(other))) == call_fingerprint(
        ToolCall("d", "tool", args)
    )


@given(OBJECTS, OBJECTS)
def test_different_arguments_give_different_fingerprints(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    if stable_json(a) != stable_json(b):
        assert call_fingerprint("t", a) != call_fingerprint("t", b)


@given(st.text(), st.text())
def test_result_fingerprint_is_a_function_of_the_text(a: str, b: str) -> None:
    assert (result_fingerprint(a) == result_fingerprint(b)) == (a == b)


def _open_registry() -> ToolRegistry:
    reg = ToolRegistry(breaker=None)
    any_args = {"type": "object", "properties": {}, "additionalProperties": True}

    def tool(**arguments: Any) -> str:
        return "ok"

    reg.register(tool, name="tool", parameters=any_args)
    return reg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OBJECTS, st.randoms(use_true_random=False))
def test_the_guard_sees_a_reordered_call_as_the_same_call(
    args: dict[str, Any], rng: random.Random
) -> None:
    first = ToolCall("c1", "tool", args)
    again = ToolCall("c2", "tool", shuffled(args, rng))
    result = run(FakeModel([first, again]), _open_registry(), "go", raise_on_stop=False)
    # The repeat ran (a repeat is judged on its result) and returned the same: stopped.
    assert result.stop_reason is StopReason.REPEATED_ACTION
    assert result.counters["tool_calls"] == 2


# --- any scripted model ends within its bounds with exactly one stop reason --------------------

SIGNALS = [
    "end_turn",
    "stop",
    None,
    "length",
    "max_tokens",
    "refusal",
    "content_filter",
    "pause_turn",
    "tool_use",
    "tool_calls",
    "weird_new_value",
]
TOOL_NAMES = ["echo", "fail", "nope", "done", "poll"]


@st.composite
def calls(draw: st.DrawFn) -> ToolCall:
    name = draw(st.sampled_from(TOOL_NAMES))
    arg = draw(st.sampled_from(["a", "b", "c"]))
    raw = draw(st.booleans())
    args: dict[str, Any] | str = {"text": arg}
    if name == "done":
        args = {"answer": arg}
    if raw and draw(st.booleans()):
        args = json.dumps(args) if draw(st.booleans()) else "{not json"
    return ToolCall(f"id{draw(st.integers(0, 10**6))}", name, args)


@st.composite
def responses(draw: st.DrawFn) -> ModelResponse:
    usage = Usage(
        draw(st.integers(0, 500)), draw(st.integers(0, 500)), draw(st.sampled_from([0.0, 0.01]))
    )
    if draw(st.booleans()):
        chosen = draw(st.lists(calls(), min_size=1, max_size=3))
        return tool_response(
            *chosen,
            stop_reason=draw(st.sampled_from(["tool_use", "tool_calls", "stop", None, "length"])),
            usage=usage,
        )
    return text_response(
        draw(st.text(max_size=8)), stop_reason=draw(st.sampled_from(SIGNALS)), usage=usage
    )


@st.composite
def limit_sets(draw: st.DrawFn) -> LoopLimits:
    def maybe(lo: int, hi: int) -> int | None:
        return draw(st.none() | st.integers(lo, hi))

    return LoopLimits(
        max_steps=draw(st.integers(1, 7)),
        max_consecutive_failures=maybe(1, 4),
        max_same_call=maybe(1, 4),
        max_same_error=maybe(1, 4),
        max_idle_turns=maybe(1, 4),
        max_completion_rejects=maybe(1, 3),
        max_model_calls=maybe(1, 8),
        max_tool_calls=maybe(1, 8),
        max_calls_per_tool=maybe(1, 4),
        max_tokens=maybe(100, 3000),
        max_cost_usd=draw(st.none() | st.sampled_from([0.01, 0.05])),
        count_calls_only=draw(st.booleans()),
        answer_on_last_step=draw(st.booleans()),
    )


def _registry() -> ToolRegistry:
    reg = ToolRegistry(breaker=None, sleep=lambda s: None)

    def echo(text: str) -> str:
        """Echo."""
        return text

    def fail(text: str) -> str:
        """Always fails."""
        raise PermissionError("no")

    def poll(text: str) -> str:
        """Poll."""
        return "pending"

    reg.register(echo)
    reg.register(fail)
    reg.register(poll, repeat_exempt=True)
    reg.register_done()
    return reg


def _check(result: RunResult, model: FakeModel, limits: LoopLimits) -> None:
    assert limits.max_steps is not None
    assert len(model.calls) <= limits.max_steps
    assert result.counters["model_calls"] == len(model.calls)
    assert result.counters["steps"] <= limits.max_steps
    if limits.max_tool_calls is not None:
        assert result.counters["tool_calls"] <= limits.max_tool_calls
    if limits.max_model_calls is not None:
        assert result.counters["model_calls"] <= limits.max_model_calls
    assert isinstance(result.stop_reason, StopReason)
    assert result.outcome is OUTCOME_OF[result.stop_reason]
    stops = [s for s in result.steps if s.kind == "stop"]
    assert len(stops) == 1 and result.steps[-1] is stops[0]
    assert stops[0].detail["reason"] == result.stop_reason.value
    assert (result.explanation == "") == (result.stop_reason is StopReason.COMPLETED)
    assert RunResult.from_json(result.to_json()) == result


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(responses(), max_size=9), limit_sets(), st.booleans())
def test_any_scripted_model_ends_within_max_steps_with_one_reason(
    script: list[ModelResponse], limits: LoopLimits, strict: bool
) -> None:
    model = FakeModel(script)  # running out raises ScriptExhausted inside the loop: an `error` stop
    verify = (lambda r: ["always unmet"]) if strict else None
    result = run(model, _registry(), "go", limits=limits, verify=verify, raise_on_stop=False)
    _check(result, model, limits)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(responses(), max_size=7), limit_sets())
def test_arun_decides_like_run(script: list[ModelResponse], limits: LoopLimits) -> None:
    sync_model, async_model = FakeModel(script), FakeModel(script)
    a = run(sync_model, _registry(), "go", limits=limits, raise_on_stop=False)
    b = asyncio.run(arun(async_model, _registry(), "go", limits=limits, raise_on_stop=False))
    _check(b, async_model, limits)
    assert (b.stop_reason, b.counters["steps"], b.final) == (
        a.stop_reason,
        a.counters["steps"],
        a.final,
    )
    assert b.messages == a.messages
