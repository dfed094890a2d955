"""A tool call's arguments: the one parser, and the check against the tool's JSON schema.

:func:`parse_arguments` is the only place arguments sent by a model are parsed: the registry,
the model clients and the integrations all go through it, so one input means one thing
everywhere (docs/tools.md, *Arguments*). :func:`comparable_arguments` is the same parser as
the detectors use it: what it refuses is compared as sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "InvalidArguments",
    "comparable_arguments",
    "expected_arguments",
    "json_type",
    "parse_arguments",
    "schema_kind",
    "validate_arguments",
]


class InvalidArguments(ValueError):
    """Arguments that are not a JSON object; the message says why, ``text`` is what was sent."""

    text: str
    """The arguments as the model sent them (a non-string as ``str()`` of it)."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text


def parse_arguments(raw: object) -> dict[str, Any]:
    """A tool call's arguments as a new dict, or :class:`InvalidArguments` saying what is wrong.

    ============================  ==========================================================
    ``None``                      ``{}`` (no arguments)
    ``""`` or only whitespace     ``{}``
    a mapping                     a dict copy of it
    a JSON object string          the object, e.g. ``'{"a": 1}'`` -> ``{"a": 1}``
    invalid JSON                  ``InvalidArguments("arguments are not valid JSON (...)")``
    JSON that is not an object    ``InvalidArguments("arguments must be a JSON object, got
                                  null")`` (``array``, ``string``, ``integer`` ...)
    anything else                 ``InvalidArguments`` naming its Python type
    ============================  ==========================================================

    ``InvalidArguments`` is a ``ValueError``; its ``text`` keeps what was sent, so a caller
    that must hold on to it (a model client building a ``ToolCall``) loses nothing.
    """
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str):
        raise InvalidArguments(
            f"arguments must be a JSON object, got {type(raw).__name__}", str(raw)
        )
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidArguments(f"arguments are not valid JSON ({exc})", raw) from None
    if not isinstance(value, dict):
        raise InvalidArguments(f"arguments must be a JSON object, got {json_type(value)}", raw)
    return value


_OBJECT_FIRST = "{ \t\n\r"


def comparable_arguments(arguments: Any) -> Any:
    """A call's arguments as the detectors compare them: what :func:`parse_arguments` makes of
    them (JSON object text parsed, ``None`` and blank text as no arguments), else as they are
    (text the parser refuses, a call fingerprint), compared exactly. Compared with ``==``,
    which for JSON data is stable-JSON equality (dict order never matters, at any depth), so
    nothing is hashed or encoded (docs/tools.md, *Arguments*)."""
    if type(arguments) is dict:
        return arguments
    # Only an object's text (or blank text) can parse: a call fingerprint, or any other text,
    # is kept as it is without a raised and caught JSON error for each.
    if type(arguments) is str and arguments[:1] not in _OBJECT_FIRST:
        return arguments
    try:
        return parse_arguments(arguments)
    except InvalidArguments:
        return arguments


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> list[str]:
    """Problems with ``arguments`` against a JSON schema; empty when they fit.

    A small subset, enough to catch what models get wrong: ``type`` (one or a list),
    ``required``, ``properties``, ``additionalProperties: false``, ``items``, ``enum``,
    ``anyOf``/``oneOf``. Other keywords are not checked.
    """
    problems: list[str] = []
    _check(schema, arguments, "", problems)
    return problems


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
}


def json_type(value: Any) -> str:
    """The JSON type name of ``value`` (``null``, ``integer``, ``array`` ...)."""
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__


def _label(path: str) -> str:
    return "arguments" if not path else f"{path!r}"


def _check(schema: Any, value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(schema, Mapping):
        return
    for combinator in ("anyOf", "oneOf"):
        branches = schema.get(combinator)
        if isinstance(branches, list) and branches:
            results = [_problems_at(b, value, path) for b in branches]
            if any(not r for r in results):
                continue
            # Report the branch meant for this kind of value, if just one is; else the kinds.
            fitting = [r for b, r in zip(branches, results, strict=True) if _type_fits(b, value)]
            if len(fitting) == 1:
                problems.extend(fitting[0])
            else:
                kinds = " or ".join(schema_kind(b) for b in branches)
                problems.append(f"{_label(path)} must be {kinds}, got {json_type(value)}")
            return
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        known = [n for n in names if n in _JSON_TYPES]
        if known and not any(_JSON_TYPES[n](value) for n in known):
            problems.append(f"{_label(path)} must be {' or '.join(known)}, got {json_type(value)}")
            return
    enum_values = schema.get("enum")
    if isinstance(enum_values, list) and not any(_same_json(value, e) for e in enum_values):
        allowed = ", ".join(json.dumps(e) for e in enum_values)
        problems.append(
            f"{_label(path)} must be one of {allowed}, got {json.dumps(value, default=str)}"
        )
        return
    if isinstance(value, dict):
        _check_object(schema, value, path, problems)
    elif isinstance(value, list | tuple):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _check(items, item, f"{path}[{i}]", problems)


def _problems_at(schema: Any, value: Any, path: str) -> list[str]:
    problems: list[str] = []
    _check(schema, value, path, problems)
    return problems


def _type_fits(schema: Any, value: Any) -> bool:
    expected = schema.get("type") if isinstance(schema, Mapping) else None
    if expected is None:
        return False
    names = [expected] if isinstance(expected, str) else list(expected)
    return any(_JSON_TYPES[n](value) for n in names if n in _JSON_TYPES)


def schema_kind(schema: Any) -> str:
    """A schema's JSON type(s) for messages: ``string``, ``integer/null``, ``any``."""
    if not isinstance(schema, Mapping):
        return "any"
    expected = schema.get("type")
    if isinstance(expected, str):
        return expected
    if isinstance(expected, list):
        return "/".join(str(e) for e in expected)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        return "/".join(schema_kind(b) for b in branches)
    return "any"


def _same_json(a: Any, b: Any) -> bool:
    # Python says True == 1; JSON does not. 1 and 1.0 are the same JSON number.
    if _JSON_TYPES["number"](a) and _JSON_TYPES["number"](b):
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], path: str, problems: list[str]
) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    for key in schema.get("required") or ():
        if key not in value:
            if path:
                problems.append(f"{_label(path)} is missing required key {key!r}")
            else:
                problems.append(f"missing required argument {key!r}")
    for key, item in value.items():
        child = f"{path}.{key}" if path else str(key)
        if key in properties:
            _check(properties[key], item, child, problems)
            continue
        extra = schema.get("additionalProperties", True)
        if extra is False:
            if path:
                problems.append(f"{_label(path)} has unexpected key {key!r}")
            else:
                problems.append(f"unexpected argument {key!r}")
        elif isinstance(extra, Mapping):
            _check(extra, item, child, problems)


def expected_arguments(schema: Mapping[str, Any]) -> str:
    """`` Expected: path (string, required), limit (integer).`` for the model's next try."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return ""
    required = set(schema.get("required") or ())
    parts = []
    for key, prop in properties.items():
        parts.append(f"{key} ({schema_kind(prop)}{', required' if key in required else ''})")
    return " Expected: " + ", ".join(parts) + "."
