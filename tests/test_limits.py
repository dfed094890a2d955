"""LoopLimits and LimitPolicy: docs/runtime.md defaults, validation, budgets, versions, TOML."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation import semconv
from loopwatch.instrumentation.runtime.limits import BUDGET_LIMITS, LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.loop import LIMITS_ENV, resolve_limits
from loopwatch.instrumentation.runtime.reasons import LIMIT_OF, StopReason

EXAMPLE_TOML = """
[defaults]
max_steps = 8
[task_types.support_ticket]
max_steps = 15
max_wall_s = 300
"""


def test_defaults_follow_design() -> None:
    lim = LoopLimits()
    assert (
        lim.max_steps,
        lim.max_consecutive_failures,
        lim.max_same_call,
        lim.max_same_error,
        lim.max_idle_turns,
        lim.max_completion_rejects,
    ) == (8, 3, 3, 3, 5, 2)
    for off in (
        "max_model_calls",
        "max_tool_calls",
        "max_calls_per_tool",
        "max_tokens",
        "max_cost_usd",
        "max_wall_s",
    ):
        assert getattr(lim, off) is None, off
    assert lim.soft_threshold == 0.8
    assert lim.count_calls_only is False and lim.answer_on_last_step is False


def test_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        LoopLimits(8)  # type: ignore[misc]
    lim = LoopLimits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        lim.max_steps = 9  # type: ignore[misc]


def test_none_switches_a_limit_off() -> None:
    lim = LoopLimits(max_steps=None, max_same_call=None)
    assert lim.max_steps is None and lim.limit_of("steps") is None
    assert lim.check_budget("steps", 10**9) is None


COUNTS = [
    "max_steps",
    "max_consecutive_failures",
    "max_same_call",
    "max_same_error",
    "max_idle_turns",
    "max_completion_rejects",
    "max_model_calls",
    "max_tool_calls",
    "max_tokens",
]


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_invalid_count_names_the_field(field: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"^{field} must be a positive integer or None, got "):
        LoopLimits(**{field: bad})


@pytest.mark.parametrize("field", ["max_cost_usd", "max_wall_s"])
@pytest.mark.parametrize("bad", [0, -0.5, float("nan"), float("inf"), True, "1"])
def test_invalid_amount_names_the_field(field: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"^{field} must be a positive number or None, got "):
        LoopLimits(**{field: bad})


@pytest.mark.parametrize("bad", [0, 1.5, -0.1, True])
def test_invalid_soft_threshold(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^soft_threshold must be a number in \(0, 1\]"):
        LoopLimits(soft_threshold=bad)


@pytest.mark.parametrize("bad", [0, {"search": 0}, {"search": "2"}, {3: 1}, True])
def test_invalid_per_tool_caps(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^max_calls_per_tool must"):
        LoopLimits(max_calls_per_tool=bad)


def test_invalid_flag() -> None:
    with pytest.raises(ValueError, match=r"^count_calls_only must be true or false, got 1"):
        LoopLimits(count_calls_only=1)  # type: ignore[arg-type]


def test_exact_message() -> None:
    with pytest.raises(ValueError) as info:
        LoopLimits(max_steps=0)
    assert str(info.value) == "max_steps must be a positive integer or None, got 0"


def test_budgets_map_to_limit_stop_reasons() -> None:
    assert set(BUDGET_LIMITS) == set(semconv.BUDGETS)
    for budget, (_, reason) in BUDGET_LIMITS.items():
        assert LIMIT_OF[reason] == budget


def test_check_budget_and_utilization() -> None:
    lim = LoopLimits(max_steps=4, max_tokens=1000, max_cost_usd=0.5)
    assert lim.check_budget("steps", 3) is None
    assert lim.check_budget("steps", 4) is StopReason.MAX_STEPS
    assert lim.check_budgets({"steps": 1, "tokens": 1000}) is StopReason.TOKEN_BUDGET
    assert lim.check_budgets({"cost_usd": 0.49}) is None
    assert lim.utilization("tokens", 250) == 0.25
    assert lim.utilization("wall_s", 10) is None
    with pytest.raises(ValueError, match="unknown budget 'time'"):
        lim.limit_of("time")


def test_per_tool_caps() -> None:
    every = LoopLimits(max_calls_per_tool=2)
    assert every.cap_for_tool("x") == 2 and every.check_tool_cap("x", 2)
    some = LoopLimits(max_calls_per_tool={"search": 4})
    assert some.cap_for_tool("search") == 4 and some.cap_for_tool("x") is None
    assert not some.check_tool_cap("search", 3) and some.check_tool_cap("search", 4)


def test_warning_thresholds() -> None:
    lim = LoopLimits(max_steps=10, max_tokens=1000)
    assert dict(lim.warning_thresholds) == {"steps": 8.0, "tokens": 800.0}
    assert dict(LoopLimits(soft_threshold=None).warning_thresholds) == {}


def test_version_is_a_stable_short_hash() -> None:
    a, b = LoopLimits(max_steps=12), LoopLimits(max_steps=12)
    assert re.fullmatch(r"[0-9a-f]{16}", a.version)
    assert a.version == b.version and a == b
    assert LoopLimits(max_steps=13).version != a.version
    assert LoopLimits(max_calls_per_tool={"a": 1}).version != LoopLimits().version


def test_from_dict_and_replace() -> None:
    lim = LoopLimits.from_dict({"max_steps": 12, "max_wall_s": "off", "max_same_call": False})
    assert lim.max_steps == 12 and lim.max_wall_s is None and lim.max_same_call is None
    assert lim.replace(max_steps=3).max_steps == 3
    with pytest.raises(ValueError, match=r"^unknown limit 'max_step'"):
        LoopLimits.from_dict({"max_step": 3})
    with pytest.raises(ValueError, match=r"^max_steps must be"):
        lim.replace(max_steps=-2)


# --- LimitPolicy -------------------------------------------------------------------------------


def test_policy_from_the_design_example() -> None:
    policy = LimitPolicy.from_toml(EXAMPLE_TOML)
    ticket = policy.for_task("support_ticket")
    assert ticket.max_steps == 15 and ticket.max_wall_s == 300
    assert ticket.max_same_call == 3  # inherited from the built-in defaults
    assert policy.for_task("unknown") == policy.defaults == LoopLimits()


def test_task_types_inherit_the_file_defaults() -> None:
    policy = LimitPolicy.from_toml(
        '[defaults]\nmax_steps = 6\nmax_cost_usd = 1.5\n[task_types.qa]\nmax_cost_usd = "off"\n'
    )
    qa = policy.for_task("qa")
    assert qa.max_steps == 6 and qa.max_cost_usd is None
    assert policy.for_task("other").max_cost_usd == 1.5


def test_policy_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "limits.toml"
    path.write_text(EXAMPLE_TOML, encoding="utf-8")
    assert LimitPolicy.from_toml(path).for_task("support_ticket").max_steps == 15
    assert LimitPolicy.from_toml(str(path)).for_task("support_ticket").max_steps == 15


def test_policy_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "limits.toml"
    for source in (missing, str(missing), "limits.toml"):
        with pytest.raises(FileNotFoundError, match=r"limits file .*limits\.toml.* does not exist"):
            LimitPolicy.from_toml(source)
    bad = tmp_path / "latin1.toml"
    bad.write_bytes("[defaults]\n# caf\xe9\nmax_steps = 4\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.toml: not UTF-8 text \(byte 16 is 0xe9\)"):
        LimitPolicy.from_toml(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("[defaults]\nmax_steps = 0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.toml: \[defaults\]: max_steps must be"):
        LimitPolicy.from_toml(broken)


def test_policy_file_with_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + EXAMPLE_TOML.encode())
    assert LimitPolicy.from_toml(path).for_task("support_ticket").max_steps == 15


def test_to_toml_round_trips() -> None:
    policy = LimitPolicy(
        LoopLimits(max_steps=9, soft_threshold=None),
        {
            "support_ticket": LoopLimits(
                max_steps=15, max_wall_s=300.0, max_calls_per_tool={"search": 4, "web.fetch": 2}
            ),
            "code review": LoopLimits(count_calls_only=True, max_cost_usd=0.75),
        },
    )
    text = policy.to_toml()
    assert LimitPolicy.from_toml(text) == policy
    assert '[task_types."code review"]' in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[defaults\n", r"^invalid TOML"),
        ("[limits]\nmax_steps = 3\n", r"^unknown table\(s\) 'limits'"),
        ("[defaults]\nmax_steps = 0\n", r"^\[defaults\]: max_steps must be a positive integer"),
        (
            "[task_types.qa]\nmax_wall_s = -1\n",
            r"^\[task_types\.qa\]: max_wall_s must be a positive number",
        ),
        ("[task_types.qa]\nmax_stepz = 3\n", r"^\[task_types\.qa\]: unknown limit 'max_stepz'"),
        ("task_types = 3\n", r"^task_types must be a table"),
    ],
)
def test_bad_policy_files_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LimitPolicy.from_toml(text)


def test_policy_rejects_non_limits() -> None:
    with pytest.raises(ValueError, match=r"task_types\['qa'\] must be LoopLimits"):
        LimitPolicy(task_types={"qa": {"max_steps": 3}})  # type: ignore[dict-item]


# --- how run() picks its limits ----------------------------------------------------------


def test_resolve_limits_argument_policy_env_default(tmp_path: Path) -> None:
    mine = LoopLimits(max_steps=2)
    assert resolve_limits(mine, "qa", environ={}) is mine
    policy = LimitPolicy.from_toml(EXAMPLE_TOML)
    assert resolve_limits(policy, "support_ticket", environ={}).max_steps == 15
    path = tmp_path / "l.toml"
    path.write_text(EXAMPLE_TOML, encoding="utf-8")
    assert resolve_limits(None, "support_ticket", environ={LIMITS_ENV: str(path)}).max_steps == 15
    assert resolve_limits(None, "qa", environ={}) == LoopLimits()
    with pytest.raises(ValueError, match=rf"^{LIMITS_ENV}='/nope.toml': cannot read it"):
        resolve_limits(None, "qa", environ={LIMITS_ENV: "/nope.toml"})


def test_guard_takes_a_policy_and_the_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwatch.instrumentation.runtime.guard import LoopGuard

    policy = LimitPolicy.from_toml(EXAMPLE_TOML)
    assert LoopGuard(policy, task_type="support_ticket").limits.max_steps == 15
    path = tmp_path / "l.toml"
    path.write_text(EXAMPLE_TOML, encoding="utf-8")
    monkeypatch.setenv(LIMITS_ENV, str(path))
    assert LoopGuard(task_type="support_ticket").limits.max_steps == 15
    monkeypatch.delenv(LIMITS_ENV)
    assert LoopGuard(task_type="support_ticket").limits == LoopLimits()


@pytest.mark.parametrize("task_type", ["工单", "a b", 'quo"te', "back\\slash", "tab\there", "x.y"])
def test_policy_toml_round_trips_any_task_type_name(task_type: str) -> None:
    policy = LimitPolicy(
        task_types={task_type: LoopLimits(max_steps=4, max_calls_per_tool={task_type: 2})}
    )
    assert LimitPolicy.from_toml(policy.to_toml()) == policy
