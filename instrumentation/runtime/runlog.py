"""The run's trace as the guard keeps it: raw entries, turned into ``Step`` records when asked.

A tool call that ran is ``(step, outcome)``: the one tool-call record, classified, as the
detectors heard it (docs/architecture.md, "One tool call's record"); model calls that asked for
no tool, verify, warning, nudge and stop entries (and a call cut off at the deadline) are
``(step, kind, detail)`` tuples. Cheaper per step than building ``Step`` records as it goes.
"""

from __future__ import annotations

from typing import Any

from . import semconv
from .arguments import comparable_arguments
from .detectors import CallTally, Detectors
from .observer import ToolRecord
from .tally import UNSET
from .types import ModelResponse, Step

__all__ = ["RunLog", "StepState"]


# One Step per tool call is built at the end of every run: its slots are set directly, since a
# frozen dataclass's __init__ goes through object.__setattr__ for each field (twice the cost).
_new_step = object.__new__
_set_index, _set_kind, _set_detail = (vars(Step)[f].__set__ for f in ("index", "kind", "detail"))


def _to_step(entry: tuple[Any, ...]) -> Step:
    index, kind, data = entry
    if kind == "model" and isinstance(data, ModelResponse):
        r = data
        return Step(
            index,
            kind,
            {
                "stop_reason": r.stop_reason,
                "tool_calls": len(r.message.tool_calls),
                "input_tokens": r.usage.input_tokens,
                "output_tokens": r.usage.output_tokens,
            },
        )
    return Step(index, kind, dict(data))


class RunLog:
    """One run's trace entries, in order."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[Any] = []

    def add(self, step: int, kind: str, detail: Any) -> None:
        """A ``model`` (its response), ``verify``, ``warning``, ``nudge`` or ``stop`` entry."""
        self.entries.append((step, kind, detail))

    def records(self, upto: int | None = None) -> list[Step]:
        """The trace as ``Step`` records (``RunResult.steps``); ``upto``: of the first this
        many entries."""
        steps: list[Step] = []
        append = steps.append
        for e in self.entries if upto is None else self.entries[:upto]:
            if len(e) != 2:
                append(_to_step(e))
                continue
            index, outcome = e
            code = outcome.error_code
            call = outcome.call
            detail: dict[str, Any] = {
                "tool": call.name,
                "call_id": call.id,
                "status": "ok" if code is None else "error",
                "retries": outcome.retries,
            }
            if code is not None:
                detail["error_code"] = code
            step = _new_step(Step)
            _set_index(step, index)
            _set_kind(step, "tool")
            _set_detail(step, detail)
            append(step)
        return steps

    def progress(self, steps: int, detectors: Detectors) -> dict[str, int]:
        """Evidence for judging a stopped run (``semconv.PROGRESS_*``)."""
        return {
            "recent_new_calls": self.recent_new_calls(steps, detectors.tally),
            "max_same_error": detectors.repeated_error.peak,
            "max_same_call": detectors.tally.max_count,
        }

    def recent_new_calls(self, steps: int, tally: CallTally, upto: int | None = None) -> int:
        """Calls of the last ``semconv.PROGRESS_WINDOW`` steps not made before in the run;
        ``upto``: among the first this many entries."""
        since = steps - semconv.PROGRESS_WINDOW
        # Each call of the last steps is compared once with the calls made before it (calls
        # are the same or not by one equivalence: equal tool and arguments as compared).
        # tool -> the arguments of its calls so far, and the same as compared (worked out once,
        # when a comparison needs them)
        made: dict[str, tuple[list[Any], list[Any]]] = {}
        new = 0
        for e in self.entries if upto is None else self.entries[:upto]:
            if len(e) != 2:
                continue
            step, outcome = e
            call = outcome.call
            name, args = call.name, comparable_arguments(call.arguments)
            same_tool = made.get(name)
            if step > since:
                if same_tool is not None and tally.made_before(name, args, *same_tool):
                    continue
                new += 1
            if same_tool is None:
                made[name] = ([args], [UNSET])
            else:
                same_tool[0].append(args)
                same_tool[1].append(UNSET)
        return new


class StepState:
    """The open step: its response, its tool records and what it brought that was new."""

    __slots__ = ("index", "new_calls", "new_results", "response", "tools")

    def __init__(self, index: int) -> None:
        self.index = index
        self.response: ModelResponse | None = None
        self.tools: list[ToolRecord] = []
        self.new_results = 0
        self.new_calls = 0
