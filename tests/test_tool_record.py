"""One tool-call record from execution to span to replay, and one argument parser
(docs/architecture.md, "One tool call's record"; docs/tools.md, "Arguments")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from foreign_spans import body, span
from loopwatch.instrumentation import LoopGuard, LoopLimits, ToolOutcome, ToolRecord, ToolRegistry
from loopwatch.instrumentation.runtime import detectors
from loopwatch.instrumentation.runtime.arguments import comparable_arguments, parse_arguments
from loopwatch.instrumentation.runtime.completion import done_answer
from loopwatch.instrumentation.runtime.decisions import StepReport
from loopwatch.instrumentation.runtime.fingerprint import (
    call_fingerprint,
    compare_exactly,
    result_fingerprint,
)
from loopwatch.instrumentation.runtime.replay import (
    RecordedCall,
    RecordedStep,
    fingerprinted,
    replay,
    replay_peaks,
)
from loopwatch.instrumentation.runtime.retry import ToolError
from loopwatch.instrumentation.runtime.types import ModelResponse, ToolCall
from loopwatch.queries.ingest.foreign import ForeignOptions, TraceAssembler, conventions, views_of
from loopwatch.queries.ingest.foreign.conventions import SpanView, tool_content
from loopwatch.queries.ingest.importer import import_chat_log
from loopwatch.queries.ingest.otlp import decode_request
from loopwatch.queries.store.columns import SpanBatch
from loopwatch.queries.store.database import Store


def test_the_observer_record_is_the_execution_record() -> None:
    assert ToolRecord is ToolOutcome
    assert detectors.RecordedStep is RecordedStep and detectors.replay is replay


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool()
    def read_file(path: str) -> str:
        """Read a file."""
        return f"text of {path} at 10:00:0{len(path) % 10}"

    return registry


def test_a_progress_signal_gets_the_registrys_own_record() -> None:
    registry = _registry()
    reports: list[StepReport] = []
    guard = LoopGuard(
        LoopLimits(max_steps=3), registry=registry, progress=lambda r: reports.append(r) or True
    )
    call = ToolCall("c1", "read_file", {"path": "a.py"})
    guard.before_step()
    guard.after_model(ModelResponse(_assistant(call), "tool_use"))
    guard.before_tool(call)
    outcome = registry.execute(call)
    guard.after_tool(call, outcome)
    guard.end_step()
    (record,) = reports[0].tools
    assert record is outcome  # not converted: nothing had to be added
    assert record.status == "ok" and record.retries == 0 and record.fingerprint == ""


class _Recording:
    def __init__(self) -> None:
        self.records: list[ToolOutcome] = []

    def tool_call_ended(self, record: ToolOutcome, budget: Any) -> None:
        self.records.append(record)

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def test_an_observer_gets_the_record_with_its_fingerprints() -> None:
    registry = _registry()
    seen = _Recording()
    guard = LoopGuard(LoopLimits(max_steps=3), registry=registry, observer=seen)
    call = ToolCall("c1", "read_file", {"path": "a.py"})
    guard.before_step()
    guard.after_model(ModelResponse(_assistant(call), "tool_use"))
    guard.before_tool(call)
    outcome = registry.execute(call)
    guard.after_tool(call, outcome)
    (record,) = seen.records
    assert isinstance(record, ToolOutcome) and record.call is call
    assert record.content == outcome.content and record.attempts == outcome.attempts
    assert record.fingerprint == call_fingerprint(call)
    # the result's fingerprint normalizes the volatile time, like result_fingerprint
    assert record.result_fingerprint == result_fingerprint(outcome.content, "read_file")
    assert record.error_fingerprint is None and record.status == "ok"


def _assistant(call: ToolCall) -> Any:
    from loopwatch.instrumentation.runtime.types import Message

    return Message("assistant", None, (call,))


def test_the_older_record_builds_the_one_record() -> None:
    # RecordedCall, once a record of its own, is a deprecated constructor of ToolOutcome
    old = RecordedCall("book", {"n": 1}, "sold out", ok=False, error_code="SOLD_OUT", error_id="e")
    assert old == ToolOutcome(
        call=ToolCall("", "book", {"n": 1}),
        ok=False,
        content="sold out",
        error_code="SOLD_OUT",
        error_fingerprint="e",
    )
    assert detectors.RecordedCall is RecordedCall


def test_a_tools_exemption_is_the_runs_not_the_calls() -> None:
    polls = [
        RecordedStep(i + 1, [ToolOutcome(call=ToolCall("", "poll", {}), ok=True, content="busy")])
        for i in range(4)
    ]
    found = replay(polls, LoopLimits())
    assert found is not None and found.reason.value == "repeated_action"
    # as RunConfig.repeat_exempt says it to the guard
    assert replay(polls, LoopLimits(), repeat_exempt=("poll",)) is None
    assert replay_peaks(polls, repeat_exempt=["poll"])["repeated_tool_call"] == 0
    with pytest.raises(TypeError, match=r"repeat_exempt=\('poll',\) to replay\(\)"):
        RecordedCall("poll", {}, "busy", exempt=True)


def test_a_recorded_error_fingerprint_is_the_failures_identity() -> None:
    # three different messages, one recorded identity: one error three times
    steps = [
        RecordedStep(
            i + 1,
            [
                ToolOutcome(
                    call=ToolCall("", "book", f"fp-{i}"),
                    ok=False,
                    content=f"res-{i}",
                    error_code="SOLD_OUT",
                    error_fingerprint="efp",
                )
            ],
        )
        for i in range(3)
    ]
    assert replay_peaks(steps)["repeated_error"] == 3


def test_one_parser_underneath_the_detectors_arguments() -> None:
    assert detectors.parse_arguments is comparable_arguments  # the old name, deprecated
    assert detectors.comparable_arguments is comparable_arguments
    assert comparable_arguments('{"b": 1, "a": [1, 2]}') == parse_arguments('{"a":[1,2],"b":1}')
    args = {"path": "a"}
    assert comparable_arguments(args) is args  # the guard's usual case: no copy
    assert comparable_arguments(None) == comparable_arguments("  ") == {}
    # what the one parser refuses is compared as sent
    assert comparable_arguments("[1, 2]") == "[1, 2]"
    assert comparable_arguments("0123456789abcdef") == "0123456789abcdef"
    assert comparable_arguments("{not json") == "{not json"


def test_the_done_answer_reads_the_same_parse() -> None:
    assert done_answer(ToolCall("d", "done", '{"answer": "42"}')) == "42"
    assert done_answer(ToolCall("d", "done", "plain words")) == "plain words"
    assert done_answer(ToolCall("d", "done", {"result": 1})) == '{"result":1}'


# --- one call, one fingerprint: live, replayed, imported, foreign -----------------------------

# (tool, arguments as the guard gets them, the same arguments as a log or a span records them,
# what the tool does). Text spelled otherwise than the object: key order, spaces, blank text.
CALLS: list[tuple[str, dict[str, Any], str, Any]] = [
    ("read_file", {"path": "src/a.ts", "limit": 5}, '{"limit": 5, "path": "src/a.ts"}', "ok"),
    ("read_file", {"path": "src/gone.ts"}, ' {"path":"src/gone.ts"} ', "fail"),
    ("list_dir", {}, "  ", "ok"),
    ("counter", {"name": "jobs"}, '{"name":"jobs"}', "ok"),  # compares exactly: no normalizing
]


def _live_records() -> list[ToolOutcome]:
    """The guard's records of CALLS (what the execute_tool spans of a live run carry)."""
    registry = ToolRegistry(breaker=None)

    def tool(tool_call_id: str, **arguments: Any) -> str:
        if tool_call_id == "c1":
            raise ToolError("NOT_FOUND", "no such file: src/gone.ts")
        return f"{tool_call_id} answered {sorted(arguments)} at 10:00:0{tool_call_id[1]}"

    for name in ("read_file", "list_dir", "counter"):
        registry.register(tool, name=name, parameters={"type": "object"})
    seen = _Recording()
    guard = LoopGuard(LoopLimits(max_steps=10), registry=registry, observer=seen)
    for k, (name, args, _text, _does) in enumerate(CALLS):
        call = ToolCall(f"c{k}", name, args)
        guard.before_step()
        guard.after_model(ModelResponse(_assistant(call), "tool_calls"))
        guard.before_tool(call)
        guard.after_tool(call, registry.execute(call))
        guard.end_step()
    return seen.records


def _chat_log(path: Path, records: list[ToolOutcome]) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for k, ((name, _args, text, _does), record) in enumerate(zip(CALLS, records, strict=True)):
        function = {"name": name, "arguments": text}
        messages.append(
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": f"c{k}", "type": "function", "function": function}]}
        )  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": record.content})
    messages.append({"role": "assistant", "content": "done"})
    path.write_text(json.dumps({"id": "one", "messages": messages}) + "\n", encoding="utf-8")


def _foreign_trace(records: list[ToolOutcome]) -> bytes:
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder"}
    spans = [span(7, 1, None, "invoke_agent coder", 0, 1000, agent)]
    for k, ((name, _args, text, _does), record) in enumerate(zip(CALLS, records, strict=True)):
        chat = {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": ["tool_calls"]}
        spans.append(span(7, 2 + 2 * k, 1, "chat m", 100 * k, 100 * k + 10, chat))
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": f"c{k}",
            "gen_ai.tool.call.arguments": text,
            "gen_ai.tool.call.result": record.content,
        }
        failure = None if record.ok else (record.error_code or "", record.error_message or "")
        spans.append(
            span(7, 3 + 2 * k, 1, f"execute_tool {name}", 100 * k + 20, 100 * k + 30, attrs,
                 error=failure and failure[1], exception=failure)
        )  # fmt: skip
    return body(spans)


def _stored(store: Store) -> list[tuple[str, str, str | None]]:
    sql = (
        "SELECT tool_fingerprint, result_fingerprint, error_fingerprint FROM spans "
        "WHERE operation = 'execute_tool' ORDER BY start_ns"
    )
    return [tuple(r) for r in store.cursor().execute(sql).fetchall()]


def test_one_call_has_one_fingerprint_live_replayed_imported_and_foreign(tmp_path: Path) -> None:
    compare_exactly(["counter"])
    try:
        live = _live_records()
        assert not live[1].ok and live[1].error_code == "NOT_FOUND"
        expected = [(r.fingerprint, r.result_fingerprint, r.error_fingerprint) for r in live]
        # a replay's record of the call as a log spells it
        replayed = [
            fingerprinted(
                ToolOutcome(
                    call=ToolCall("", name, text),
                    ok=r.ok,
                    content=r.content,
                    error_code=r.error_code,
                    error_message=r.error_message,
                )
            )
            for (name, _args, text, _does), r in zip(CALLS, live, strict=True)
        ]
        assert [(r.fingerprint, r.result_fingerprint, r.error_fingerprint) for r in replayed] == (
            expected
        )
        log = tmp_path / "log.jsonl"
        _chat_log(log, live)
        with Store(tmp_path / "imported.duckdb") as store:
            import_chat_log(log, store)
            assert _stored(store) == expected
        with Store(tmp_path / "foreign.duckdb") as store:
            assembler = TraceAssembler(ForeignOptions(grace_s=0.0), lambda: 100.0)
            decoded = decode_request(_foreign_trace(live), "application/json")
            store.write(SpanBatch.from_columns(decoded.columns))
            assembler.add(views_of(decoded.columns))
            tables = assembler.tables(everything=True)
            assert tables is not None
            store.write_derived(*tables)
            assert _stored(store) == expected
    finally:
        compare_exactly(["counter"], exact=False)


def test_the_foreign_path_parses_arguments_with_the_one_parser() -> None:
    assert conventions.parse_arguments is comparable_arguments  # the old name, deprecated
    view = SpanView("t", "s", None, "execute_tool ls", 0, 1, "tool", tool_name="ls")
    blank: str | dict[str, Any] | None
    for blank in (None, "  ", "\n", {}):
        tool_content(view, blank, None)
        assert view.call_fp == call_fingerprint("ls", {})  # no arguments, however recorded
    tool_content(view, '{"b": 1, "a": 2}', "x")
    assert view.call_fp == call_fingerprint(ToolCall("", "ls", {"a": 2, "b": 1}))


def test_the_openai_agents_hooks_read_arguments_with_the_one_parser() -> None:
    pytest.importorskip("agents")
    import asyncio
    from types import SimpleNamespace

    from loopwatch.instrumentation.integrations.openai_agents import LoopwatchRunHooks

    hooks = LoopwatchRunHooks(limits=LoopLimits(max_steps=5))
    agent = SimpleNamespace(name="a")
    sent = {"c1": "  ", "c2": '{"b": 1, "a": 2}', "c3": "[" * 100_000, "c4": "not json"}
    for call_id, raw in sent.items():
        context = SimpleNamespace(tool_call_id=call_id, tool_name="t", tool_arguments=raw)
        asyncio.run(hooks.on_tool_start(context, agent, None))
    # as the model clients read them (clients.base.tool_call_arguments): blank text is no
    # arguments, text nested too deeply to parse is kept as sent instead of raising
    held = {k: c.arguments for k, c in hooks._calls.items()}
    assert held == {"c1": {}, "c2": {"a": 2, "b": 1}, "c3": "[" * 100_000, "c4": "not json"}


def test_blank_arguments_have_the_fingerprint_of_no_arguments_live_and_recorded() -> None:
    from loopwatch.instrumentation.runtime.fingerprint import call_fingerprint
    from loopwatch.instrumentation.runtime.replay import call_fingerprints
    from loopwatch.instrumentation.runtime.types import ToolCall

    none = call_fingerprint(ToolCall("1", "search", {}))
    for blank in ("", "  ", "\n\t"):
        assert call_fingerprint(ToolCall("1", "search", blank)) == none
        assert call_fingerprints("search", blank, "")[0] == none
    assert call_fingerprint(ToolCall("1", "search", "x")) != none


def test_arguments_nested_too_deeply_get_a_fingerprint_not_an_error() -> None:
    from loopwatch.instrumentation.runtime.fingerprint import call_fingerprint
    from loopwatch.instrumentation.runtime.replay import call_fingerprints
    from loopwatch.instrumentation.runtime.types import ToolCall

    def nested(depth: int, leaf: int) -> dict[str, object]:
        top: dict[str, object] = {}
        here = top
        for _ in range(depth):
            here["a"] = {}
            here = here["a"]  # type: ignore[assignment]
        here["leaf"] = leaf
        return top

    text = "[" * 100_000 + "]" * 100_000
    assert len(call_fingerprint(ToolCall("1", "t", text))) == 16
    assert len(call_fingerprints("t", "{" * 100_000, "")[0]) == 16
    deep_one, deep_two = nested(5_000, 1), nested(5_000, 2)
    assert call_fingerprint(ToolCall("1", "t", deep_one)) == call_fingerprint(
        ToolCall("2", "t", nested(5_000, 1))
    )
    assert call_fingerprint(ToolCall("1", "t", deep_one)) != call_fingerprint(
        ToolCall("1", "t", deep_two)
    )
