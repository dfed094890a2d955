"""The one argument parser: every edge case pinned, and every caller going through it."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest
from loopwatch.instrumentation.clients import base as clients_base
from loopwatch.instrumentation.clients.base import tool_call_arguments
from loopwatch.instrumentation.runtime.arguments import InvalidArguments, parse_arguments
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.tools import parse_arguments as tools_parse_arguments
from loopwatch.instrumentation.runtime.types import ToolCall


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, {}),
        ("", {}),
        ("  \n", {}),
        ('{"a": 1, "b": [true, null]}', {"a": 1, "b": [True, None]}),
        ({"a": 1}, {"a": 1}),
        (MappingProxyType({"a": 1}), {"a": 1}),
    ],
)
def test_what_parses(raw: object, expected: dict[str, object]) -> None:
    assert parse_arguments(raw) == expected


def test_a_mapping_is_copied() -> None:
    given = {"a": [1]}
    parsed = parse_arguments(given)
    assert parsed == given and parsed is not given


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("null", "arguments must be a JSON object, got null"),
        ("[1, 2]", "arguments must be a JSON object, got array"),
        ('"path"', "arguments must be a JSON object, got string"),
        ("3", "arguments must be a JSON object, got integer"),
        ("true", "arguments must be a JSON object, got boolean"),
        (b'{"a": 1}', "arguments must be a JSON object, got bytes"),
        ([1, 2], "arguments must be a JSON object, got list"),
    ],
)
def test_what_is_not_an_object_is_refused_naming_what_it_is(raw: object, message: str) -> None:
    with pytest.raises(InvalidArguments) as err:
        parse_arguments(raw)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)
    assert err.value.text == (raw if isinstance(raw, str) else str(raw))


def test_invalid_json_is_refused_and_the_text_kept() -> None:
    with pytest.raises(InvalidArguments, match=r"^arguments are not valid JSON \(") as err:
        parse_arguments('{"path": "a.txt"')
    assert err.value.text == '{"path": "a.txt"'
    deep = "[" * 100_000 + "]" * 100_000  # too deep for the parser: refused, not a crash
    with pytest.raises(InvalidArguments):
        parse_arguments(deep)


def test_there_is_one_parser() -> None:
    assert tools_parse_arguments is parse_arguments
    assert clients_base.parse_arguments is parse_arguments


def test_a_client_keeps_what_does_not_parse_as_sent() -> None:
    assert tool_call_arguments('{"a": 1}') == {"a": 1}
    assert tool_call_arguments(None) == {}
    assert tool_call_arguments("not json") == "not json"
    assert tool_call_arguments("[1]") == "[1]"


def test_the_registry_tells_the_model_what_the_parser_said() -> None:
    registry = ToolRegistry()
    registry.register(lambda path: path, name="read", parameters={"type": "object"})
    for raw, said in (("[1]", "got array"), ("{", "not valid JSON")):
        outcome = registry.execute(ToolCall("c1", "read", raw))
        assert outcome.error_code == "INVALID_ARGUMENTS" and said in outcome.content
        assert json.loads(outcome.content)["error"].startswith("invalid arguments for read: ")
