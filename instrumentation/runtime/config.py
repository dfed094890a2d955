"""What a run is given, in one object: :class:`RunConfig`.

``LoopGuard``, ``run``, ``arun``, the shadow guard and every integration take a ``RunConfig``;
their convenience keywords (``task_type=``, ``limits=`` ...) are the same fields, folded into
one by :func:`run_config` — the only place that does it (docs/runtime.md, "The run config")::

    config = RunConfig(limits=policy, task_type="support", agent_name="helpdesk")
    run(model, registry, "Where is order A-17?", config=config)
    run(model, registry, "...", config=config, task_type="billing")   # a keyword wins

Limits are resolved once per run (:meth:`RunConfig.resolve`): a ``LimitPolicy`` picks by task
type; without limits the ``LOOPWATCH_LIMITS`` file is read and parsed once, for both the
enforced and the shadow limits.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from .decisions import Approver, Cancel, Guardrail, ProgressSignal, Verifier
from .limits import LIMITS_ENV, LimitPolicy, LoopLimits
from .observer import ObserverFactory, RunObserver
from .served import followed_from_env
from .settings import env_str

if TYPE_CHECKING:
    from .guard import LoopGuard

__all__ = [
    "ResolvedLimits",
    "RunConfig",
    "RunOptions",
    "explicit_options",
    "new_run_id",
    "run_config",
]

# uuid.UUID(bytes=..., version=4)'s bits: the variant (10xx) and the version (0100) fields
_UUID4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (0x4000 << 64)


def new_run_id() -> str:
    """A new run id: a random UUID4 as 32 hex characters, what ``uuid.uuid4().hex`` gives,
    without building the ``UUID`` object (a tenth of the work; one per run)."""
    return f"{int.from_bytes(os.urandom(16), 'big') & _UUID4_CLEAR | _UUID4_SET:032x}"


@dataclass(frozen=True, slots=True)
class ResolvedLimits:
    """The limits a run enforces and the shadow (candidate) limits it evaluates, if any."""

    limits: LoopLimits
    shadow: LoopLimits | None = None


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a run is given. Keyword-only; every field has a default.

    ``dataclasses.replace(config, task_type=...)`` (or :meth:`with_options`) derives one.
    """

    limits: LoopLimits | LimitPolicy | None = None
    """The run's limits, or a policy picked by ``task_type``; ``None``: serve's limits when
    ``LOOPWATCH_LIMITS_URL`` is set (docs/runtime.md, "Limits from serve"), else the file named by
    ``LOOPWATCH_LIMITS``, else ``LoopLimits()``."""
    task_type: str = "default"
    agent_name: str = "agent"
    registry: Any = None
    """The tool registry, read for done / approval / repeat-exempt / error-rule flags and the
    circuit breaker."""
    verify: Verifier | None = None
    cancel: Cancel | None = None
    approver: Approver | None = None
    guardrails: Sequence[Guardrail] = ()
    progress: ProgressSignal | None = None
    repeat_exempt: Sequence[str] = ()
    observer: RunObserver | None = None
    observer_factory: ObserverFactory | None = None
    parent: LoopGuard | None = None
    clock: Callable[[], float] | None = None
    run_id: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    conversation_id: str | None = None
    provider: str | None = None
    shadow: LoopLimits | None = None
    """Shadow limits; default: the policy's (or the limits file's) for the task type."""
    on_stuck: str | Mapping[str, str] | None = None
    """Escalation: overrides the limits' ``on_stuck`` for this run (``None``: the limits')."""
    max_nudges: int | None = None
    """Overrides the limits' ``max_nudges`` for this run (``None``: the limits')."""

    def __post_init__(self) -> None:
        # copies: a caller's later change to its own list or dict does not reach a running guard
        if type(self.guardrails) is not tuple:
            object.__setattr__(self, "guardrails", tuple(self.guardrails))
        if type(self.repeat_exempt) is not tuple:
            object.__setattr__(self, "repeat_exempt", tuple(self.repeat_exempt))
        if self.attributes:
            object.__setattr__(self, "attributes", dict(self.attributes))

    def with_options(self, **changes: Any) -> RunConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def resolve(self, environ: Mapping[str, str] | None = None) -> ResolvedLimits:
        """The enforced and shadow limits, each file read at most once."""
        limits = self.limits
        if type(limits) is LoopLimits and self.on_stuck is None and self.max_nudges is None:
            return ResolvedLimits(limits, self.shadow)  # the usual case, decided at once
        if limits is None:
            limits = followed_from_env(environ)
        if limits is None:
            path = env_str(LIMITS_ENV, environ)
            if path:
                limits = _load_env_policy(path)
        if isinstance(limits, LimitPolicy):
            limits = limits.current()  # one snapshot of a policy that follows serve
            enforced = limits.for_task(self.task_type)
            shadow = self.shadow if self.shadow is not None else limits.shadow_for(self.task_type)
        elif isinstance(limits, LoopLimits):
            enforced, shadow = limits, self.shadow
        elif limits is None:
            enforced, shadow = LoopLimits(), self.shadow
        else:
            raise TypeError(
                f"limits must be LoopLimits or LimitPolicy, got {type(limits).__name__}"
            )
        escalation = {
            k: v
            for k, v in (("on_stuck", self.on_stuck), ("max_nudges", self.max_nudges))
            if v is not None
        }
        if escalation:
            enforced = enforced.replace(**escalation)
        return ResolvedLimits(enforced, shadow)


def _load_env_policy(path: str) -> LimitPolicy:
    try:
        return LimitPolicy.from_toml(Path(path).expanduser())
    except OSError as exc:
        raise ValueError(f"{LIMITS_ENV}={path!r}: cannot read it ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{LIMITS_ENV}={path!r}: {exc}") from None


class RunOptions(TypedDict, total=False):
    """The convenience keywords ``LoopGuard``, ``run`` and ``arun`` take: ``RunConfig``'s
    fields (a test keeps the two lists equal)."""

    limits: LoopLimits | LimitPolicy | None
    task_type: str
    agent_name: str
    registry: Any
    verify: Verifier | None
    cancel: Cancel | None
    approver: Approver | None
    guardrails: Sequence[Guardrail]
    progress: ProgressSignal | None
    repeat_exempt: Sequence[str]
    observer: RunObserver | None
    observer_factory: ObserverFactory | None
    parent: LoopGuard | None
    clock: Callable[[], float] | None
    run_id: str | None
    attributes: Mapping[str, Any] | None
    conversation_id: str | None
    provider: str | None
    shadow: LoopLimits | None
    on_stuck: str | Mapping[str, str] | None
    max_nudges: int | None


_FIELDS = frozenset(f.name for f in dataclasses.fields(RunConfig))


def run_config(config: RunConfig | None = None, /, **options: Any) -> RunConfig:
    """``config`` (default: ``RunConfig()``) with the keywords given folded in: the one place
    where keywords become a run config. An unknown keyword raises ``TypeError`` naming it."""
    unknown = set(options) - _FIELDS
    if unknown:
        raise TypeError(f"unknown run option(s): {', '.join(sorted(unknown))}")
    if "attributes" in options and options["attributes"] is None:
        options["attributes"] = {}
    if config is None:
        return _new_config(options)
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig, got {type(config).__name__}")
    return dataclasses.replace(config, **options) if options else config


def _new_config(options: dict[str, Any]) -> RunConfig:
    # RunConfig(**options) without the frozen dataclass's __init__, which sets each of the 22
    # fields through object.__setattr__ (~35 k machine instructions, a new config for every run
    # given keywords): the defaults updated with the options, then __post_init__'s copies. The
    # same object field for field (tests/test_run_config.py).
    values = dict(_DEFAULTS)
    values["attributes"] = {}  # the default factory's: a dict of its own
    values.update(options)
    config: RunConfig = object.__new__(RunConfig)
    object.__setattr__(config, "__dict__", values)
    config.__post_init__()
    return config


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


_DEFAULTS = {f.name: _default_of(f) for f in dataclasses.fields(RunConfig)}


def explicit_options(**values: Any) -> dict[str, Any]:
    """The options among ``values`` that differ from ``RunConfig``'s defaults: what an
    integration's own fields (``GuardOptions``) add over the ``RunConfig`` it was given."""
    return {
        k: v
        for k, v in values.items()
        if not (v is None or (k in _DEFAULTS and v == _DEFAULTS[k]) or v == ())
    }
