"""The vocabulary of the guard's answers, and the callables a caller plugs into a run.

A loop asks the :class:`~loopwatch.instrumentation.LoopGuard` and does what the returned
:class:`Decision` says; ``Verifier``, ``Approver``, ``Guardrail``, ``ProgressSignal`` and ``Cancel``
are what a caller may hand the guard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from .observer import ToolRecord
from .reasons import StopReason
from .types import ModelResponse, RunResult, ToolCall

__all__ = [
    "CONTINUE",
    "LAST_STEP_NOTICE",
    "RESEND",
    "RUN_TOOLS",
    "Action",
    "Approver",
    "Cancel",
    "Decision",
    "Guardrail",
    "ProgressSignal",
    "Settable",
    "StepReport",
    "ToolOutcomeLike",
    "Verifier",
]

LAST_STEP_NOTICE = (
    "This is the last step of this run: answer now with what you have, without calling tools."
)
"""What the model is told on its last step when ``LoopLimits.answer_on_last_step`` is on."""


class Action(StrEnum):
    """What the loop should do next."""

    CONTINUE = "continue"
    """Go on: start the step / run this tool / take the next step."""
    RUN_TOOLS = "run_tools"
    """The model asked for tools: ask ``before_tool`` for each call, in order."""
    RESEND = "resend"
    """The provider paused the turn (``pause_turn``): call the model again as it is."""
    REJECTED = "rejected"
    """The completion check failed: give ``feedback`` to the model and go on."""
    COMPLETE = "complete"
    """The run succeeded; ``final`` holds the answer."""
    STOP = "stop"
    """The run stopped for ``reason``; ``explanation`` says why."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The guard's answer at one decision point."""

    action: Action
    """What to do next."""
    reason: StopReason | None = None
    """Why the run ended (``completed`` on success); ``None`` while it goes on."""
    explanation: str = ""
    """The step, the call and the evidence, for a stop."""
    feedback: str | None = None
    """Text for the model: unmet completion criteria, or the last-step notice."""
    tools_allowed: bool = True
    """``False`` on the last step when ``answer_on_last_step`` is on: offer the model no tools."""
    final: str | None = None
    """The final answer, on ``COMPLETE``."""
    done: bool = field(init=False, default=False)
    """The run is over (completed or stopped): leave the loop and call ``finish()``."""
    stop: bool = field(init=False, default=False)
    """The run stopped without success."""

    def __post_init__(self) -> None:
        # Plain fields, not properties: the loop reads them several times per step.
        object.__setattr__(self, "stop", self.action is Action.STOP)
        object.__setattr__(
            self, "done", self.action is Action.STOP or self.action is Action.COMPLETE
        )


CONTINUE = Decision(Action.CONTINUE)
"""The shared ``continue`` decision."""
RUN_TOOLS = Decision(Action.RUN_TOOLS)
"""The shared ``run_tools`` decision."""
RESEND = Decision(Action.RESEND)
"""The shared ``resend`` decision."""


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one step did, for a custom progress signal."""

    index: int
    """The step (1-based)."""
    response: ModelResponse | None
    """The model's response in this step, if there was one."""
    tools: tuple[ToolRecord, ...]
    """The tool calls run in this step (fingerprints are empty unless an observer is active)."""
    new_results: int
    """Tool results in this step whose content the run had not seen before."""
    new_calls: int = 0
    """Tool calls in this step the run had not made before, among those whose result was not
    new (a call with a new result is progress already)."""


class ToolOutcomeLike(Protocol):
    """What ``after_tool`` reads from a tool outcome (``ToolOutcome`` fits)."""

    @property
    def ok(self) -> bool: ...
    @property
    def content(self) -> str: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...


@runtime_checkable
class Settable(Protocol):
    """An event-like object: ``threading.Event``, ``asyncio.Event``."""

    def is_set(self) -> bool: ...


Cancel = Settable | Callable[[], bool]
"""A ``threading.Event``, an ``asyncio.Event``, or a callable returning ``True`` once cancelled."""
Verifier = Callable[[RunResult], Sequence[str]]
"""Completion check: gets the would-be result, returns the unmet criteria (empty = done)."""
Approver = Callable[[ToolCall], bool]
"""Says yes (``True``) or no to a call of a tool that requires approval."""
Guardrail = Callable[[ToolCall], "str | bool | None"]
"""A risk rule: a reason (or ``True``) vetoes a call; ``None``/``False``/``""`` allow it."""
ProgressSignal = Callable[[StepReport], bool]
"""Says whether a step brought new state. Default: a call not made before, or a result not
seen before, in the run."""
