"""The guard stays readable: built from small parts, no method over 60 lines, guard.py under
400 lines, and the breaker reached through its declared protocol (docs/runtime.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from loopwatch.instrumentation.runtime.budgets import BUDGET_TABLE
from loopwatch.instrumentation.runtime.limits import BUDGET_LIMITS, LoopLimits
from loopwatch.instrumentation.runtime.types import Usage
from loopwatch.instrumentation.runtime.usage import RunUsage

RUNTIME = Path(__file__).resolve().parent.parent / "instrumentation"
PARTS = (
    "guard", "runstate", "ending", "gates", "budgets", "config", "usage", "escalation",
    "shadow", "toolcalls", "runlog", "completion", "steps", "loop",
)  # fmt: skip


def _module(name: str) -> Path:
    found = sorted(RUNTIME.rglob(f"{name}.py"))
    assert found, name
    return found[0]


@pytest.mark.parametrize("name", PARTS)
def test_no_method_of_the_guard_parts_is_over_60_lines(name: str) -> None:
    tree = ast.parse(_module(name).read_text(encoding="utf-8"))
    long = [
        (f.name, f.end_lineno - f.lineno + 1)  # type: ignore[operator]
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        and f.end_lineno - f.lineno + 1 > 60  # type: ignore[operator]
    ]
    assert long == [], name


def test_guard_py_is_under_400_lines_and_parts_under_400() -> None:
    assert len(_module("guard").read_text(encoding="utf-8").splitlines()) < 400
    for name in PARTS:
        assert len(_module(name).read_text(encoding="utf-8").splitlines()) < 400, name


def test_the_breaker_is_reached_through_its_protocol_not_getattr() -> None:
    text = _module("gates").read_text(encoding="utf-8") + _module("guard").read_text("utf-8")
    assert 'getattr(self._registry, "breaker"' not in text
    assert "isinstance(registry, HasBreaker)" in text
    assert "setattr(" not in _module("guard").read_text(encoding="utf-8")


def test_the_budget_table_covers_every_budget_but_steps() -> None:
    assert [b.name for b in BUDGET_TABLE] == [b for b in BUDGET_LIMITS if b != "steps"]
    for b in BUDGET_TABLE:
        assert BUDGET_LIMITS[b.name] == (b.field, b.reason)
    assert LoopLimits(max_tokens=9).budget_limits["tokens"] == 9


def test_usage_adds_up_through_incr_and_plus() -> None:
    outer = RunUsage()
    inner = RunUsage(parent=outer)
    inner.incr(model_calls=1, usage=Usage(10, 5, 0.5))
    inner.add_tool_call()
    inner.add_model_call(Usage(1, 1, 0.25))
    assert (inner.model_calls, inner.tool_calls, inner.tokens, inner.cost_usd) == (2, 1, 17, 0.75)
    assert outer == inner and outer.spent == inner.spent == 3
    total = inner + RunUsage(model_calls=1, input_tokens=3)
    assert (total.model_calls, total.tokens, total.parent) == (3, 20, None)
