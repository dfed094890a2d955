"""Loop limits (docs/runtime.md, "Defaults"): what a run may spend and how long it may go
without progress.

``LoopLimits`` holds one run's limits; ``None`` switches a limit off. ``LimitPolicy`` maps task
types to limits and loads from TOML::

    [defaults]
    max_steps = 8
    [task_types.support_ticket]
    max_steps = 15
    max_wall_s = 300
    max_cost_usd = "off"      # TOML has no null: "off" (or false) switches a limit off

A task type inherits ``[defaults]``, which inherit the built-in defaults below.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .fingerprint import short_hash, stable_json
from .reasons import StopReason
from .settings import env_str
from .toml_text import toml_key, toml_string, toml_value
from .validate import check_int, check_number

__all__ = [
    "BUDGET_LIMITS",
    "LIMITS_ENV",
    "LimitPolicy",
    "LoopLimits",
    "resolve_limits",
    "resolve_limits_policy",
    "resolve_shadow",
    "toml_key",
    "toml_string",
    "toml_value",
]

LIMITS_ENV = "LOOPWATCH_LIMITS"
"""Environment variable naming a limits TOML file, used when no limits are given."""

# Budget name (semconv.BUDGETS) -> (LoopLimits field, stop reason when it runs out).
BUDGET_LIMITS: Mapping[str, tuple[str, StopReason]] = MappingProxyType(
    {
        "steps": ("max_steps", StopReason.MAX_STEPS),
        "model_calls": ("max_model_calls", StopReason.MAX_MODEL_CALLS),
        "tool_calls": ("max_tool_calls", StopReason.MAX_TOOL_CALLS),
        "tokens": ("max_tokens", StopReason.TOKEN_BUDGET),
        "cost_usd": ("max_cost_usd", StopReason.COST_BUDGET),
        "wall_s": ("max_wall_s", StopReason.TIMEOUT),
    }
)

_COUNT_FIELDS = (
    "max_steps",
    "max_consecutive_failures",
    "max_same_call",
    "max_same_error",
    "max_idle_turns",
    "max_completion_rejects",
    "max_model_calls",
    "max_tool_calls",
    "max_tokens",
)
_AMOUNT_FIELDS = ("max_cost_usd", "max_wall_s", "max_cost_per_min", "max_tokens_per_min")
# Limits left out of limits.version while off, so that limits written before they existed keep
# their version (charts mark a version change as a limit change).
_RATE_FIELDS = ("max_cost_per_min", "max_tokens_per_min")
_BOOL_FIELDS = ("count_calls_only", "answer_on_last_step")
_OFF = ("off", "none")
_ON_STUCK = ("stop", "nudge")
_DETECTOR_NAMES = (
    "repeated_action",
    "repeated_tool_call",
    "repeated_error",
    "tool_failures",
    "no_progress",
)
# Escalation fields left out of limits.version while at their defaults, so that limits written
# before escalation existed keep their version (charts mark a version change as a limit change).
_ESCALATION_DEFAULTS: Mapping[str, Any] = MappingProxyType({"on_stuck": "stop", "max_nudges": 1})


@dataclass(frozen=True, kw_only=True)
class LoopLimits:
    """The limits one run runs under. Keyword-only; ``None`` switches a limit off.

    Invalid values raise ``ValueError`` naming the field.
    """

    max_steps: int | None = 8
    """Steps per run; a step is one model call plus the tool calls it asked for."""
    max_consecutive_failures: int | None = 3
    """Tool results in a row that were errors (any tool, any error) → ``tool_failures``."""
    max_same_call: int | None = 3
    """Times one call may bring the same result → ``repeated_tool_call``.

    See ``count_calls_only``.
    """
    max_same_error: int | None = 3
    """Times one error fingerprint (tool + error code) may occur in a run → ``repeated_error``."""
    max_idle_turns: int | None = 5
    """Steps in a row without progress → ``no_progress``."""
    max_completion_rejects: int | None = 2
    """Rejections by the completion check; reaching it → ``completion_rejected``."""
    max_model_calls: int | None = None
    """Model calls per run → ``max_model_calls``."""
    max_tool_calls: int | None = None
    """Tool calls per run → ``max_tool_calls``."""
    max_calls_per_tool: int | Mapping[str, int] | None = None
    """Calls of any one tool (an int), or per tool name (a mapping) → ``max_tool_calls``."""
    max_tokens: int | None = None
    """Input plus output tokens per run → ``token_budget``."""
    max_cost_usd: float | None = None
    """Cost per run in USD (from ``Usage.cost_usd``) → ``cost_budget``."""
    max_wall_s: float | None = None
    """Wall-clock seconds per run → ``timeout``."""
    max_cost_per_min: float | None = None
    """Spend rate: USD a minute, averaged over the run so far (at least one minute) →
    ``cost_budget`` with limit ``spend_rate`` (docs/runtime.md, "Spend rate")."""
    max_tokens_per_min: float | None = None
    """Spend rate in tokens a minute, as ``max_cost_per_min`` → ``token_budget``."""
    soft_threshold: float | None = 0.8
    """Share of a budget at which ``loopwatch.budget.warning`` is recorded (``None``: never)."""
    count_calls_only: bool = False
    """Count ``max_same_call`` on the call alone, ignoring the result (stricter)."""
    answer_on_last_step: bool = False
    """When one step remains, offer the model no tools and ask it to answer now."""
    on_stuck: str | Mapping[str, str] = "stop"
    """What a detector's trip does: ``"stop"`` the run, or ``"nudge"``: hand the model a
    corrective message naming the evidence and stop only if it trips again after
    ``max_nudges`` nudges. One word for every detector, or ``{detector: word}`` (detectors
    not named stop)."""
    max_nudges: int = 1
    """Nudges one detector may give a run before its next trip stops it."""

    def __post_init__(self) -> None:
        for name in _COUNT_FIELDS:
            check_int(name, getattr(self, name), minimum=1, optional=True)
        for name in _AMOUNT_FIELDS:
            check_number(name, getattr(self, name), positive=True, optional=True)
        caps = self.max_calls_per_tool
        if isinstance(caps, Mapping):
            for tool, cap in caps.items():
                if (
                    not isinstance(tool, str)
                    or isinstance(cap, bool)
                    or not isinstance(cap, int)
                    or cap < 1
                ):
                    raise ValueError(
                        "max_calls_per_tool must map tool names to positive integers, "
                        f"got {tool!r}: {cap!r}"
                    )
            object.__setattr__(self, "max_calls_per_tool", MappingProxyType(dict(caps)))
        elif caps is not None and (isinstance(caps, bool) or not isinstance(caps, int) or caps < 1):
            raise ValueError(
                f"max_calls_per_tool must be a positive integer, a mapping or None, got {caps!r}"
            )
        check_number("soft_threshold", self.soft_threshold, positive=True, maximum=1, optional=True)
        for name in _BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        check_int("max_nudges", self.max_nudges, minimum=1)
        on_stuck = self.on_stuck
        if isinstance(on_stuck, Mapping):
            for detector, word in on_stuck.items():
                if detector not in _DETECTOR_NAMES or word not in _ON_STUCK:
                    raise ValueError(
                        "on_stuck must map detectors "
                        f'({", ".join(_DETECTOR_NAMES)}) to "stop" or "nudge", '
                        f"got {detector!r}: {word!r}"
                    )
            object.__setattr__(self, "on_stuck", MappingProxyType(dict(on_stuck)))
        elif on_stuck not in _ON_STUCK:
            raise ValueError(
                f'on_stuck must be "stop", "nudge" or a table of them, got {on_stuck!r}'
            )

    # --- reading limits -------------------------------------------------------------------------

    def limit_of(self, budget: str) -> float | None:
        """The limit of a budget named as in ``semconv.BUDGETS`` (``None`` = off)."""
        try:
            name, _ = BUDGET_LIMITS[budget]
        except KeyError:
            raise ValueError(
                f"unknown budget {budget!r}; known: {', '.join(BUDGET_LIMITS)}"
            ) from None
        value: float | None = getattr(self, name)
        return value

    def cap_for_tool(self, tool: str) -> int | None:
        """The per-tool call cap that applies to ``tool`` (``None`` = no cap)."""
        caps = self.max_calls_per_tool
        if caps is None or isinstance(caps, int):
            return caps
        return caps.get(tool)

    def check_budget(self, budget: str, used: float) -> StopReason | None:
        """The stop reason if ``used`` has reached the budget's limit, else ``None``."""
        limit = self.limit_of(budget)
        if limit is not None and used >= limit:
            return BUDGET_LIMITS[budget][1]
        return None

    def check_budgets(self, used: Mapping[str, float]) -> StopReason | None:
        """The stop reason of the first budget in ``used`` that reached its limit, else ``None``."""
        for budget, value in used.items():
            reason = self.check_budget(budget, value)
            if reason is not None:
                return reason
        return None

    def check_tool_cap(self, tool: str, calls_so_far: int) -> bool:
        """True when one more call of ``tool`` would exceed its per-tool cap."""
        cap = self.cap_for_tool(tool)
        return cap is not None and calls_so_far >= cap

    def utilization(self, budget: str, used: float) -> float | None:
        """``used / limit`` for a budget that is on, else ``None``."""
        limit = self.limit_of(budget)
        return None if limit is None else used / limit

    # --- identity and serialization -----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``None`` for what is off (per-tool caps as a plain dict)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("max_calls_per_tool", "on_stuck"):
            if isinstance(data[key], Mapping):
                data[key] = dict(data[key])
        return data

    def on_stuck_for(self, detector: str) -> str:
        """``"stop"`` or ``"nudge"``: what a trip of ``detector`` (a stop reason) does."""
        rule = self.on_stuck
        if isinstance(rule, str):
            return rule
        return rule.get(detector, "stop")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: LoopLimits | None = None) -> LoopLimits:
        """Limits from a mapping of field names (unknown keys raise ``ValueError``), over ``base``.

        ``"off"``/``"none"`` strings and ``false`` on a limit mean ``None`` (TOML has no null).
        """
        known = {f.name for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise ValueError(f"unknown limit {key!r}; known: {', '.join(sorted(known))}")
            if (
                key not in _BOOL_FIELDS
                and key not in _ESCALATION_DEFAULTS
                and (value is False or (isinstance(value, str) and value.strip().lower() in _OFF))
            ):
                value = None
            changes[key] = value
        return dataclasses.replace(base or cls(), **changes)

    def replace(self, **changes: Any) -> LoopLimits:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    @cached_property
    def warning_thresholds(self) -> Mapping[str, float]:
        """Budget -> usage at which the soft warning fires (``soft_threshold × limit``)."""
        st = self.soft_threshold
        if st is None:
            return MappingProxyType({})
        return MappingProxyType(
            {b: st * v for b in BUDGET_LIMITS if (v := self.limit_of(b)) is not None}
        )

    @cached_property
    def budget_limits(self) -> Mapping[str, float | None]:
        """Budget (``semconv.BUDGETS`` order) -> its limit, ``None`` when off (read-only)."""
        return MappingProxyType({b: getattr(self, name) for b, (name, _) in BUDGET_LIMITS.items()})

    @cached_property
    def has_budgets(self) -> bool:
        """Some budget besides ``max_steps`` is on (model/tool calls, tokens, cost, wall clock)."""
        return any(
            v is not None
            for v in (
                self.max_model_calls,
                self.max_tool_calls,
                self.max_tokens,
                self.max_cost_usd,
                self.max_wall_s,
            )
        )

    @cached_property
    def version(self) -> str:
        """Short hash of every limit (``loopwatch.limits.version``): changes with any limit."""
        data = self.to_dict()
        for key, default in _ESCALATION_DEFAULTS.items():
            if data[key] == default:
                del data[key]
        for key in _RATE_FIELDS:
            if data[key] is None:
                del data[key]
        return short_hash(stable_json(data))


@dataclass(frozen=True)
class LimitPolicy:
    """Limits per task type: ``for_task(task_type)`` gives the type's limits, else ``defaults``.

    Shadow limits (candidates evaluated, not enforced): ``shadow_defaults`` and ``shadow`` hold
    limit overrides — ``{"max_steps": 6}`` — that :meth:`shadow_for` applies over a task type's
    enforced limits (``shadow_defaults`` first, then the task type's own ``shadow`` entry). A
    guard built with the policy runs a second, silent guard under them and records on the run
    whether and where it would have stopped the run. In TOML::

        [shadow.defaults]              # every task type: try max_steps 6
        max_steps = 6
        [shadow.task_types.support]    # support: also try a tighter token budget
        max_tokens = 20000
    """

    defaults: LoopLimits = field(default_factory=LoopLimits)
    """Limits of task types not listed."""
    task_types: Mapping[str, LoopLimits] = field(default_factory=dict)
    """Limits of each listed task type."""
    shadow_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Candidate overrides for every task type (empty: none)."""
    shadow: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Candidate overrides per task type, over ``shadow_defaults``."""

    def __post_init__(self) -> None:
        for name, limits in self.task_types.items():
            if not isinstance(limits, LoopLimits):
                raise ValueError(
                    f"task_types[{name!r}] must be LoopLimits, got {type(limits).__name__}"
                )
        object.__setattr__(self, "task_types", MappingProxyType(dict(self.task_types)))
        # Checked now, so that a bad candidate fails at load time, not in a running agent.
        try:
            LoopLimits.from_dict(self.shadow_defaults, base=self.defaults)
        except ValueError as exc:
            raise ValueError(f"[shadow.defaults]: {exc}") from None
        for name, overrides in self.shadow.items():
            if not isinstance(overrides, Mapping):
                raise ValueError(f"shadow[{name!r}] must be a mapping of limit overrides")
            try:
                LoopLimits.from_dict(
                    {**self.shadow_defaults, **overrides}, base=self.for_task(name)
                )
            except ValueError as exc:
                raise ValueError(f"[shadow.task_types.{name}]: {exc}") from None
        object.__setattr__(self, "shadow_defaults", MappingProxyType(dict(self.shadow_defaults)))
        object.__setattr__(
            self,
            "shadow",
            MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.shadow.items()}),
        )

    def current(self) -> LimitPolicy:
        """The policy now: itself; a snapshot for one that follows serve (``from_url``)."""
        return self

    @classmethod
    def from_url(cls, url: str, **options: Any) -> LimitPolicy:
        """Limits that follow ``loopwatch serve`` at ``url`` (docs/runtime.md, "Limits from
        serve"); ``options``: ``poll_s``, ``cache_path``, ``token``, ``fallback``, ``wait_s``."""
        from .served import follow

        return follow(url, **options)

    def for_task(self, task_type: str) -> LoopLimits:
        """The limits of ``task_type`` (the defaults when it is not listed)."""
        return self.task_types.get(task_type, self.defaults)

    def shadow_for(self, task_type: str) -> LoopLimits | None:
        """The candidate limits of ``task_type`` (its enforced limits with the shadow
        overrides applied), or ``None`` when no shadow limits apply to it."""
        own = self.shadow.get(task_type)
        if own is None and not self.shadow_defaults:
            return None
        return LoopLimits.from_dict(
            {**self.shadow_defaults, **(own or {})}, base=self.for_task(task_type)
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> LimitPolicy:
        """A policy from parsed TOML: ``[defaults]`` and ``[task_types.<name>]`` tables."""
        unknown = set(data) - {"defaults", "task_types", "shadow"}
        if unknown:
            raise ValueError(
                f"unknown table(s) {', '.join(sorted(map(repr, unknown)))}; "
                "expected 'defaults', 'task_types' and 'shadow'"
            )
        raw_defaults = data.get("defaults", {})
        if not isinstance(raw_defaults, Mapping):
            raise ValueError("defaults must be a table")
        try:
            defaults = LoopLimits.from_dict(raw_defaults)
        except ValueError as exc:
            raise ValueError(f"[defaults]: {exc}") from None
        task_types: dict[str, LoopLimits] = {}
        raw_types = data.get("task_types", {})
        if not isinstance(raw_types, Mapping):
            raise ValueError("task_types must be a table of tables")
        for name, table in raw_types.items():
            if not isinstance(table, Mapping):
                raise ValueError(f"task_types.{name} must be a table")
            try:
                task_types[name] = LoopLimits.from_dict(table, base=defaults)
            except ValueError as exc:
                raise ValueError(f"[task_types.{name}]: {exc}") from None
        raw_shadow = data.get("shadow", {})
        if not isinstance(raw_shadow, Mapping):
            raise ValueError("shadow must be a table")
        unknown = set(raw_shadow) - {"defaults", "task_types"}
        if unknown:
            raise ValueError(
                f"unknown table(s) {', '.join(sorted('shadow.' + k for k in unknown))}; "
                "expected 'shadow.defaults' and 'shadow.task_types'"
            )
        shadow_defaults = raw_shadow.get("defaults", {})
        shadow_types = raw_shadow.get("task_types", {})
        if not isinstance(shadow_defaults, Mapping):
            raise ValueError("shadow.defaults must be a table")
        if not isinstance(shadow_types, Mapping) or not all(
            isinstance(t, Mapping) for t in shadow_types.values()
        ):
            raise ValueError("shadow.task_types must be a table of tables")
        return cls(defaults, task_types, dict(shadow_defaults), dict(shadow_types))

    @classmethod
    def from_toml(cls, source: str | os.PathLike[str]) -> LimitPolicy:
        """Load from a TOML file path, or from TOML text.

        A path object is always a file. A ``str`` is TOML text when it holds a newline, ``=`` or
        ``[`` (or is blank), else a file path: so a missing ``"limits.toml"`` raises
        :class:`FileNotFoundError` naming it instead of parsing the name as TOML. Files are read
        as UTF-8, with or without a byte-order mark; errors name the file.
        """
        if isinstance(source, os.PathLike) or not _looks_like_toml_text(source):
            path = Path(source)
            if not path.is_file():
                raise FileNotFoundError(
                    f"limits file {str(path)!r} does not exist (or is not a file)"
                )
            data = path.read_bytes()
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{path}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}): "
                    "save the limits file as UTF-8"
                ) from None
            where = f"{path}: "
        else:
            text, where = str(source), ""
        import tomllib  # only a TOML policy pays for the parser

        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{where}invalid TOML: {exc}") from None
        try:
            return cls.from_mapping(parsed)
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None

    def to_toml(self) -> str:
        """TOML that :meth:`from_toml` reads back into an equal policy (every limit written out)."""
        lines = ["[defaults]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in self.defaults.to_dict().items()]
        for name in sorted(self.task_types):
            lines += ["", f"[task_types.{toml_key(name)}]"]
            lines += [f"{k} = {toml_value(v)}" for k, v in self.task_types[name].to_dict().items()]
        if self.shadow_defaults:
            lines += ["", "[shadow.defaults]"]
            lines += [f"{k} = {toml_value(v)}" for k, v in self.shadow_defaults.items()]
        for name in sorted(self.shadow):
            lines += ["", f"[shadow.task_types.{toml_key(name)}]"]
            lines += [f"{k} = {toml_value(v)}" for k, v in self.shadow[name].items()]
        return "\n".join(lines) + "\n"


def resolve_shadow(
    limits: LoopLimits | LimitPolicy | None,
    task_type: str = "default",
    environ: Mapping[str, str] | None = None,
) -> LoopLimits | None:
    """The shadow (candidate) limits a run gets, as :func:`resolve_limits` finds its limits: a
    policy's :meth:`LimitPolicy.shadow_for`, or the ``LOOPWATCH_LIMITS`` file's; ``None`` for
    plain ``LoopLimits`` or a policy without shadow limits for the task type."""
    if isinstance(limits, LimitPolicy):
        return limits.shadow_for(task_type)
    if limits is not None:
        return None
    if env_str("LOOPWATCH_LIMITS_URL", environ):
        return resolve_limits_policy(environ).shadow_for(task_type)
    path = env_str(LIMITS_ENV, environ)
    if not path:
        return None
    try:
        return LimitPolicy.from_toml(Path(path).expanduser()).shadow_for(task_type)
    except (OSError, ValueError):
        return None  # resolve_limits reports the file's problem


def resolve_limits_policy(environ: Mapping[str, str] | None = None) -> LimitPolicy:
    """The policy following ``LOOPWATCH_LIMITS_URL`` (docs/runtime.md, "Limits from serve")."""
    from .served import followed_from_env

    return followed_from_env(environ) or LimitPolicy()


def _looks_like_toml_text(source: str) -> bool:
    return not source.strip() or any(c in source for c in "\n=[")


def resolve_limits(
    limits: LoopLimits | LimitPolicy | None,
    task_type: str = "default",
    environ: Mapping[str, str] | None = None,
) -> LoopLimits:
    """The limits a run gets: the argument (a policy picks by ``task_type``), else the TOML file
    named by ``LOOPWATCH_LIMITS``, else ``LoopLimits()``."""
    if isinstance(limits, LoopLimits):
        return limits
    if isinstance(limits, LimitPolicy):
        return limits.for_task(task_type)
    if limits is not None:
        raise TypeError(f"limits must be LoopLimits or LimitPolicy, got {type(limits).__name__}")
    if env_str("LOOPWATCH_LIMITS_URL", environ):
        return resolve_limits_policy(environ).for_task(task_type)
    path = env_str(LIMITS_ENV, environ)
    if path:
        try:
            return LimitPolicy.from_toml(Path(path).expanduser()).for_task(task_type)
        except OSError as exc:
            raise ValueError(f"{LIMITS_ENV}={path!r}: cannot read it ({exc})") from None
        except ValueError as exc:
            raise ValueError(f"{LIMITS_ENV}={path!r}: {exc}") from None
    return LoopLimits()
