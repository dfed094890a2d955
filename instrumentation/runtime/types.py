"""Plain data the loop passes around: messages, tool calls, usage, steps and results.

These are seed-compatible (``Message``, ``ToolCall``, ``Usage``, ``ModelResponse``, ``Step``,
``RunResult``) and serialize to JSON, so a stopped run can be saved and resumed later.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from .reasons import Outcome, StopReason

__all__ = [
    "Message",
    "ModelResponse",
    "Role",
    "RunResult",
    "Step",
    "ToolCall",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for."""

    id: str
    """The provider's call id; tool results refer back to it."""
    name: str
    """The tool's registered name."""
    arguments: dict[str, Any] | str = field(default_factory=dict)
    """Parsed arguments, or the raw string the model sent (parsed, or rejected, by the registry)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message in the OpenAI-style shape most providers can be mapped to."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and money spent. Adds up with ``+``."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
        )


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What a model returned for one call."""

    message: Message
    stop_reason: str | None
    """The provider's raw stop/finish reason (``end_turn``, ``tool_calls``, ``length`` ...)."""
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    """The name of the model that answered (``gen_ai.response.model``)."""
    response_id: str | None = None
    """The provider's id of this response (``gen_ai.response.id``)."""
    provider: str | None = None
    """The provider that answered (``gen_ai.provider.name``: ``openai``, ``anthropic`` ...)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One entry of a run's trace: a model call, a tool call, a check or the stop."""

    index: int
    """The loop step it happened in (1-based)."""
    kind: str
    """``model``, ``tool``, ``verify``, ``warning`` or ``stop``."""
    detail: dict[str, Any] = field(default_factory=dict)


class _Deferred:
    # The slot RunResult keeps its deferred fields' builder in (not a dataclass field, so
    # asdict, ==, repr and pickling see only the fields, built when they read them).
    __slots__ = ("_deferred",)
    _deferred: Callable[[str], Any]


DEFERRED_FIELDS = ("steps", "progress")
"""The :class:`RunResult` fields a guard may leave to be built on first read."""


@dataclass(slots=True)
class RunResult(_Deferred):
    """How a run ended: the reason, everything produced so far and a plain explanation.

    A guard's result builds ``steps`` and ``progress`` when they are first read (most callers
    never read them; docs/runtime.md, "Cost"): see :meth:`deferred`.
    """

    messages: list[Message]
    steps: list[Step]
    final: str | None
    """The answer on success; on other stops the last text the model produced, if any."""
    stop_reason: StopReason
    outcome: Outcome
    usage: Usage
    explanation: str
    """Names the step, the call and the evidence; empty on success."""
    run_id: str = ""
    task_type: str = "default"
    limit: str | None = None
    """The budget that was used up, when ``outcome`` is ``limit``."""
    limits_version: str = ""
    counters: dict[str, float] = field(default_factory=dict)
    """Budget usage at the end: ``steps``, ``model_calls``, ``tool_calls``, ``tokens``,
    ``cost_usd``, ``wall_s``."""
    progress: dict[str, int] = field(default_factory=dict)
    """Evidence for judging a stopped run: ``recent_new_calls``, ``max_same_error``,
    ``max_same_call``."""
    agent_name: str = "agent"
    shadow: dict[str, Any] = field(default_factory=dict)
    """Where the run's shadow limits would have stopped it (``LoopGuard.shadow_result``);
    empty without shadow limits."""
    nudges: list[dict[str, Any]] = field(default_factory=list)
    """The nudges the run's detectors gave (``detector``, ``step``, ``message``), in order;
    empty unless ``on_stuck = "nudge"`` (docs/runtime.md, "Nudges")."""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.SUCCESS

    @classmethod
    def deferred(cls, build: Callable[[str], Any], **fields: Any) -> RunResult:
        """A result whose ``steps`` and ``progress`` (:data:`DEFERRED_FIELDS`) are built by
        ``build(name)`` when first read, then kept; every other field is given."""
        return cls(steps=[], progress={}, **fields).defer(build)

    def defer(self, build: Callable[[str], Any]) -> RunResult:
        """Leave ``steps`` and ``progress`` (:data:`DEFERRED_FIELDS`) to ``build(name)``, built
        when first read, then kept (what :meth:`deferred` does). Returns the result."""
        del self.steps, self.progress  # unset slots: read through __getattr__
        self._deferred = build
        return self

    if not TYPE_CHECKING:  # hidden from mypy, which would let any attribute name through

        def __getattr__(self, name: str) -> Any:
            # Reached only for an unset slot: a deferred field not read yet.
            if name in DEFERRED_FIELDS:
                try:
                    build = self._deferred
                except AttributeError:
                    pass
                else:
                    value = build(name)
                    setattr(self, name, value)
                    self._forget_builder()
                    return value
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _forget_builder(self) -> None:
        # Once every deferred field is built, the builder (and the run state it holds) goes.
        for name in DEFERRED_FIELDS:
            try:
                object.__getattribute__(self, name)
            except AttributeError:
                return
        del self._deferred

    def __getstate__(self) -> list[Any]:
        # Pickled and copied field by field (deferred fields built), never the builder.
        return [getattr(self, f.name) for f in fields(self)]

    def __setstate__(self, state: list[Any]) -> None:
        for f, value in zip(fields(self), state, strict=True):
            setattr(self, f.name, value)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        messages = [_message_from_dict(m) for m in data["messages"]]
        steps = [Step(s["index"], s["kind"], dict(s.get("detail") or {})) for s in data["steps"]]
        return cls(
            messages=messages,
            steps=steps,
            final=data.get("final"),
            stop_reason=StopReason(data["stop_reason"]),
            outcome=Outcome(data["outcome"]),
            usage=Usage(**data["usage"]),
            explanation=data.get("explanation", ""),
            run_id=data.get("run_id", ""),
            task_type=data.get("task_type", "default"),
            limit=data.get("limit"),
            limits_version=data.get("limits_version", ""),
            counters=dict(data.get("counters") or {}),
            progress=dict(data.get("progress") or {}),
            agent_name=data.get("agent_name", "agent"),
            shadow=dict(data.get("shadow") or {}),
            nudges=[dict(n) for n in data.get("nudges") or ()],
        )

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        return cls.from_dict(json.loads(text))


def _message_from_dict(m: dict[str, Any]) -> Message:
    calls = tuple(
        ToolCall(c["id"], c["name"], c.get("arguments", {})) for c in m.get("tool_calls") or ()
    )
    return Message(m["role"], m.get("content"), calls, m.get("tool_call_id"))
