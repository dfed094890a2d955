"""A recorded run as the import replays it: its model calls (``RecordedTurn``), each with the
calls the model asked for and the record of each answered one, the one tool-call record
``ToolOutcome`` (docs/architecture.md, "One tool call's record"). Chat logs
(:mod:`.chatlogs`), coding agents' logs and foreign traces (:mod:`.foreign.reconstruct`) are read
into these; :func:`~.importer.replay_run` replays them.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwatch.instrumentation.runtime.reasons import (
    ProviderSignal,
    StopReason,
    classify_provider_stop,
)
from loopwatch.instrumentation.runtime.replay import call_fingerprints
from loopwatch.instrumentation.runtime.toolspec import ToolOutcome
from loopwatch.instrumentation.runtime.types import ToolCall

__all__ = [
    "RecordedRun",
    "RecordedTool",
    "RecordedTurn",
    "recorded_fingerprints",
    "recorded_outcome",
]

RecordedTool = ToolOutcome
"""A recorded call's result: the one tool-call record, ``ToolOutcome`` (docs/architecture.md,
"One tool call's record"); this name is kept for code written against it."""


def recorded_outcome(
    call: ToolCall, content: str, error_code: str | None = None, error_message: str | None = None
) -> ToolOutcome:
    """The record of one answered call as a log holds it: one attempt, failed when it has an
    ``error_code``."""
    return ToolOutcome(
        call=call, ok=error_code is None, content=content, error_code=error_code,
        error_message=error_message, attempts=1,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One model call: what it said, the tools it asked for and what they returned, and its
    recorded usage."""

    text: str | None
    calls: tuple[ToolCall, ...]
    """Every call the model asked for, in order."""
    tools: tuple[ToolOutcome, ...]
    """The record of each answered call, in the same order (each one's ``call`` is one of
    ``calls``); a call the log holds no result for has none."""
    finish_reason: str | None = None
    """The provider's recorded stop signal, if the log kept it."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None

    def answered(self) -> list[tuple[ToolCall, ToolOutcome | None]]:
        """Each call with its record, ``None`` for a call the log holds no result for."""
        if len(self.tools) == len(self.calls):
            return list(zip(self.calls, self.tools, strict=True))
        out: list[tuple[ToolCall, ToolOutcome | None]] = []
        k = 0
        for call in self.calls:
            outcome = self.tools[k] if k < len(self.tools) else None
            if outcome is not None and (outcome.call is call or outcome.call == call):
                k += 1
                out.append((call, outcome))
            else:
                out.append((call, None))
        return out


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """One run: a user message and the model and tool calls that answered it."""

    index: int
    """The run's number in its conversation (1-based)."""
    turns: tuple[RecordedTurn, ...]
    messages: int
    """Messages of the conversation in this run (the user message included)."""

    @property
    def model_calls(self) -> int:
        return len(self.turns)

    @property
    def tool_calls(self) -> int:
        return sum(len(t.calls) for t in self.turns)

    @property
    def tokens(self) -> int | None:
        """Input plus output tokens, when every model call recorded them; else ``None``."""
        total = 0
        for t in self.turns:
            if t.input_tokens is None and t.output_tokens is None:
                return None
            total += (t.input_tokens or 0) + (t.output_tokens or 0)
        return total

    def tokens_by_turn(self) -> list[int] | None:
        """Each model call's tokens, when every one recorded them."""
        out = []
        for t in self.turns:
            if t.input_tokens is None and t.output_tokens is None:
                return None
            out.append((t.input_tokens or 0) + (t.output_tokens or 0))
        return out

    def loop_end(self, last_in_record: bool = True) -> tuple[StopReason, str]:
        """How the recorded loop ended: its stop reason and a sentence.

        ``completed`` when the last model call answered without asking for a tool (or its
        recorded stop signal says how it ended). A run that ends after tool results with no final
        answer was ended from outside its loop (stop reason ``cancelled``, the vocabulary's
        name for that), and the sentence says what happened: the recording ends there
        (``last_in_record``: the agent's own step or cost cap, or its harness, ended it), or the
        next user message arrived first.
        """
        last = self.turns[-1]
        if last.tools:
            if last_in_record:
                return StopReason.CANCELLED, (
                    "No final answer: the recording ends after tool results, before the model "
                    "answered them. The agent was stopped outside its loop (its own step or cost "
                    "cap, or its harness), not by a user."
                )
            return StopReason.CANCELLED, (
                "No final answer: the next user message arrived before the model answered its "
                "tool results (the conversation moved on)."
            )
        signal = classify_provider_stop(last.finish_reason)
        if signal is ProviderSignal.OUTPUT_TRUNCATED:
            return StopReason.OUTPUT_TRUNCATED, (
                f"The model's last output hit its length limit ({last.finish_reason!r})."
            )
        if signal is ProviderSignal.REFUSAL:
            return StopReason.REFUSAL, f"The provider refused ({last.finish_reason!r})."
        return StopReason.COMPLETED, ""


def recorded_fingerprints(call: ToolCall, t: ToolOutcome | None) -> tuple[str, str, str | None]:
    """A recorded call's (call, result, failure) fingerprints, as the guard's would be
    (``replay.call_fingerprints``); ``t`` is ``None`` for a call the log holds no result for."""
    if t is None:
        return call_fingerprints(call.name, call.arguments, "")
    return call_fingerprints(
        call.name, call.arguments, t.content or "", t.error_code, t.error_message
    )
