"""The changes the tuning loop makes to a limits file (docs/queries.md, "The tuning loop"): set
values, set or clear a shadow candidate, promote a candidate. Each returns a new, validated
``LimitPolicy`` and leaves the one it was given as it was; a bad value raises ``ValueError``
naming the task type and field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits

__all__ = ["DEFAULTS", "promoted", "with_shadow", "with_values"]

DEFAULTS = "*"
"""The name the tuning loop gives the ``[defaults]`` table."""


def _checked(policy: LimitPolicy) -> LimitPolicy:
    # Through TOML and back: the file agents will read is the one validated here.
    return LimitPolicy.from_toml(policy.to_toml())


def with_values(policy: LimitPolicy, task_type: str, values: Mapping[str, Any]) -> LimitPolicy:
    """``policy`` with ``values`` (``{"max_steps": 6}``; ``None`` or ``"off"`` switch a limit off)
    set on ``task_type`` (``"*"``: the defaults, which every unlisted task type inherits)."""
    if not values:
        raise ValueError("no value to set")
    if task_type == DEFAULTS:
        try:
            defaults = LoopLimits.from_dict(values, base=policy.defaults)
        except ValueError as exc:
            raise ValueError(f"[defaults]: {exc}") from None
        return _checked(
            LimitPolicy(defaults, policy.task_types, policy.shadow_defaults, policy.shadow)
        )
    try:
        limits = LoopLimits.from_dict(values, base=policy.for_task(task_type))
    except ValueError as exc:
        raise ValueError(f"[task_types.{task_type}]: {exc}") from None
    task_types = {**policy.task_types, task_type: limits}
    return _checked(LimitPolicy(policy.defaults, task_types, policy.shadow_defaults, policy.shadow))


def with_shadow(
    policy: LimitPolicy, task_type: str, overrides: Mapping[str, Any] | None
) -> LimitPolicy:
    """``policy`` with ``overrides`` as ``task_type``'s shadow candidate (``None`` or empty:
    none); ``"*"`` sets the candidate every task type gets."""
    shadow_defaults = dict(policy.shadow_defaults)
    shadow = {k: dict(v) for k, v in policy.shadow.items()}
    if task_type == DEFAULTS:
        shadow_defaults = dict(overrides or {})
    elif overrides:
        shadow[task_type] = dict(overrides)
    else:
        shadow.pop(task_type, None)
    return _checked(LimitPolicy(policy.defaults, policy.task_types, shadow_defaults, shadow))


def promoted(policy: LimitPolicy, task_type: str) -> LimitPolicy:
    """``policy`` with ``task_type``'s shadow candidate enforced and no longer shadowed
    (``ValueError`` when the task type has no candidate)."""
    if task_type == DEFAULTS:
        if not policy.shadow_defaults:
            raise ValueError("there is no shadow candidate for the defaults to promote")
        defaults = LoopLimits.from_dict(policy.shadow_defaults, base=policy.defaults)
        return _checked(LimitPolicy(defaults, policy.task_types, {}, policy.shadow))
    if task_type not in policy.shadow:
        raise ValueError(f"task type {task_type!r} has no shadow candidate to promote")
    candidate = LoopLimits.from_dict(policy.shadow[task_type], base=policy.for_task(task_type))
    shadow = {k: dict(v) for k, v in policy.shadow.items() if k != task_type}
    task_types = {**policy.task_types, task_type: candidate}
    return _checked(LimitPolicy(policy.defaults, task_types, policy.shadow_defaults, shadow))
