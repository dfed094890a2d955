"""One run's distinct (call, result) pairs, as the detectors count them (docs/runtime.md, "The
detectors"): :class:`ToolEvent` (one tool call that ran), :class:`CallEntry` (one distinct
(call, result)) and :class:`CallTally`.

Results are compared with their volatile text normalized (the detectors normalize each new result
once); arguments only when a result was seen before, since a new result makes a new (call,
result) whatever the arguments (runtime/fingerprint.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .fingerprint import is_exact_text, normalize_arguments, stable_json

__all__ = ["UNSET", "CallEntry", "CallTally", "ToolEvent", "arguments_key"]


class CallEntry:
    """One distinct (call, result) of a run: how often it occurred and in which steps."""

    __slots__ = ("_later", "arguments", "count", "first_step", "key", "name", "result")

    def __init__(self, name: str, arguments: Any, result: Any, step: int) -> None:
        self.name = name
        """The tool's name."""
        self.arguments = arguments
        """The parsed arguments (or any value standing for them, e.g. a call fingerprint)."""
        self.result = result
        """The result text (or a result fingerprint); ``None`` when counting calls alone."""
        self.count = 1
        """Occurrences so far."""
        self.first_step = step
        """The step of the first occurrence."""
        self._later: list[int] | None = None  # steps of the repeats (most entries have none)
        self.key: Any = UNSET
        """The arguments as compared (volatile text normalized), worked out on first need."""

    @property
    def steps(self) -> list[int]:
        """The step of each occurrence."""
        return [self.first_step] if self._later is None else [self.first_step, *self._later]

    def again(self, step: int) -> None:
        """Count one more occurrence, in ``step``."""
        self.count += 1
        if self._later is None:
            self._later = [step]
        else:
            self._later.append(step)

    def __repr__(self) -> str:
        return f"CallEntry({self.name!r}, {self.arguments!r}, count={self.count})"


UNSET: Any = object()
"""Not worked out yet (:attr:`CallEntry.key`, :attr:`ToolEvent.key`)."""


@dataclass(slots=True)
class ToolEvent:
    """One tool call that ran, as the detectors see it."""

    step: int
    """The loop step (1-based)."""
    name: str
    """The tool's name."""
    arguments: Any
    """Parsed arguments (compared with ``==``), or a call fingerprint."""
    result: Any
    """The text returned to the model, or a result fingerprint."""
    ok: bool = True
    """``False`` when the outcome was classified as a failure."""
    error_code: str | None = None
    """The failure's code."""
    error_message: str | None = None
    """The failure's message (normalized for ``repeated_error``)."""
    exempt: bool = False
    """The tool is repeat-exempt: the repeat detectors skip it."""
    error_id: str | None = None
    """The failure's identity; default :func:`error_key` of tool, code and message."""
    entry: CallEntry | None = None
    """Filled by the tally: this (call, result)'s record."""
    new_result: bool = False
    """Filled by the tally: the run had not seen this result before."""
    new_call: bool = False
    """Filled by the tally: the run had not made this call before. Worked out only when the
    result is not new (a new result is progress already); ``False`` otherwise."""
    call_id: str = ""
    """The model's id of the call, when known (the guard's trace reads it)."""
    retries: int = 0
    """Attempts after the first (the guard's trace reads it)."""
    key: Any = UNSET
    """The arguments as compared (volatile text normalized); filled by the detectors when a
    comparison needs it. ``arguments`` and ``result`` stay what the model sent and saw."""


def arguments_key(item: CallEntry | ToolEvent) -> Any:
    """``item``'s arguments as compared: volatile text normalized unless the tool compares
    exactly (runtime/fingerprint.py); worked out once and kept on ``item``."""
    key = item.key
    if key is UNSET:
        args = item.arguments
        key = item.key = args if is_exact_text(item.name) else normalize_arguments(args)
    return key


def _holds_placeholder(value: Any, depth: int = 0) -> bool:
    # Whether a "<" (a placeholder's first character) is in a string of the arguments that
    # normalize_arguments reads; anything else is judged by its stable JSON.
    kind = type(value)
    if kind is str:
        return "<" in value
    if kind is int or kind is float or kind is bool or value is None:
        return False
    if depth >= 32 or not (kind is dict or kind is list or kind is tuple):
        return "<" in stable_json(value)
    for v in value.values() if kind is dict else value:
        t = type(v)
        if t is str:
            if "<" in v:
                return True
        elif not (t is int or t is float or t is bool or v is None) and _holds_placeholder(
            v, depth + 1
        ):
            return True
    return False


class CallTally:
    """The distinct (call, result) pairs of a run and the calls made, compared with ``==``.

    Keyed by the result, so the usual new result costs one dict lookup and no argument hashing;
    a seen result is compared with the few calls that returned it.
    """

    __slots__ = ("_by_result", "_calls", "max_count", "normalize")

    def __init__(self, *, normalize: bool = False) -> None:
        self._by_result: dict[Any, CallEntry | list[CallEntry]] = {}
        # tool -> the entry of each distinct pair; built on first need (a seen result)
        self._calls: dict[str, list[CallEntry]] | None = None
        self.max_count = 0
        """The highest count of one (call, result) so far."""
        self.normalize = normalize
        """Compare arguments with their volatile text normalized (``compare_exactly`` tools
        excepted). Worked out only for a call whose result was seen before: a new result
        makes a new (call, result) whatever the arguments."""

    def same_call(self, a: CallEntry | ToolEvent, b: CallEntry | ToolEvent) -> bool:
        """Whether ``a`` and ``b`` are the same call: the same tool and equal arguments, with
        volatile text normalized when the tally normalizes."""
        if a.name != b.name:
            return False
        return bool(a.arguments == b.arguments) or (
            self.normalize and bool(arguments_key(a) == arguments_key(b))
        )

    def made_before(
        self, event: ToolEvent, earlier: Sequence[ToolEvent], arguments: Sequence[Any]
    ) -> bool:
        """Whether ``event``'s call is among ``earlier``'s (``same_call``): ``earlier`` are
        calls of ``event``'s tool, ``arguments`` their arguments. Arguments that normalizing
        leaves as they are, with no placeholder in them, equal only equal arguments: then
        nothing earlier is normalized."""
        args = event.arguments
        if args in arguments:
            return True
        if not self.normalize or is_exact_text(event.name):
            return False
        key = arguments_key(event)
        if key == args and not _holds_placeholder(args):
            return False
        return any(arguments_key(e) == key for e in earlier)

    def add(self, event: ToolEvent, result: Any = UNSET) -> CallEntry:
        """Count ``event``'s (call, result); fills ``entry``, ``new_result``, ``new_call``.
        ``result``: the result as compared (default ``event.result``)."""
        name, args, step = event.name, event.arguments, event.step
        if result is UNSET:
            result = event.result
        table = self._by_result
        found = table.get(result)
        entry: CallEntry | None = None
        if found is None:  # the usual case: a result never seen in this run
            entry = CallEntry(name, args, result, step)
            table[result] = entry
            event.new_result = True
            # Whether the call is new matters only when the result is not: not checked here
            # (that would compare it with every earlier call of the tool).
            calls = self._calls
            if calls is not None:
                made = calls.get(name)
                if made is None:
                    calls[name] = [entry]
                else:
                    made.append(entry)
        elif type(found) is CallEntry:
            if found.name == name and (found.arguments == args or self.same_call(found, event)):
                entry = found
                entry.again(step)
            else:
                entry = CallEntry(name, args, result, step)
                event.new_call = self._add_call(entry, event)
                table[result] = [found, entry]
        else:
            assert isinstance(found, list)
            for e in found:
                if e.name == name and (e.arguments == args or self.same_call(e, event)):
                    entry = e
                    entry.again(step)
                    break
            else:
                entry = CallEntry(name, args, result, step)
                event.new_call = self._add_call(entry, event)
                found.append(entry)
        if entry.count > self.max_count:
            self.max_count = entry.count
        event.entry = entry
        return entry

    def _add_call(self, entry: CallEntry, event: ToolEvent) -> bool:
        # Whether entry's call was made before, then count it (before the entry is added).
        calls = self._calls
        if calls is None:
            calls = self._calls = {}
            for found in self._by_result.values():
                for e in found if type(found) is list else (found,):
                    assert isinstance(e, CallEntry)
                    calls.setdefault(e.name, []).append(e)
        name, args = entry.name, entry.arguments
        made = calls.get(name)
        if made is None:
            calls[name] = [entry]
            return True
        new = not any(e.arguments == args for e in made) and not any(
            self.same_call(e, event) for e in made
        )
        entry.key = event.key
        made.append(entry)
        return new
