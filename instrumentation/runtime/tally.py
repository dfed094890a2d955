"""One run's distinct (call, result) pairs, as the detectors count them (docs/runtime.md, "The
detectors"): :class:`CallEntry` (one distinct (call, result)) and :class:`CallTally`.

A tool call itself is the one tool-call record, ``ToolOutcome`` (docs/architecture.md, "One tool
call's record"); what the tally works out about it (its ``CallEntry``, whether its result or its
call was new, its arguments as compared) is kept here, on the entry and the tally.

Results are compared with their volatile text normalized (the detectors normalize each new result
once); arguments only when a result was seen before, since a new result makes a new (call,
result) whatever the arguments (runtime/fingerprint.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .fingerprint import is_exact_text, normalize_arguments, stable_json

__all__ = [
    "NEW_CALL",
    "NEW_RESULT",
    "UNSET",
    "CallEntry",
    "CallTally",
    "ToolEvent",
    "arguments_key",
]

NEW_RESULT = 2
""":attr:`CallEntry.novelty`: the call that made the entry got a result the run had not seen."""
NEW_CALL = 1
""":attr:`CallEntry.novelty`: its result was seen before, but the call had not been made."""


class CallEntry:
    """One distinct (call, result) of a run: how often it occurred and in which steps."""

    __slots__ = ("_later", "arguments", "count", "first_step", "key", "name", "novelty", "result")

    def __init__(self, name: str, arguments: Any, result: Any, step: int, novelty: int = 0) -> None:
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
        self.novelty = novelty
        """What the first occurrence brought: :data:`NEW_RESULT`, :data:`NEW_CALL` or 0."""
        self._later: list[int] | None = None  # steps of the repeats (most entries have none)
        self.key: Any = UNSET
        """The arguments as compared (volatile text normalized), worked out on first need."""

    @property
    def steps(self) -> list[int]:
        """The step of each occurrence."""
        return [self.first_step] if self._later is None else [self.first_step, *self._later]

    @property
    def new_result(self) -> bool:
        """The latest occurrence (the call just counted) got a result new to the run."""
        return self.count == 1 and self.novelty == NEW_RESULT

    @property
    def new_call(self) -> bool:
        """The latest occurrence was a call not made before in the run, its result not new.
        Worked out only when the result is not new (a new result is progress already)."""
        return self.count == 1 and self.novelty == NEW_CALL

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
"""Not worked out yet (:attr:`CallEntry.key`)."""

_new_entry = object.__new__


def arguments_key(item: CallEntry) -> Any:
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

    def same_call(self, a: CallEntry, b: CallEntry) -> bool:
        """Whether ``a`` and ``b`` are the same call: the same tool and equal arguments, with
        volatile text normalized when the tally normalizes."""
        if a.name != b.name:
            return False
        return bool(a.arguments == b.arguments) or (
            self.normalize and bool(arguments_key(a) == arguments_key(b))
        )

    def made_before(
        self, name: str, arguments: Any, earlier: Sequence[Any], keys: list[Any]
    ) -> bool:
        """Whether the call ``name(arguments)`` is among earlier calls of the tool
        (``same_call``): ``earlier`` are their arguments, ``keys`` the same as compared
        (:data:`UNSET` until worked out; filled here). Arguments that normalizing leaves as
        they are, with no placeholder in them, equal only equal arguments: then nothing
        earlier is normalized."""
        if arguments in earlier:
            return True
        if not self.normalize or is_exact_text(name):
            return False
        key = normalize_arguments(arguments)
        if key == arguments and not _holds_placeholder(arguments):
            return False
        for i, k in enumerate(keys):
            if k is UNSET:
                k = keys[i] = normalize_arguments(earlier[i])
            if k == key:
                return True
        return False

    def add(self, name: str, args: Any, result: Any, step: int) -> CallEntry:
        """Count the call ``name(args)`` with ``result`` (as compared) in ``step``: its
        (call, result) entry, whose ``new_result``/``new_call`` say what the call brought."""
        table = self._by_result
        found = table.get(result)
        if found is None:  # the usual case: a result never seen in this run
            # CallEntry(name, args, result, step, NEW_RESULT), its slots set here: this runs on
            # every new result, and __init__'s frame costs as much as the stores
            entry = _new_entry(CallEntry)
            entry.name, entry.arguments, entry.result = name, args, result
            entry.count, entry.first_step, entry.novelty = 1, step, NEW_RESULT
            entry._later, entry.key = None, UNSET
            table[result] = entry
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
            if found.name == name and found.arguments == args:
                entry = found
                entry.again(step)
            else:
                entry = self._seen_result(name, args, result, step, (found,))
                if entry.count == 1:
                    table[result] = [found, entry]
        else:
            assert isinstance(found, list)
            entry = self._seen_result(name, args, result, step, found)
            if entry.count == 1:
                found.append(entry)
        if entry.count > self.max_count:
            self.max_count = entry.count
        return entry

    def _seen_result(
        self, name: str, args: Any, result: Any, step: int, found: Sequence[CallEntry]
    ) -> CallEntry:
        # The entry of a result seen before: one of ``found`` counted again, or a new one (its
        # count 1; the caller files it), whose arguments key is worked out at most once.
        new = CallEntry(name, args, result, step)
        for e in found:
            if e.name == name and (e.arguments == args or self.same_call(e, new)):
                e.again(step)
                return e
        if self._add_call(new):
            new.novelty = NEW_CALL
        return new

    def _add_call(self, entry: CallEntry) -> bool:
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
            self.same_call(e, entry) for e in made
        )
        made.append(entry)
        return new


def ToolEvent(*args: Any, **kwargs: Any) -> Any:
    """Gone: the detectors' second record of a tool call. Kept importable so that code naming
    it (an import, an annotation) still loads; calling it raises a ``TypeError`` that says what
    replaces it (docs/runtime.md, "Writing your own detector").

    A detector's ``after_call(event)`` is now ``after_call(outcome, step, arguments, entry,
    exempt)``, and ``Detectors.after_call(ToolEvent(step, name, arguments, result, ok,
    error_code, error_message))`` is ``Detectors.after_call(ToolOutcome(call=ToolCall("",
    name, arguments), ok=ok, content=result, error_code=error_code,
    error_message=error_message), step)``.
    """
    raise TypeError(
        "ToolEvent is gone: the detectors read the one tool-call record. Pass "
        "ToolOutcome(call=ToolCall('', name, arguments), ok=..., content=result, error_code=..., "
        "error_message=...) and the step: Detectors.after_call(outcome, step, exempt=...); a "
        "detector's after_call(event) is after_call(outcome, step, arguments, entry, exempt) "
        "(docs/runtime.md, 'Writing your own detector')"
    )
