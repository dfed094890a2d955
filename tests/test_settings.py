"""One place reads the environment, with one rule; one validator checks option values."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from loopwatch.instrumentation.runtime.settings import ENVIRONMENT, env_bool, env_int, env_str
from loopwatch.instrumentation.runtime.validate import (
    check_choice,
    check_int,
    check_number,
    check_url,
)

ROOT = Path(__file__).resolve().parent.parent


def test_blank_means_not_given_and_invalid_is_an_error() -> None:
    env = {"A": "  ", "B": " 7 ", "C": "seven", "D": "On", "E": "maybe"}
    assert env_str("A", env) is None and env_str("missing", env) is None
    assert env_str("B", env) == "7"
    assert env_int("A", 3, environ=env) == 3
    assert env_int("B", 3, minimum=1, environ=env) == 7
    with pytest.raises(ValueError, match=r"^C must be an integer, got 'seven'$"):
        env_int("C", 3, environ=env)
    with pytest.raises(ValueError, match=r"^B must be an integer in 0\.\.5, got 7$"):
        env_int("B", 3, minimum=0, maximum=5, environ=env)
    assert env_bool("D", False, env) is True and env_bool("A", True, env) is True
    with pytest.raises(ValueError, match=r"^E must be true or false, got 'maybe'$"):
        env_bool("E", False, env)


def test_one_phrasing_for_every_option() -> None:
    with pytest.raises(ValueError, match=r"^x must be a positive integer, got 0$"):
        check_int("x", 0, minimum=1)
    with pytest.raises(ValueError, match=r"^x must be a positive integer or None, got True$"):
        check_int("x", True, minimum=1, optional=True)
    assert check_int("x", None, minimum=1, optional=True) is None
    with pytest.raises(ValueError, match=r"^x must be a finite number >= 0, got nan$"):
        check_number("x", float("nan"))
    with pytest.raises(ValueError, match=r"^x must be a positive number or None, got 0$"):
        check_number("x", 0, positive=True, optional=True)
    with pytest.raises(ValueError, match=r"^x must be a number in \(0, 1\] or None, got 1.5$"):
        check_number("x", 1.5, positive=True, maximum=1, optional=True)
    with pytest.raises(ValueError, match=r"^x must be one of 'a', 'b', got 'c'$"):
        check_choice("x", "c", ("a", "b"))
    for bad in ("not a url", "ftp://x", "http://", "localhost:4318"):
        with pytest.raises(ValueError, match=r"^x must be an http\(s\) URL"):
            check_url("x", bad)
    assert check_url("x", "https://h:4318/v1/traces") == "https://h:4318/v1/traces"


def test_every_variable_named_in_the_code_is_listed() -> None:
    named = set()
    for folder in ("instrumentation", "queries", "dashboard"):
        for path in (ROOT / folder).rglob("*.py"):
            named |= set(re.findall(r'"((?:LOOPWATCH|OTEL)_[A-Z_]+)"', path.read_text()))
    assert named <= set(ENVIRONMENT), sorted(named - set(ENVIRONMENT))


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read ``os.environ`` / ``os.getenv``; setting a variable is not a read."""
    writes = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in ("environ", "getenv")
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
        and id(node) not in writes
    ]


def test_only_the_settings_module_reads_the_environment() -> None:
    allowed = {
        "instrumentation/runtime/settings.py",
        "dashboard/demo/runner.py",  # copies the environment for its child processes
    }
    readers = {}
    for folder in ("instrumentation", "queries", "dashboard"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            lines = _environment_reads(ast.parse(path.read_text(encoding="utf-8")))
            if lines and rel not in allowed:
                readers[rel] = lines
    assert readers == {}
