"""Every Python snippet of docs/integrations/*.md runs, against local fakes only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from wire_server import Reply, wire_server

DOCS = Path(__file__).resolve().parent.parent / "docs" / "integrations"
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _run_page(name: str) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{name}"}
    blocks = _BLOCK.findall((DOCS / name).read_text(encoding="utf-8"))
    assert blocks, f"{name} has no python snippet"
    for block in blocks:
        exec(compile(block, f"docs/integrations/{name}", "exec"), namespace)


def test_every_integration_page_is_tested_here() -> None:
    pages = sorted(p.name for p in DOCS.glob("*.md") if _BLOCK.search(p.read_text("utf-8")))
    assert pages == ["clients.md", "langgraph.md", "openai-agents.md", "pydantic-ai.md"]


def test_clients_page(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"order_id": "A-17"})},
    }

    def chat(message: dict[str, object], finish: str) -> dict[str, object]:
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
        }

    claude = {"id": "m", "type": "message", "role": "assistant", "model": "claude-opus-5",
              "content": [{"type": "text", "text": "It has shipped."}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip
    with wire_server(
        Reply(body=chat({"role": "assistant", "content": None, "tool_calls": [call]},
                        "tool_calls")),
        Reply(body=chat({"role": "assistant", "content": "Order A-17 has shipped."}, "stop")),
        Reply(body=claude),
    ) as server:  # fmt: skip
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        _run_page("clients.md")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("completed Order A-17 has shipped. Usage(input_tokens=2000")
    assert "cost_usd=0.007" in lines[0]  # 2000 × $2.50/M + 200 × $10/M
    assert lines[1] == "completed It has shipped."


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("pydantic-ai.md", "Order A-17 has shipped. completed 2"),
        ("langgraph.md", "Order A-17 has shipped. completed"),
        ("openai-agents.md", "Order A-17 has shipped. completed"),
    ],
)
def test_framework_pages(page: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    _run_page(page)
    assert capsys.readouterr().out.strip().splitlines()[-1] == expected
