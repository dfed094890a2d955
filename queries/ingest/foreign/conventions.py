"""What a span from another instrumentation says, read in each convention's own attributes.

:func:`views_of` turns the spans of one batch into :class:`SpanView` objects: the role of the
span in an agent loop (agent run, model call, tool call, or other), and what the loop needs of
it — names, usage, finish reasons, tool arguments and results, errors — whichever of these
conventions recorded it (docs/serve.md, "Spans from agents that do not use loopwatch"):

* OpenTelemetry GenAI semantic conventions: ``gen_ai.operation.name`` (``invoke_agent``,
  ``chat``, ``execute_tool`` ...), ``gen_ai.*`` usage, finish reasons and tool attributes, and
  the older ``gen_ai.system`` / ``gen_ai.usage.prompt_tokens`` names;
* OpenInference: ``openinference.span.kind`` (``AGENT``, ``LLM``, ``TOOL``), ``llm.*``,
  ``tool.name``, ``input.value`` / ``output.value``;
* OpenLLMetry: ``traceloop.span.kind``, ``traceloop.entity.*``, ``llm.request.type``,
  ``gen_ai.completion.N.*``.

Spans that carry ``loopwatch.run_id`` are loopwatch's own and are left out: their runs need no
reconstruction.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final

from loopwatch.instrumentation.runtime import semconv as sc
from loopwatch.instrumentation.runtime.arguments import comparable_arguments
from loopwatch.instrumentation.runtime.replay import call_fingerprints

from ...store.columns import EventRecord, SpanColumns

__all__ = [
    "AGENT", "MODEL", "TOOL", "SpanView", "last_line", "parse_arguments", "tool_content",
    "views_of",
]  # fmt: skip

AGENT: Final = "agent"
MODEL: Final = "model"
TOOL: Final = "tool"

_MODEL_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content", "completion"})
_OI_ROLES: Final = {"AGENT": AGENT, "LLM": MODEL, "TOOL": TOOL}
_TRACELOOP_ROLES: Final = {"agent": AGENT, "tool": TOOL}
_INPUT_KEYS: Final = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                      "llm.token_count.prompt", "llm.usage.prompt_tokens")  # fmt: skip
_OUTPUT_KEYS: Final = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                       "llm.token_count.completion", "llm.usage.completion_tokens")  # fmt: skip
_MODEL_KEYS: Final = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name",
                      "llm.request.model")  # fmt: skip
_AGENT_KEYS: Final = ("gen_ai.agent.name", "agent.name", "agent_name", "traceloop.entity.name")
_TOOL_KEYS: Final = ("gen_ai.tool.name", "tool.name", "tool_name", "traceloop.entity.name")
_ARG_KEYS: Final = ("gen_ai.tool.call.arguments", "tool_arguments", "input.value",
                    "traceloop.entity.input")  # fmt: skip
_RESULT_KEYS: Final = ("gen_ai.tool.call.result", "tool_response", "output.value",
                       "traceloop.entity.output")  # fmt: skip
_COST_KEYS: Final = ("gen_ai.usage.cost", "llm.cost.total", "operation.cost",
                     "loopwatch.usage.cost_usd")  # fmt: skip
# The GenAI conventions' own finish-reason values, where they differ from the providers'.
_SEMCONV_FINISH: Final = {"tool_call": "tool_calls"}
_CONVERSATION_KEYS: Final = ("gen_ai.conversation.id", "session.id")


@dataclass(slots=True)
class SpanView:
    """One foreign span as the loop reconstruction reads it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    role: str | None
    """``agent``, ``model``, ``tool``, or ``None`` for any other span (kept for the tree)."""
    error: bool = False
    """The span's status is ERROR."""
    status_message: str | None = None
    service: str | None = None
    agent_name: str | None = None
    model: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    call_fp: str | None = None
    """The call fingerprint (tool name and arguments), as loopwatch's tool spans carry it."""
    result_fp: str | None = None
    """The result fingerprint; ``None`` when the instrumentation captured no result."""
    result: str | None = None
    """The result's last line (at most 200 characters), to name a failure by; the full
    arguments and result are not held (fingerprints say what the detectors need)."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    finish_reasons: tuple[str, ...] = ()
    exceptions: tuple[tuple[str, str], ...] = ()
    """(type, message) of each exception the span recorded, plus ``error.type``."""
    conversation_id: str | None = None
    step_limit: int | None = None
    """A step limit the framework recorded on its agent span (smolagents' ``max_steps``)."""
    labels: tuple[tuple[str, str], ...] = ()
    """Values of the attributes asked for as task type (key, value), in the span."""

    def __reduce__(self) -> tuple[type[SpanView], tuple[Any, ...]]:
        # Pickled as its fields in order (serve's decoder processes send views back): loads
        # ~1.5x faster, and dumps ~2x, than a slotted dataclass's default state.
        return (type(self), _fields_of(self))


_fields_of: Final = attrgetter(*(f.name for f in dataclasses.fields(SpanView)))


def _first(attrs: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) is str and value.isdigit():
        return int(value)
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _tool_result(text: str | None) -> str | None:
    """A LangChain ``ToolMessage`` as OpenInference records it (its JSON, with a call id that
    differs every call) → the content the model got."""
    if text is None or not text.startswith('{"type": "tool"'):
        return text
    try:
        data = json.loads(text)
    except ValueError:
        return text
    content = data.get("data", {}).get("content") if isinstance(data, dict) else None
    return _text(content) if content is not None else text


parse_arguments = comparable_arguments
"""Deprecated: the foreign path's own parser, now the one parser's
:func:`~loopwatch.instrumentation.runtime.arguments.comparable_arguments` (docs/foreign.md,
"Fingerprints")."""


def last_line(text: str) -> str:
    """The last non-empty line of ``text``'s last 2,000 characters, at most 200 of its
    characters: what names an error."""
    window = text[-2000:]
    # Usually in the last 256 characters: the lines there after the first line break are the
    # window's last lines (splitting 2 kB cost ~37 k instructions for one line).
    if len(window) > 256:
        for line in reversed(window[-256:].splitlines()[1:]):
            if line.strip():
                return line.strip()[:200]
    for line in reversed(window.splitlines()):
        if line.strip():
            return line.strip()[:200]
    return ""


def tool_content(
    view: SpanView, arguments: str | dict[str, Any] | None, result: str | None
) -> None:
    """Fingerprint a tool call's arguments and result into ``view`` (the texts are not kept),
    as the guard and the importer fingerprint them (``replay.call_fingerprints``).
    ``arguments``: the recorded text, or the object a log parsed already (the same
    fingerprint as its JSON text, without writing and parsing it again)."""
    name = view.tool_name or "unknown"
    view.call_fp, result_fp, _ = call_fingerprints(name, arguments, result or "")
    if result is not None:
        view.result_fp = result_fp
        view.result = last_line(result)


def role_of(name: str, attrs: Mapping[str, Any]) -> str | None:
    """The span's role in an agent loop under any of the three conventions."""
    operation = attrs.get(sc.GEN_AI_OPERATION_NAME)
    if operation is not None:
        if operation == sc.OP_INVOKE_AGENT:
            return AGENT
        if operation == sc.OP_EXECUTE_TOOL:
            return TOOL
        if operation in _MODEL_OPERATIONS:
            return MODEL
    kind = attrs.get(sc.OI_SPAN_KIND)
    if kind is not None:
        return _OI_ROLES.get(str(kind).upper())
    traceloop = attrs.get("traceloop.span.kind")
    if traceloop is not None:
        return _TRACELOOP_ROLES.get(str(traceloop))
    if "llm.request.type" in attrs:
        return MODEL
    if name.startswith(sc.SPAN_RUN):
        return AGENT
    if name.startswith(sc.SPAN_TOOL):
        return TOOL
    return None


def _finish_reasons(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    reasons = attrs.get(sc.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(reasons, str):
        return (_SEMCONV_FINISH.get(reasons, reasons),)
    if isinstance(reasons, Sequence):
        return tuple(_SEMCONV_FINISH.get(str(r), str(r)) for r in reasons)
    single = _first(attrs, ("gen_ai.completion.0.finish_reason", "llm.finish_reason"))
    if single is not None:
        return (str(single),)
    return _finish_from_output(attrs.get("output.value"))


def _finish_from_output(output: Any) -> tuple[str, ...]:
    """OpenInference keeps the provider's raw response as ``output.value``: its finish reasons
    (Chat Completions ``choices[].finish_reason``, Anthropic ``stop_reason``, a Responses API
    ``incomplete_details.reason``)."""
    if not isinstance(output, str) or not output.startswith("{") or len(output) > 1 << 20:
        return ()
    try:
        data = json.loads(output)
    except ValueError:
        return ()
    if not isinstance(data, dict):
        return ()
    choices = data.get("choices")
    if isinstance(choices, list):
        return tuple(
            str(c["finish_reason"])
            for c in choices
            if isinstance(c, dict) and c.get("finish_reason")
        )
    if isinstance(data.get("stop_reason"), str):
        return (data["stop_reason"],)
    details = data.get("incomplete_details")
    if isinstance(details, dict) and isinstance(details.get("reason"), str):
        return (details["reason"],)
    return ()


def _exceptions(
    attrs: Mapping[str, Any], events: Sequence[EventRecord]
) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []
    for event in events:
        if event.name == "exception":
            a = event.attributes
            found.append(
                (str(a.get("exception.type") or ""), str(a.get("exception.message") or ""))
            )
    error_type = attrs.get(sc.ERROR_TYPE)
    if error_type is not None and not any(t == error_type for t, _ in found):
        found.append((str(error_type), ""))
    return tuple(found)


def _view(cols: SpanColumns, i: int, role: str | None, labels: Sequence[str]) -> SpanView:
    attrs = cols.attributes[i]
    view = SpanView(
        cols.trace_id[i], cols.span_id[i], cols.parent_span_id[i], cols.name[i],
        cols.start_ns[i], cols.end_ns[i], role,
        cols.status_code[i] == "ERROR", cols.status_message[i], cols.service[i],
    )  # fmt: skip
    events = cols.events[i]
    if events or sc.ERROR_TYPE in attrs:
        view.exceptions = _exceptions(attrs, events)
    conversation = _first(attrs, _CONVERSATION_KEYS)
    view.conversation_id = conversation if isinstance(conversation, str) else None
    if labels:
        view.labels = tuple((k, str(attrs[k])) for k in labels if attrs.get(k) not in (None, ""))
    if role is None:
        return view
    if role == AGENT:
        name = _first(attrs, _AGENT_KEYS)
        view.agent_name = str(name) if name is not None else None
        view.step_limit = _int(attrs.get("smolagents.max_steps"))
    elif role == TOOL:
        name = _first(attrs, _TOOL_KEYS)
        view.tool_name = str(name) if name is not None else None
        call_id = _first(attrs, (sc.GEN_AI_TOOL_CALL_ID, "tool_call.id", "tool.id"))
        view.tool_call_id = str(call_id) if call_id is not None else None
        tool_content(
            view,
            _text(_first(attrs, _ARG_KEYS)),
            _tool_result(_text(_first(attrs, _RESULT_KEYS))),
        )
    else:
        model = _first(attrs, _MODEL_KEYS)
        view.model = str(model) if model is not None else None
        view.input_tokens = _int(_first(attrs, _INPUT_KEYS))
        view.output_tokens = _int(_first(attrs, _OUTPUT_KEYS))
        view.finish_reasons = _finish_reasons(attrs)
    cost = _first(attrs, _COST_KEYS)
    if type(cost) in (int, float):
        view.cost_usd = float(cost)
    return view


def views_of(cols: SpanColumns, labels: Sequence[str] = ()) -> list[SpanView]:
    """The foreign spans of a batch as views: every span without ``loopwatch.run_id``.

    ``labels``: span attribute keys whose values may give a run its task type."""
    out: list[SpanView] = []
    names, attributes = cols.name, cols.attributes
    for i in range(len(cols)):
        attrs = attributes[i]
        if sc.RUN_ID in attrs:
            continue
        out.append(_view(cols, i, role_of(names[i], attrs), labels))
    return out
