"""What a span records of a run's content: messages, tool definitions and arguments in the GenAI
conventions' JSON shapes, the content-capture switch and size cap, and the redaction of tool input
and output from explanations when capture is off (docs/telemetry.md, "Content capture")."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import Any, Final

from ..runtime import semconv as sc
from ..runtime.fingerprint import stable_json
from ..runtime.guard import describe_call
from ..runtime.settings import env_bool, env_int
from ..runtime.types import Message, ModelResponse
from ..runtime.validate import check_int

__all__ = [
    "cap_content",
    "capture_content_enabled",
    "input_messages",
    "json_text",
    "output_messages",
    "redact_content",
    "resolve_content_max_chars",
    "system_instructions",
    "tool_definitions",
    "tool_description",
]


def capture_content_enabled(value: bool | None = None) -> bool:
    """Whether raw tool arguments/results and message content are recorded.

    The argument wins; else ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``true`` turns
    it on, as the GenAI conventions define); else off.
    """
    if value is not None:
        return value
    return env_bool(sc.CAPTURE_CONTENT_ENV, False)


def resolve_content_max_chars(value: int | None = None) -> int:
    """The size cap of one captured-content attribute, in characters.

    The argument wins; else ``LOOPWATCH_CONTENT_MAX_CHARS``; else 16384. ``0`` means no cap.
    Raises ``ValueError`` for a negative or non-numeric value.
    """
    if value is None:
        return env_int(sc.CONTENT_MAX_CHARS_ENV, sc.CONTENT_MAX_CHARS_DEFAULT, minimum=0)
    return check_int("content_max_chars", value, minimum=0)


def cap_content(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters (0 = no cap), and whether it was cut.

    A cut text ends with a marker that says where: ``…[truncated at 16384 of 20971520 chars]``,
    so a reader of the span never takes a prefix for the whole.
    """
    if limit <= 0 or len(text) <= limit:
        return text, False
    return f"{text[:limit]}…[truncated at {limit} of {len(text)} chars]", True


def json_text(value: Any) -> str:
    # The raw string the model sent is kept as sent; parsed data as the fingerprints see it.
    return value if isinstance(value, str) else stable_json(value)


def _message_parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
        return parts
    if message.content:
        parts.append({"type": "text", "content": message.content})
    for call in message.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return parts


def output_messages(response: ModelResponse) -> str:
    """The response as ``gen_ai.output.messages`` (GenAI conventions' JSON shape)."""
    message = response.message
    entry: dict[str, Any] = {"role": message.role, "parts": _message_parts(message)}
    if response.stop_reason is not None:
        entry["finish_reason"] = response.stop_reason
    return json_text([entry])


def input_messages(messages: Iterable[Message]) -> str:
    """The messages a model call is sent, system messages left out, as
    ``gen_ai.input.messages`` (GenAI conventions' JSON shape)."""
    return json_text(
        [
            {"role": m.role, "parts": _message_parts(m)}
            for m in messages
            if isinstance(m, Message) and m.role != "system"
        ]
    )


def system_instructions(messages: Iterable[Message]) -> str | None:
    """The system messages as ``gen_ai.system_instructions``; ``None`` when there are none."""
    parts = [
        {"type": "text", "content": m.content}
        for m in messages
        if isinstance(m, Message) and m.role == "system" and m.content
    ]
    return json_text(parts) if parts else None


def tool_definitions(registry: Any) -> str | None:
    """The registry's tools as ``gen_ai.tool.definitions``; ``None`` for no registry or tools."""
    if registry is None:
        return None
    try:
        specs = list(registry)
    except TypeError:
        return None
    defs = [
        {
            "type": sc.TOOL_TYPE_FUNCTION,
            "name": spec.name,
            "description": getattr(spec, "description", ""),
            "parameters": getattr(spec, "parameters", {}),
        }
        for spec in specs
        if isinstance(getattr(spec, "name", None), str)
    ]
    return json_text(defs) if defs else None


def tool_description(registry: Any, name: str) -> str | None:
    if registry is None:
        return None
    get = getattr(registry, "get", None)
    spec = get(name) if get is not None else None
    text = getattr(spec, "description", None)
    return text if isinstance(text, str) and text else None


_QUOTED: Final = re.compile(r"'(?:[^'\\\n]|\\.)*'" r'|"(?:[^"\\\n]|\\.)*"')


def redact_content(explanation: str, messages: Iterable[Message]) -> str:
    """The explanation with the run's tool input and output replaced by ``…``.

    Explanations name the call with its arguments (``read_file(path='src/foo.ts')``) and quote
    the evidence: the result a repeated call returned, the message of a repeated error. All of it
    is tool input or output, which without the content-capture opt-in must not leave the process.
    The replacement is exact, not a pattern guess: calls are taken from the run's messages and
    replaced whole; then every quoted text left whose content occurs in a tool result of the run
    becomes ``'…'``. Quoted text that no tool returned (a provider's stop signal) stays.
    """
    if not explanation:
        return explanation
    outputs: list[str] = []
    for message in messages:
        for call in message.tool_calls:
            described = describe_call(call)
            if described in explanation:
                explanation = explanation.replace(described, f"{call.name}(…)")
        if message.role == "tool" and message.content:
            outputs.append(" ".join(message.content.split()))
    if not outputs:
        return explanation

    def redact(match: re.Match[str]) -> str:
        quoted = match.group()
        try:
            text = ast.literal_eval(quoted)
        except (ValueError, SyntaxError):
            return quoted
        if not isinstance(text, str):
            return quoted
        text = " ".join(text.removesuffix("...").split())
        if text and any(text in output for output in outputs):
            return "'…'"
        return quoted

    return _QUOTED.sub(redact, explanation)
