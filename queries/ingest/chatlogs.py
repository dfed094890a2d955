"""Recorded chat logs → runs (docs/import.md: what is read, the import unit).

A conversation record (a JSON object with its messages under ``messages`` or a key the user
names, or a bare list of messages) is read in one of two formats:

* ``openai-chat``: ``system``/``developer``/``user``/``assistant``/``tool`` messages; assistant
  messages ask for tools in ``tool_calls`` (or the legacy ``function_call``, answered by a
  ``function`` message) and may carry ``usage`` (``prompt_tokens``/``completion_tokens`` or
  ``input_tokens``/``output_tokens``) and ``finish_reason``; ``tool`` messages answer a call by
  ``tool_call_id``.
* ``anthropic``: Messages API ``user``/``assistant`` messages whose ``content`` is text or
  blocks; ``tool_use`` blocks ask for tools, ``tool_result`` blocks (in a ``user`` message)
  answer them, with ``is_error``; assistant messages may carry ``usage`` and ``stop_reason``.

An agent loop runs once per user message, so each user message starts a run, and the run holds
the model calls and tool calls that follow it up to the next user message (an Anthropic user
message that carries tool results continues the run). A user message no model call answered
(the last one of many recorded conversations) is not a run. Tool outcomes are classified by
the one rule used everywhere (``outcomes.tool_error``): a ``{"error": ...}`` body, the
result's own ``is_error`` flag, or one of the ``error_prefixes`` (e.g. ``Error:``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from loopwatch.instrumentation.runtime.outcomes import UNKNOWN_ERROR, tool_error
from loopwatch.instrumentation.runtime.toolspec import ToolOutcome
from loopwatch.instrumentation.runtime.types import ToolCall

from .recorded import RecordedRun, RecordedTool, RecordedTurn, recorded_outcome

__all__ = [
    "FORMATS",
    "ChatLogError",
    "ChatLogOptions",
    "Conversation",
    "LogFormat",
    "RecordedRun",
    "RecordedTool",
    "RecordedTurn",
    "field_value",
    "parse_conversation",
    "recorded_outcome",
    "task_label",
]

LogFormat = Literal["openai-chat", "anthropic"]
FORMATS: Final[tuple[LogFormat, ...]] = ("openai-chat", "anthropic")
"""The chat log formats ``loopwatch import`` reads."""

_TRUE_WORDS: Final = frozenset(
    {"true", "yes", "y", "1", "success", "succeeded", "pass", "passed", "ok", "resolved", "solved"}
)
_FALSE_WORDS: Final = frozenset(
    {"false", "no", "n", "0", "fail", "failed", "failure", "error", "unresolved", "unsolved"}
)
_ID_FIELDS: Final = ("conversation_id", "id")
_decode: Final = json.JSONDecoder().decode


class ChatLogError(ValueError):
    """A record that is not a conversation of the given format; the message says why."""

    def __init__(self, message: str, *, messages_under: str | None = None) -> None:
        super().__init__(message)
        self.messages_under = messages_under
        """Set when the record lacks the messages key but this key holds a message list."""


def _message_list_key(record: Mapping[str, Any]) -> str | None:
    # the key whose value looks like a chat: a list of objects with a "role"
    for k, v in record.items():
        if isinstance(v, list) and v and all(isinstance(m, Mapping) and "role" in m for m in v[:3]):
            return str(k)
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatLogOptions:
    """How to read conversation records (the ``loopwatch import`` flags)."""

    format: LogFormat = "openai-chat"
    """``openai-chat`` or ``anthropic``."""
    messages_key: str = "messages"
    """Where a record keeps its messages (a dotted path reaches into nested objects)."""
    task_type: str | None = None
    """A field holding the task type, or, when no record has that field, the task type itself."""
    success: str | None = None
    """A field holding the task's success label (bool, number, or a word like ``passed``)."""
    success_min: float = 1.0
    """A numeric label counts as success at or above this (tau-bench's ``reward`` is 0 or 1)."""
    id_field: str | None = None
    """A field holding the conversation id (default: ``conversation_id``, else ``id``, else the
    record's key in a JSON object of records, else a digest of the record)."""
    error_prefixes: tuple[str, ...] = ()
    """Tool results starting with one of these are failures (a tool's own error rule)."""
    default_task_type: str = "default"
    """The task type when ``task_type`` is not given."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(
                f"unknown chat log format {self.format!r}; known: {', '.join(FORMATS)}"
            )
        if not self.messages_key:
            raise ValueError("messages_key must not be empty")
        if not math.isfinite(self.success_min):
            raise ValueError(f"success_min must be a finite number, got {self.success_min!r}")


@dataclass(frozen=True, slots=True)
class Conversation:
    """One recorded conversation, split into runs."""

    id: str
    task_type: str
    success: bool | None
    """The task's recorded label; ``None`` when the record has none."""
    runs: tuple[RecordedRun, ...]
    messages: int
    """Messages read (all roles)."""
    problems: tuple[str, ...] = field(default=())
    """What was odd but skipped (a result for no call, a message of an unknown role ...)."""


def field_value(record: Any, path: str) -> tuple[bool, Any]:
    """``(found, value)`` of ``path`` in ``record``: the key itself, else a dotted path."""
    if not isinstance(record, Mapping):
        return False, None
    if path in record:
        return True, record[path]
    value: Any = record
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def task_label(value: Any, success_min: float = 1.0) -> bool | None:
    """A recorded success label as a bool: ``True``/``False``; a number ≥ ``success_min``;
    a word (``passed``, ``failed`` ...). ``None`` when it says neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(math.isfinite(value) and value >= success_min)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def _text(content: Any) -> str | None:
    """The text of message content: a string, or the text of a list of parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                t = part.get("text")
                if isinstance(t, str):
                    parts.append(t)
                elif part.get("type") in ("image", "image_url", "input_image"):
                    parts.append("[image]")
        return "\n".join(parts)
    if isinstance(content, Mapping | int | float | bool):
        return json.dumps(content, sort_keys=True)
    return str(content)


def _int(value: Any) -> int | None:
    t = type(value)
    if t is int:
        return value if value >= 0 else None
    if t is not float:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value) if value >= 0 else None


def _usage(m: Mapping[str, Any]) -> tuple[int | None, int | None]:
    u = m.get("usage")
    if type(u) is not dict:
        return None, None
    if "prompt_tokens" in u:
        return _int(u["prompt_tokens"]), _int(u.get("completion_tokens"))
    tin = _int(u.get("input_tokens"))
    tout = _int(u.get("output_tokens"))
    # Anthropic counts cached input apart from input_tokens: all of it was input.
    if "cache_creation_input_tokens" in u or "cache_read_input_tokens" in u:
        for k in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            extra = _int(u.get(k))
            if extra:
                tin = (tin or 0) + extra
    return tin, tout


def _arguments(raw: Any) -> dict[str, Any] | str:
    if type(raw) is str:
        try:
            parsed = _decode(raw)
        except (ValueError, RecursionError):
            return raw
        return parsed if isinstance(parsed, dict) else raw
    if isinstance(raw, dict):
        return dict(raw)
    if raw is None:
        return {}
    return json.dumps(raw, sort_keys=True)


class _Builder:
    """Collects turns into runs as messages come in order."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes
        self.runs: list[RecordedRun] = []
        self.problems: list[str] = []
        # per turn: (text, finish reason, input tokens, output tokens, model)
        self._turns: list[tuple[Any, ...]] = []
        # per turn: tool slots (call, content, code, message), by call id
        self._slots: list[list[list[Any]]] = []
        self._by_id: dict[str, list[Any]] = {}
        self._messages = 0
        self._open = False

    def user(self) -> None:
        self.close()
        self._open = True
        self._messages = 1

    def count(self) -> None:
        self._messages += 1

    def uncount(self, n: int) -> None:
        self._messages -= n

    def assistant(
        self,
        text: str | None,
        calls: Sequence[ToolCall],
        finish_reason: str | None,
        tin: int | None,
        tout: int | None,
        model: str | None,
    ) -> None:
        if not self._open:
            # a model call before any user message (a greeting, a system-started task)
            self._open = True
            self._messages = 0
        self._messages += 1
        slots: list[list[Any]] = []
        by_id = self._by_id
        for c in calls:
            slot = [c, None, None, None]
            slots.append(slot)
            by_id[c.id] = slot
        self._slots.append(slots)
        self._turns.append((text, finish_reason, tin, tout, model))

    def result(
        self, call_id: str | None, name: str | None, content: str, is_error: bool, message: int
    ) -> None:
        self._messages += 1
        slot = self._by_id.get(call_id) if call_id else None
        if slot is None and call_id is None and name is not None:
            # the legacy function message: answers the last unanswered call of that name
            for turn in reversed(self._slots):
                for s in turn:
                    if s[0].name == name and s[1] is None:
                        slot = s
                        break
                if slot is not None:
                    break
        if slot is None or not self._open:
            self.problems.append(
                f"message {message}: a tool result for no call in this run ({call_id!r})"
            )
            return
        if slot[1] is not None:
            self.problems.append(f"message {message}: a second result for call {call_id!r}")
            return
        slot[1] = content
        err = tool_error(content, error_prefix=self.prefixes or None)
        if err is not None:
            slot[2], slot[3] = err.code, err.message
        elif is_error:
            slot[2], slot[3] = UNKNOWN_ERROR, content

    def close(self) -> None:
        if self._turns:
            turns = [
                RecordedTurn(
                    t[0],
                    tuple([s[0] for s in slots]),
                    tuple([ToolOutcome(call=s[0], ok=s[2] is None, content=s[1], error_code=s[2],
                                       error_message=s[3], attempts=1)
                           for s in slots if s[1] is not None]),
                    t[1],
                    t[2],
                    t[3],
                    t[4],
                ) if slots else RecordedTurn(t[0], (), (), t[1], t[2], t[3], t[4])
                for t, slots in zip(self._turns, self._slots, strict=True)
            ]  # fmt: skip
            self.runs.append(RecordedRun(len(self.runs) + 1, tuple(turns), self._messages))
        self._turns = []
        self._slots = []
        self._by_id = {}
        self._open = False
        self._messages = 0


def _call_id(value: Any, fallback: str) -> str:
    return value if isinstance(value, str) and value else fallback


def _openai(messages: list[Any], b: _Builder) -> int:
    n = 0
    for i, m in enumerate(messages, 1):
        if type(m) is not dict:
            raise ChatLogError(f"message {i} is {_kind(m)}, not an object")
        n += 1
        role = m.get("role")
        if role == "user":
            b.user()
        elif role in ("system", "developer"):
            b.count()
        elif role == "assistant":
            calls: list[ToolCall] = []
            raw_calls = m.get("tool_calls")
            if raw_calls is not None and not isinstance(raw_calls, list):
                raise ChatLogError(f"message {i}: tool_calls is {_kind(raw_calls)}, not a list")
            for j, c in enumerate(raw_calls or (), 1):
                if not isinstance(c, dict):
                    raise ChatLogError(f"message {i}: tool call {j} is {_kind(c)}, not an object")
                fn = c.get("function")
                fn = fn if isinstance(fn, dict) else c
                name = fn.get("name")
                if not isinstance(name, str) or not name:
                    raise ChatLogError(f"message {i}: tool call {j} has no function name")
                calls.append(
                    ToolCall(
                        _call_id(c.get("id"), f"m{i}c{j}"), name, _arguments(fn.get("arguments"))
                    )
                )
            fc = m.get("function_call")
            if not calls and isinstance(fc, dict) and isinstance(fc.get("name"), str):
                calls.append(ToolCall(f"m{i}f", fc["name"], _arguments(fc.get("arguments"))))
            tin, tout = _usage(m)
            finish = m.get("finish_reason")
            model = m.get("model")
            b.assistant(
                _text(m.get("content")),
                calls,
                finish if isinstance(finish, str) else None,
                tin,
                tout,
                model if isinstance(model, str) else None,
            )
        elif role in ("tool", "function"):
            call_id = m.get("tool_call_id")
            name = m.get("name")
            b.result(
                call_id if isinstance(call_id, str) else None,
                name if isinstance(name, str) else None,
                _text(m.get("content")) or "",
                m.get("is_error") is True,
                i,
            )
        else:
            b.count()
            b.problems.append(f"message {i}: unknown role {role!r}, skipped")
    return n


def _anthropic(messages: list[Any], b: _Builder) -> int:
    n = 0
    for i, m in enumerate(messages, 1):
        if type(m) is not dict:
            raise ChatLogError(f"message {i} is {_kind(m)}, not an object")
        n += 1
        role = m.get("role")
        content = m.get("content")
        blocks: list[Any] = (
            content
            if isinstance(content, list)
            else [{"type": "text", "text": content}]
            if isinstance(content, str)
            else []
        )
        if content is not None and not isinstance(content, str | list):
            raise ChatLogError(f"message {i}: content is {_kind(content)}, not text or blocks")
        if role == "user":
            results = [x for x in blocks if isinstance(x, dict) and x.get("type") == "tool_result"]
            if not results:
                b.user()
                continue
            for x in results:
                b.result(
                    x.get("tool_use_id") if isinstance(x.get("tool_use_id"), str) else None,
                    None,
                    _text(x.get("content")) or "",
                    x.get("is_error") is True,
                    i,
                )
            b.uncount(len(results) - 1)  # the results came in one message
        elif role == "assistant":
            texts: list[str] = []
            calls: list[ToolCall] = []
            for j, x in enumerate(blocks, 1):
                if not isinstance(x, dict):
                    raise ChatLogError(
                        f"message {i}: content block {j} is {_kind(x)}, not an object"
                    )
                kind = x.get("type")
                if kind == "text" and isinstance(x.get("text"), str):
                    texts.append(x["text"])
                elif kind in ("tool_use", "server_tool_use"):
                    name = x.get("name")
                    if not isinstance(name, str) or not name:
                        raise ChatLogError(f"message {i}: tool_use block {j} has no name")
                    calls.append(
                        ToolCall(
                            _call_id(x.get("id"), f"m{i}b{j}"), name, _arguments(x.get("input"))
                        )
                    )
            tin, tout = _usage(m)
            stop = m.get("stop_reason")
            model = m.get("model")
            b.assistant(
                "\n".join(texts) if texts else None,
                calls,
                stop if isinstance(stop, str) else None,
                tin,
                tout,
                model if isinstance(model, str) else None,
            )
        elif role == "system":
            b.count()
        else:
            b.count()
            b.problems.append(f"message {i}: unknown role {role!r}, skipped")
    return n


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)


def parse_conversation(
    record: Any,
    options: ChatLogOptions,
    *,
    key: str | None = None,
    digest: str = "",
    task_type_is_field: bool = True,
) -> Conversation:
    """One conversation record → its runs. Raises :class:`ChatLogError` naming what is wrong.

    ``task_type_is_field``: read ``options.task_type`` as a field (else it is the task type).
    """
    if isinstance(record, list):
        messages: Any = record
        record_obj: Mapping[str, Any] = {}
    elif isinstance(record, Mapping):
        found, messages = field_value(record, options.messages_key)
        if not found:
            keys = ", ".join(repr(k) for k in list(record)[:8])
            under = _message_list_key(record)
            raise ChatLogError(
                f"no {options.messages_key!r} key (keys: {keys or 'none'}); "
                + (
                    f"{under!r} holds a message list: add --messages {under}"
                    if under is not None
                    else "name the messages' key with --messages KEY"
                ),
                messages_under=under,
            )
        record_obj = record
    else:
        raise ChatLogError(f"the record is {_kind(record)}, not a conversation object or list")
    if not isinstance(messages, list):
        raise ChatLogError(f"{options.messages_key!r} is {_kind(messages)}, not a list")

    conv_id: str | None = None
    for name in (options.id_field,) if options.id_field else _ID_FIELDS:
        found, value = field_value(record_obj, name)
        if found and isinstance(value, str | int) and not isinstance(value, bool):
            conv_id = str(value)
            break
        if options.id_field:
            raise ChatLogError(f"no conversation id under {options.id_field!r}")
    if conv_id is None:
        conv_id = key if key is not None else digest[:16]

    task_type = options.default_task_type
    if options.task_type is not None:
        if task_type_is_field:
            found, value = field_value(record_obj, options.task_type)
            if found and isinstance(value, str | int) and not isinstance(value, bool):
                task_type = str(value)
            else:
                task_type = "unknown"
        else:
            task_type = options.task_type

    success: bool | None = None
    if options.success is not None:
        found, value = field_value(record_obj, options.success)
        success = task_label(value, options.success_min) if found else None

    b = _Builder(options.error_prefixes)
    n = _anthropic(messages, b) if options.format == "anthropic" else _openai(messages, b)
    b.close()
    return Conversation(conv_id, task_type, success, tuple(b.runs), n, tuple(b.problems))
