"""A tool's JSON schema, derived from its Python signature, type hints and docstring."""

from __future__ import annotations

import collections.abc
import enum
import inspect
import json
import pathlib
import re
import types
import typing
from typing import Any, Literal

from .arguments import json_type
from .toolspec import IDEMPOTENCY_KEY, TOOL_CALL_ID, ToolFn

__all__ = ["schema_from_function", "signature_of", "summary"]


def signature_of(fn: ToolFn) -> inspect.Signature | None:
    """``fn``'s signature; ``None`` for the builtins that have none (the bind check is skipped)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Notes?)\s*:\s*$"
)
_GOOGLE_PARAM = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^\s*:param\s+(?:[\w\[\], |]+\s+)?(\w+)\s*:\s*(.*)$")


def summary(fn: ToolFn) -> str:
    """The docstring up to its first section (``Args:``, ``:param``...), on one line."""
    doc = inspect.getdoc(fn) or ""
    lines: list[str] = []
    for line in doc.splitlines():
        if _SECTION.match(line) or line.lstrip().startswith(":"):
            break
        lines.append(line.strip())
    return " ".join(" ".join(lines).split())


def _param_docs(fn: ToolFn) -> dict[str, str]:
    doc = inspect.getdoc(fn) or ""
    docs: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in doc.splitlines():
        rest = _REST_PARAM.match(line)
        if rest:
            current = rest.group(1)
            docs[current] = rest.group(2).strip()
            continue
        section = _SECTION.match(line)
        if section:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters", "Params")
            current = None
            continue
        if not in_args:
            continue
        match = _GOOGLE_PARAM.match(line)
        if match:
            current = match.group(1).lstrip("*")
            docs[current] = match.group(2).strip()
        elif current is not None and line.strip():
            docs[current] = f"{docs[current]} {line.strip()}".strip()
        elif not line.strip():
            current = None
    return docs


def schema_from_function(fn: ToolFn) -> dict[str, Any]:
    """A JSON object schema of ``fn``'s parameters, for the model.

    Types come from the hints (``str``, ``int``, ``float``, ``bool``, ``None``, ``list[T]``,
    ``dict[str, T]``, ``Literal``, ``Enum``, unions, ``Annotated[T, "description"]``,
    ``TypedDict``); a parameter without a default is required; descriptions come from the
    docstring's ``Args:`` section or ``:param x:`` lines. ``idempotency_key``, ``tool_call_id``
    and ``*args`` are left out; ``**kwargs`` allows extra keys. A positional-only parameter
    without a default raises ``ValueError``: the model passes arguments by name.
    """
    signature = signature_of(fn)
    if signature is None:
        return {"type": "object", "properties": {}, "additionalProperties": True}
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        hints = {}
    docs = _param_docs(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    additional = False
    for param in signature.parameters.values():
        if (
            param.name in (IDEMPOTENCY_KEY, TOOL_CALL_ID)
            or param.kind is inspect.Parameter.VAR_POSITIONAL
        ):
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            additional = True
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            if param.default is inspect.Parameter.empty:
                raise ValueError(
                    f"parameter {param.name!r} of {getattr(fn, '__name__', fn)!r} is "
                    "positional-only; the model passes arguments by name"
                )
            continue
        annotation = hints.get(param.name, param.annotation)
        prop = _type_schema(annotation)
        if param.name in docs and "description" not in prop:
            prop["description"] = docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        else:
            default = param.default.value if isinstance(param.default, enum.Enum) else param.default
            if _is_json_value(default):
                prop["default"] = default
        properties[param.name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": additional,
    }


def _is_json_value(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


_SIMPLE: dict[Any, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
    None: "null",
    pathlib.Path: "string",
    pathlib.PurePath: "string",
}

_ARRAY_ORIGINS: tuple[Any, ...] = (
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.Set,
    collections.abc.Iterable,
    collections.abc.Collection,
)
_OBJECT_ORIGINS: tuple[Any, ...] = (dict, collections.abc.Mapping)


def _type_schema(tp: Any) -> dict[str, Any]:
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema = _type_schema(args[0])
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = notes[0]
        return schema
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if origin is Literal:
        return _enum_schema(list(args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([member.value for member in tp])
    if origin is typing.Union or origin is types.UnionType:
        branches = [_type_schema(a) for a in args]
        if any(b == {} for b in branches):
            return {}
        if all(set(b) == {"type"} and isinstance(b["type"], str) for b in branches):
            return {"type": list(dict.fromkeys(b["type"] for b in branches))}
        return {"anyOf": branches}
    if tp in _ARRAY_ORIGINS or origin in _ARRAY_ORIGINS:
        schema = {"type": "array"}
        if args and (origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)):
            items = _type_schema(args[0])
            if items:
                schema["items"] = items
        return schema
    if tp in _OBJECT_ORIGINS or origin in _OBJECT_ORIGINS:
        schema = {"type": "object"}
        if len(args) == 2:
            values = _type_schema(args[1])
            if values:
                schema["additionalProperties"] = values
        return schema
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        return {
            "type": "object",
            "properties": {k: _type_schema(v) for k, v in hints.items()},
            "required": sorted(getattr(tp, "__required_keys__", ())),
        }
    if isinstance(tp, type) and issubclass(tp, str):
        return {"type": "string"}
    return {}


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": values}
    kinds = {json_type(v) for v in values}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema
