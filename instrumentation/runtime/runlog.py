"""The run's trace as the guard keeps it: raw entries, turned into ``Step`` records when asked.

Tool calls are their :class:`~loopwatch.instrumentation.runtime.detectors.ToolEvent` (the record the
detectors already hold); model calls that asked for no tool, verify, warning and stop entries
are ``(step, kind, detail)`` tuples. Cheaper per step than building ``Step`` records as it goes.
"""

from __future__ import annotations

from typing import Any

from . import semconv
from .detectors import CallTally, Detectors, ToolEvent
from .observer import ToolRecord
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
            if type(e) is not ToolEvent:
                append(_to_step(e))
                continue
            code = e.error_code
            detail: dict[str, Any] = {
                "tool": e.name,
                "call_id": e.call_id,
                "status": "ok" if code is None else "error",
                "retries": e.retries,
            }
            if code is not None:
                detail["error_code"] = code
            step = _new_step(Step)
            _set_index(step, e.step)
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
        made: dict[str, tuple[list[ToolEvent], list[Any]]] = {}
        new = 0
        for e in self.entries if upto is None else self.entries[:upto]:
            if type(e) is not ToolEvent:
                continue
            same_tool = made.get(e.name)
            if e.step > since:
                if same_tool is not None and tally.made_before(e, *same_tool):
                    continue
                new += 1
            if same_tool is None:
                made[e.name] = ([e], [e.arguments])
            else:
                same_tool[0].append(e)
                same_tool[1].append(e.arguments)
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
