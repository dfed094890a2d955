"""One run config: RunConfig in LoopGuard, run and arun; keywords folded in one place; limits
resolved once per run; both loops hand the model the same thing (a copy)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation.runtime.config import RunConfig, RunOptions, run_config
from loopwatch.instrumentation.runtime.guard import LoopGuard
from loopwatch.instrumentation.runtime.limits import LIMITS_ENV, LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.loop import arun, run
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, Usage
from loopwatch.instrumentation.testing import FakeModel, tool_call

POLICY_TOML = """
[defaults]
max_steps = 8
[task_types.support]
max_steps = 5
[shadow.task_types.support]
max_steps = 2
"""


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    return registry


def test_the_keywords_are_the_config_fields() -> None:
    assert set(RunOptions.__annotations__) == {f.name for f in dataclasses.fields(RunConfig)}


def test_a_keyword_wins_over_the_config_and_unknown_ones_are_named() -> None:
    base = RunConfig(task_type="support", agent_name="helpdesk")
    cfg = run_config(base, task_type="billing")
    assert (cfg.task_type, cfg.agent_name) == ("billing", "helpdesk")
    assert run_config(base) is base
    with pytest.raises(TypeError, match="unknown run option"):
        run_config(base, task_tpye="x")
    with pytest.raises(TypeError, match="config must be a RunConfig"):
        run_config({"task_type": "x"})  # type: ignore[arg-type]


def test_a_config_from_keywords_is_the_dataclass_field_for_field() -> None:
    # run_config builds one without the frozen dataclass's __init__ (a config per run)
    given: dict[str, Any] = {
        "task_type": "support",
        "guardrails": [len],
        "repeat_exempt": ["poll"],
        "attributes": {"team": "a"},
    }
    for options in ({}, given, {"attributes": None}):
        built = run_config(**options)
        expected = RunConfig(**{**options, "attributes": options.get("attributes") or {}})
        assert built == expected and repr(built) == repr(expected)
        assert vars(built) == vars(expected) and list(vars(built)) == list(vars(expected))
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.task_type = "x"  # type: ignore[misc]
    built = run_config(**given)
    assert type(built.guardrails) is tuple and type(built.repeat_exempt) is tuple
    assert built.attributes is not given["attributes"]  # copies, as __post_init__ makes them
    assert run_config().attributes is not run_config().attributes


def test_guard_run_and_arun_take_a_config() -> None:
    cfg = RunConfig(limits=LimitPolicy.from_toml(POLICY_TOML), task_type="support")
    assert LoopGuard(config=cfg).limits.max_steps == 5
    assert LoopGuard(config=cfg, task_type="other").limits.max_steps == 8
    script = [tool_call("lookup", key=str(i)) for i in range(10)]
    result = run(FakeModel(script), _registry(), "go", config=cfg, raise_on_stop=False)
    assert result.stop_reason == "max_steps" and result.counters["steps"] == 5
    assert result.task_type == "support" and result.shadow["stop_reason"] == "max_steps"
    async_result = asyncio.run(
        arun(FakeModel(script), _registry(), "go", config=cfg, raise_on_stop=False)
    )
    assert async_result.counters["steps"] == 5 and async_result.shadow["step"] == 2


def test_the_limits_file_is_read_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "limits.toml"
    path.write_text(POLICY_TOML, encoding="utf-8")
    monkeypatch.setenv(LIMITS_ENV, str(path))
    reads: list[Path] = []
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        if self == path:
            reads.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    script = [tool_call("lookup", key=str(i)) for i in range(10)]
    result = run(FakeModel(script), _registry(), "go", task_type="support", raise_on_stop=False)
    assert result.counters["steps"] == 5 and result.shadow["step"] == 2
    assert len(reads) == 1
    asyncio.run(
        arun(FakeModel(script), _registry(), "go", task_type="support", raise_on_stop=False)
    )
    assert len(reads) == 2


class _Keeper:
    """Keeps the message list object each call got, and its length at the call."""

    def __init__(self) -> None:
        self.got: list[tuple[Sequence[Message], int]] = []

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        self.got.append((messages, len(messages)))
        if len(self.got) == 1:
            return ModelResponse(
                Message("assistant", None, (tool_call("lookup", key="a"),)), "tool_use", Usage()
            )
        return ModelResponse(Message("assistant", "done"), "end_turn", Usage())


def test_run_and_arun_both_hand_the_model_a_copy() -> None:
    for drive in (
        lambda m: run(m, _registry(), "go"),
        lambda m: asyncio.run(arun(m, _registry(), "go")),
    ):
        model = _Keeper()
        result = drive(model)
        assert result.final == "done"
        # each call's list still holds what was sent: later messages went to the run's own list
        assert [len(m) for m, _ in model.got] == [n for _, n in model.got] == [1, 3]
        assert all(m is not result.messages for m, _ in model.got)


def test_limits_given_as_config_and_positionally_agree() -> None:
    lim = LoopLimits(max_steps=3)
    assert LoopGuard(lim).limits is LoopGuard(config=RunConfig(limits=lim)).limits is lim
