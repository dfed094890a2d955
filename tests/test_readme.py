"""Every Python example of the README runs, and prints what the README shows (so do the examples
of docs/runtime.md that show their output).

The expected output of a ``print(...)`` is written in the block as the comment lines right after
it (``# ...``); it is compared with what the block really printed, whitespace folded (the README
wraps long lines)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopwatch.instrumentation.runtime.observer import get_observer_factory, set_observer_factory
from wire_server import Reply, wire_server

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
RUNTIME_DOC = (ROOT / "docs/runtime.md").read_text(encoding="utf-8")


def expected_output(block: str) -> str:
    shown: list[str] = []
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("print("):
            for after in lines[i + 1 :]:
                if not after.startswith("# "):
                    break
                shown.append(after[2:])
    return " ".join(" ".join(shown).split())


def test_the_readme_has_examples_that_show_their_output() -> None:
    assert len(BLOCKS) >= 3
    assert sum(1 for b in BLOCKS if expected_output(b)) >= 2


def _showing(text: str) -> list[str]:
    return [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if expected_output(b)]


def _chat(message: dict[str, object], finish: str) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
    }


@contextlib.contextmanager
def _provider_for(block: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An example that calls OpenAI talks to a local server speaking its wire format."""
    if "OpenAIChatClient(" not in block:
        yield
        return
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"order_id": "A-17"})},
    }
    replies = (
        Reply(
            body=_chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
        ),
        Reply(body=_chat({"role": "assistant", "content": "Order A-17 has shipped."}, "stop")),
    )
    with wire_server(*replies) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield


@pytest.mark.parametrize(
    "block",
    BLOCKS + _showing(RUNTIME_DOC),
    ids=[f"README-{i}" for i in range(len(BLOCKS))]
    + [f"runtime-{i}" for i in range(len(_showing(RUNTIME_DOC)))],
)
def test_readme_example_runs_and_prints_what_it_shows(
    block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # examples read and write files relative to where they run
    # Never a fixed port in tests: 0 picks a free one.
    code = re.sub(r"metrics_port=\d+", "metrics_port=0", block)
    out = io.StringIO()
    before = get_observer_factory()
    try:
        with _provider_for(block, monkeypatch), contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    finally:
        set_observer_factory(before)
    printed = " ".join(out.getvalue().split())
    assert printed == expected_output(block) or not expected_output(block), printed
    if "print(" in block:
        assert expected_output(block), "a printing example shows what it prints"
