"""The per-run spend-rate stop (max_cost_per_min / max_tokens_per_min): off by default, a
cost_budget or token_budget stop with limit ``spend_rate``, averaged over at least a minute."""

from __future__ import annotations

from typing import Any

from loopwatch.instrumentation.limits import LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import Usage
from loopwatch.instrumentation.testing import FakeModel, tool_call, tool_response


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def burning_run(limits: LoopLimits, clock: Clock, seconds_per_step: float) -> object:
    registry = ToolRegistry()

    @registry.tool
    def work(n: int) -> str:
        """Do some work."""
        clock.now += seconds_per_step
        return f"did {n}"

    model = FakeModel(
        [tool_response(tool_call("work", n=i), usage=Usage(1000, 0, 0.10)) for i in range(30)],
        then="done",
    )
    return run(model, registry, "go", limits=limits, clock=clock, raise_on_stop=False)


def test_a_run_burning_faster_than_the_rate_stops_with_limit_spend_rate() -> None:
    limits = LoopLimits(max_steps=None, max_cost_per_min=0.5, max_idle_turns=None)
    result: Any = burning_run(limits, Clock(), seconds_per_step=5.0)
    # $0.10 every 5 s is $1.20 a minute: the first minute allows $0.50, so the 5th call stops it
    assert result.stop_reason is StopReason.COST_BUDGET and result.limit == "spend_rate"
    assert "a minute (max_cost_per_min=0.5)" in result.explanation
    assert result.counters["model_calls"] == 5


def test_a_slow_spender_is_not_stopped_and_tokens_per_minute_work_too() -> None:
    slow = LoopLimits(max_steps=12, max_cost_per_min=0.5, max_idle_turns=None)
    result: Any = burning_run(slow, Clock(), seconds_per_step=30.0)  # $0.20 a minute
    assert result.stop_reason is StopReason.MAX_STEPS and result.limit == "steps"
    tokens = LoopLimits(max_steps=None, max_tokens_per_min=3000, max_idle_turns=None)
    result = burning_run(tokens, Clock(), seconds_per_step=1.0)
    assert result.stop_reason is StopReason.TOKEN_BUDGET and result.limit == "spend_rate"


def test_off_by_default_and_the_version_of_old_limits_is_unchanged() -> None:
    assert LoopLimits().max_cost_per_min is None and LoopLimits().max_tokens_per_min is None
    # limits written before the spend rate existed keep their version (charts mark changes)
    assert LoopLimits().version == "b169cb61b8ca932d"
    on = LoopLimits(max_cost_per_min=1.0)
    assert on.version != LoopLimits().version
    policy = LimitPolicy.from_toml("[task_types.a]\nmax_cost_per_min = 0.25\n")
    assert LimitPolicy.from_toml(policy.to_toml()).for_task("a").max_cost_per_min == 0.25
    try:
        LoopLimits(max_cost_per_min=0)
    except ValueError as exc:
        assert "max_cost_per_min" in str(exc)
    else:
        raise AssertionError("a zero rate must be refused")


def test_demo_duration_takes_the_forms_of_report_since() -> None:
    import argparse

    import pytest
    from loopwatch.dashboard.cli.demo import duration_s

    assert duration_s("45s") == 45 and duration_s("5m") == 300 and duration_s("90") == 90
    assert duration_s("1h") == 3600 and duration_s("2.5") == 2.5
    for bad, message in (("-3", "must be positive"), ("soon", "invalid duration"),
                         ("0s", "invalid duration")):  # fmt: skip
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            duration_s(bad)
