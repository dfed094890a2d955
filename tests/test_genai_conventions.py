"""Spans against the OTel GenAI conventions of the pinned version (tests/data), the
OpenInference kinds, the cost attributes backends read, the error rule, captured content."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.reasons import (
    ERROR_OUTCOMES,
    OUTCOME_OF,
    Outcome,
    StopReason,
)
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, ToolCall, Usage
from loopwatch.instrumentation.telemetry.tracing import (
    OTelObserverFactory,
    cap_content,
    is_error_outcome,
    resolve_content_max_chars,
)
from loopwatch.instrumentation.testing import FakeModel
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

CONVENTIONS = json.loads(
    (Path(__file__).parent / "data" / f"genai_semconv_v{sc.GENAI_SEMCONV_VERSION}.json").read_text()
)


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


class Gpt(FakeModel):
    """A scripted model that names its provider, as the real clients do."""

    provider = "openai"
    model = "gpt-4o"


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up by its id."""
        if order_id == "bad":
            return {"error": "no such order", "code": "NOT_FOUND"}
        return {"order_id": order_id, "status": "shipped"}

    return registry


def _response(content: str | None, calls: tuple[ToolCall, ...] = (), stop: str = "end_turn"):
    return ModelResponse(
        Message("assistant", content, calls),
        stop,
        Usage(100, 20, 0.0125),
        model="gpt-4o-2024-08-06",
        response_id="chatcmpl-1",
        provider="openai",
    )


def _spans(tp: TracerProvider, exporter: InMemorySpanExporter, **kw: Any) -> list[ReadableSpan]:
    script = [
        _response(None, (ToolCall("c1", "lookup", {"order_id": "bad"}),), "tool_calls"),
        _response(None, (ToolCall("c2", "lookup", {"order_id": "A1"}),), "tool_calls"),
        _response("Shipped."),
    ]
    run(
        Gpt(script), _registry(), "Where is A1?", system="You help with orders.",
        observer_factory=OTelObserverFactory(tp, **kw), conversation_id="conv-7",
        agent_name="support",
    )  # fmt: skip
    return list(exporter.get_finished_spans())


def _kind(span: ReadableSpan) -> str:
    return span.name.split()[0]


def test_every_span_kind_has_the_conventions_required_and_recommended_attributes(
    provider: Any,
) -> None:
    tp, exporter = provider
    spans = _spans(tp, exporter)
    seen = set()
    for span in spans:
        kind = _kind(span)
        if kind not in CONVENTIONS["spans"]:
            continue
        seen.add(kind)
        spec = CONVENTIONS["spans"][kind]
        unavailable = set(CONVENTIONS["not_available"][kind])
        attrs = dict(span.attributes or {})
        for key in spec["required"]:
            assert key in attrs, f"{span.name}: required {key} missing"
        wanted = [*spec["recommended"], *spec["conditionally_required"]]
        for key in wanted:
            if key in unavailable or key == "error.type":
                continue
            assert key in attrs, f"{span.name}: {key} missing (and not listed as unavailable)"
        # Nothing listed as unavailable is something we set after all (the list stays honest).
        assert not unavailable & attrs.keys(), f"{span.name}: {unavailable & attrs.keys()}"
        # Opt-in content stays off without the switch.
        assert not set(spec["opt_in"]) & attrs.keys()
    assert seen == {"invoke_agent", "chat", "execute_tool"}


def test_values_provider_conversation_models_and_tools(provider: Any) -> None:
    tp, exporter = provider
    spans = _spans(tp, exporter)
    run_span = next(s for s in spans if _kind(s) == "invoke_agent")
    chats = [s for s in spans if _kind(s) == "chat"]
    tools = [s for s in spans if _kind(s) == "execute_tool"]
    ra = run_span.attributes or {}
    assert ra[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert ra[sc.GEN_AI_CONVERSATION_ID] == ra[sc.OI_SESSION_ID] == "conv-7"
    assert ra[sc.GEN_AI_REQUEST_MODEL] == "gpt-4o"
    assert list(ra[sc.GEN_AI_RESPONSE_FINISH_REASONS]) == ["end_turn"]
    for chat in chats:
        a = chat.attributes or {}
        assert chat.name == "chat gpt-4o"
        assert a[sc.GEN_AI_REQUEST_MODEL] == "gpt-4o"  # what was asked for
        assert a[sc.GEN_AI_RESPONSE_MODEL] == "gpt-4o-2024-08-06"  # what answered
        assert a[sc.GEN_AI_RESPONSE_ID] == "chatcmpl-1"
        assert a[sc.GEN_AI_CONVERSATION_ID] == "conv-7"
        # cost: loopwatch's own, Langfuse's and OpenInference's, all the same figure
        assert a[sc.COST_USD] == a[sc.GEN_AI_USAGE_COST] == a[sc.OI_COST_TOTAL] == 0.0125
        assert a[sc.OI_TOKEN_COUNT_PROMPT] == 100 and a[sc.OI_TOKEN_COUNT_COMPLETION] == 20
        assert a[sc.OI_LLM_MODEL_NAME] == "gpt-4o-2024-08-06" and a[sc.OI_LLM_PROVIDER] == "openai"
    # The run's total is not repeated under the backends' cost keys: they sum the calls.
    assert sc.GEN_AI_USAGE_COST not in ra and sc.OI_COST_TOTAL not in ra
    for tool in tools:
        a = tool.attributes or {}
        assert a[sc.GEN_AI_TOOL_TYPE] == "function"
        assert a[sc.GEN_AI_TOOL_DESCRIPTION] == "Look an order up by its id."
    failed = next(t for t in tools if (t.attributes or {}).get(sc.TOOL_STATUS) == "error")
    assert failed.attributes[sc.ERROR_TYPE] == "NOT_FOUND"  # type: ignore[index]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description is None  # not a repeat of error.type
    kinds = {_kind(s): (s.attributes or {})[sc.OI_SPAN_KIND] for s in spans}
    assert kinds == {
        "invoke_agent": "AGENT",
        "step": "CHAIN",
        "chat": "LLM",
        "execute_tool": "TOOL",
    }


def test_a_model_that_names_no_provider_says_unknown(provider: Any) -> None:
    tp, exporter = provider
    run(FakeModel(["hi"]), ToolRegistry(), "hello", observer_factory=OTelObserverFactory(tp))
    spans = exporter.get_finished_spans()
    for span in spans:
        if _kind(span) in ("invoke_agent", "chat"):
            assert (span.attributes or {})[sc.GEN_AI_PROVIDER_NAME] == sc.PROVIDER_UNKNOWN


def test_the_response_names_the_provider_when_the_model_object_does_not(provider: Any) -> None:
    tp, exporter = provider
    run(FakeModel([_response("hi")]), ToolRegistry(), "x", observer_factory=OTelObserverFactory(tp))
    run_span = next(s for s in exporter.get_finished_spans() if _kind(s) == "invoke_agent")
    assert (run_span.attributes or {})[sc.GEN_AI_PROVIDER_NAME] == "openai"


def test_content_capture_records_inputs_system_tools_and_caps_them(provider: Any) -> None:
    tp, exporter = provider
    spans = _spans(tp, exporter, capture_content=True, content_max_chars=0)
    chats = [s for s in spans if _kind(s) == "chat"]
    first = chats[0].attributes or {}
    assert json.loads(first[sc.GEN_AI_SYSTEM_INSTRUCTIONS]) == [  # type: ignore[arg-type]
        {"type": "text", "content": "You help with orders."}
    ]
    inputs = json.loads(first[sc.GEN_AI_INPUT_MESSAGES])  # type: ignore[arg-type]
    assert inputs == [{"role": "user", "parts": [{"type": "text", "content": "Where is A1?"}]}]
    tools = json.loads(first[sc.GEN_AI_TOOL_DEFINITIONS])  # type: ignore[arg-type]
    assert tools[0]["name"] == "lookup" and tools[0]["type"] == "function"
    assert tools[0]["description"] == "Look an order up by its id."
    # The last call was sent the whole conversation, tool results included.
    last = chats[-1].attributes or {}
    parsed = json.loads(str(last[sc.GEN_AI_INPUT_MESSAGES]))
    assert [m["role"] for m in parsed] == ["user", "assistant", "tool", "assistant", "tool"]
    assert parsed[2]["parts"][0]["type"] == "tool_call_response"
    assert json.loads(str(last[sc.GEN_AI_OUTPUT_MESSAGES]))[0]["finish_reason"] == "end_turn"
    assert sc.CONTENT_TRUNCATED not in last


def test_capped_content_says_where_it_was_cut(provider: Any) -> None:
    tp, exporter = provider
    big = "x" * 5000
    registry = ToolRegistry()

    @registry.tool
    def dump() -> str:
        """Return a lot."""
        return big

    script = [_response(None, (ToolCall("c1", "dump", {}),), "tool_calls"), _response("ok")]
    run(
        Gpt(script), registry, "go",
        observer_factory=OTelObserverFactory(tp, capture_content=True, content_max_chars=1000),
    )  # fmt: skip
    tool = next(s for s in exporter.get_finished_spans() if _kind(s) == "execute_tool")
    a = tool.attributes or {}
    result = str(a[sc.GEN_AI_TOOL_CALL_RESULT])
    assert result.startswith("x" * 1000)
    assert result.endswith("…[truncated at 1000 of 5000 chars]")
    assert list(a[sc.CONTENT_TRUNCATED]) == [sc.GEN_AI_TOOL_CALL_RESULT]


def test_cap_content_and_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cap_content("abc", 0) == ("abc", False)
    assert cap_content("abc", 3) == ("abc", False)
    assert cap_content("abcd", 3) == ("abc…[truncated at 3 of 4 chars]", True)
    monkeypatch.delenv(sc.CONTENT_MAX_CHARS_ENV, raising=False)
    assert resolve_content_max_chars() == sc.CONTENT_MAX_CHARS_DEFAULT
    monkeypatch.setenv(sc.CONTENT_MAX_CHARS_ENV, "0")
    assert resolve_content_max_chars() == 0
    assert resolve_content_max_chars(12) == 12
    monkeypatch.setenv(sc.CONTENT_MAX_CHARS_ENV, "lots")
    with pytest.raises(ValueError, match=r"LOOPWATCH_CONTENT_MAX_CHARS must be an integer >= 0"):
        resolve_content_max_chars()
    with pytest.raises(ValueError, match=r"content_max_chars must be an integer >= 0, got -1"):
        resolve_content_max_chars(-1)


@pytest.mark.parametrize("reason", list(StopReason))
def test_one_error_rule_per_outcome_group(provider: Any, reason: StopReason) -> None:
    from loopwatch.instrumentation.runtime.limits import LoopLimits
    from loopwatch.instrumentation.runtime.observer import BudgetSnapshot, RunInfo
    from loopwatch.instrumentation.runtime.types import RunResult

    tp, exporter = provider
    info = RunInfo("r", "t", "a", LoopLimits(), "v")
    snap = BudgetSnapshot(dict.fromkeys(sc.BUDGETS, 0.0), dict.fromkeys(sc.BUDGETS), 0.0)
    obs = OTelObserverFactory(tp)(info)
    obs.run_started(info, snap)
    outcome = OUTCOME_OF[reason]
    result = RunResult([], [], None, reason, outcome, Usage(), f"stopped: {reason}")
    obs.run_ended(result, snap)
    span = exporter.get_finished_spans()[-1]
    error = outcome in (Outcome.STUCK, Outcome.MODEL, Outcome.ERROR)
    assert is_error_outcome(outcome) is error and (outcome in ERROR_OUTCOMES) is error
    assert (span.status.status_code is StatusCode.ERROR) is error
    assert ((span.attributes or {}).get(sc.ERROR_TYPE) == str(reason)) is error
    if not error:
        assert sc.ERROR_TYPE not in (span.attributes or {})
        assert span.status.status_code is StatusCode.UNSET
