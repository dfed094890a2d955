"""OpenTelemetry spans for agent runs (docs/telemetry.md): an implementation of
:class:`RunObserver`.

One :class:`OTelRunObserver` per run turns the guard's lifecycle calls into a span tree::

    invoke_agent {agent}              run, INTERNAL
    ├── step 1                        INTERNAL, loopwatch.guard.decision
    │   ├── chat {model}              CLIENT, finish reasons, token usage
    │   └── execute_tool {tool}       INTERNAL, fingerprint, status, retries
    └── step 2 ...

Every span is made current while it is open, so a tool's own instrumented calls (HTTP clients,
databases) and a sub-agent's run nest under the span that caused them, in threads and asyncio
tasks alike (each keeps its own context). Budget usage is recorded when a span ends: it is the
usage *after* the step, call or run the span stands for.

Observers never raise into the loop: a failure inside one is counted as dropped telemetry
(``observer_error``) and the loop carries on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import Token
from typing import Any, Final, ParamSpec

from ..runtime.extras import MissingExtraError

try:
    import opentelemetry.trace  # noqa: F401 (fail early, naming the extra)
except ImportError as exc:
    raise MissingExtraError.of("otel", __name__, exc) from exc

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from ..runtime import semconv as sc
from ..runtime.drops import record_drop
from ..runtime.observer import BudgetSnapshot, RunInfo, RunObserver, ToolRecord
from ..runtime.types import ModelResponse, RunResult, ToolCall
from .content import (
    cap_content,
    capture_content_enabled,
    input_messages,
    json_text,
    output_messages,
    redact_content,
    resolve_content_max_chars,
    system_instructions,
    tool_definitions,
    tool_description,
)
from .spanattrs import (
    budget_attributes,
    is_error_outcome,
    run_attributes,
    run_span_attributes,
    shadow_attributes,
)

__all__ = [
    "INSTRUMENTATION_SCOPE",
    "OTelObserverFactory",
    "OTelRunObserver",
    "budget_attributes",
    "cap_content",
    "capture_content_enabled",
    "input_messages",
    "is_error_outcome",
    "redact_content",
    "resolve_content_max_chars",
    "run_span_attributes",
    "system_instructions",
    "tool_definitions",
]

INSTRUMENTATION_SCOPE: Final = "loopwatch.instrumentation"
"""The tracer name loopwatch's spans are created under."""


_OK: Final = "ok"

_P = ParamSpec("_P")


def _safe(method: Callable[_P, None]) -> Callable[_P, None]:
    """Telemetry never breaks the loop: whatever goes wrong in an observer call is counted."""

    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception:
            record_drop("observer_error")

    wrapper.__name__ = method.__name__
    wrapper.__qualname__ = method.__qualname__
    wrapper.__doc__ = method.__doc__
    return wrapper


def _detach(token: Token[Context]) -> None:
    # A token made in another thread or asyncio task cannot be reset here; that context dies with
    # its task, so there is nothing to restore (and nothing worth OTel's error log).
    try:  # noqa: SIM105 (contextlib.suppress costs more on this hot path)
        token.var.reset(token)
    except (ValueError, RuntimeError):
        pass


def _attribute(value: Any) -> AttributeValue:
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    return str(value)


def _conversation_id(info: RunInfo) -> str | None:
    if info.conversation_id:
        return info.conversation_id
    attrs = info.attributes
    for key in (sc.GEN_AI_CONVERSATION_ID, sc.OI_SESSION_ID, sc.CONVERSATION_ID):
        value = attrs.get(key)
        if value is not None and value != "":
            return str(value)
    return None


class _Open:
    """One span this observer made current, with the token that undoes it."""

    __slots__ = ("done", "span", "token")

    def __init__(self, span: Span, token: Token[Context]) -> None:
        self.span = span
        self.token = token
        self.done = False


class OTelRunObserver:
    """Emits one run's spans. Made by :class:`OTelObserverFactory`; one instance per run."""

    __slots__ = (
        "_capture",
        "_common",
        "_conversation",
        "_finish",
        "_info",
        "_max_chars",
        "_model",
        "_provider",
        "_provider_known",
        "_request_model",
        "_run",
        "_run_ctx",
        "_stack",
        "_step",
        "_step_ctx",
        "_step_n",
        "_tool_defs",
        "_tools",
        "_tracer",
    )

    def __init__(
        self,
        tracer: Tracer,
        *,
        capture_content: bool = False,
        content_max_chars: int = sc.CONTENT_MAX_CHARS_DEFAULT,
    ) -> None:
        self._tracer = tracer
        self._capture = capture_content
        self._max_chars = content_max_chars
        self._common: dict[str, AttributeValue] = {}
        self._info: RunInfo | None = None
        self._provider: str = sc.PROVIDER_UNKNOWN
        self._provider_known = False
        self._conversation: str | None = None
        self._finish: str | None = None
        self._request_model: str | None = None
        self._tool_defs: str | None = None
        self._run: Span | None = None
        self._run_ctx: Context | None = None
        self._step: Span | None = None
        self._step_ctx: Context | None = None
        self._step_n = 0
        self._model: Span | None = None
        self._tools: list[tuple[ToolCall, Span]] = []
        # Spans made current, innermost last. Tokens are reset innermost-first, so a span that
        # ends out of order (concurrent tool calls) waits until those above it have ended too.
        self._stack: list[_Open] = []

    # --- context bookkeeping ---------------------------------------------------------------

    def _open(self, span: Span, ctx: Context) -> None:
        self._stack.append(_Open(span, context_api.attach(ctx)))

    def _close(self, span: Span) -> None:
        stack = self._stack
        for entry in reversed(stack):
            if entry.span is span:
                entry.done = True
                break
        while stack and stack[-1].done:
            _detach(stack.pop().token)

    def _parent_ctx(self) -> Context | None:
        return self._step_ctx if self._step is not None else self._run_ctx

    def _end_children(self, budget: BudgetSnapshot) -> None:
        """End model and tool spans the guard left open (a stop mid-step), innermost first."""
        if self._tools:
            attrs = budget_attributes(budget)
            for _, span in reversed(self._tools):
                if span.is_recording():
                    span.set_attributes(attrs)
                span.end()
                self._close(span)
            self._tools.clear()
        self._end_model(budget)

    def _content(self, attrs: dict[str, AttributeValue], key: str, text: str) -> None:
        """Put captured content under ``key``, cut at the size cap (named in
        ``loopwatch.content.truncated`` when cut)."""
        value, cut = cap_content(text, self._max_chars)
        attrs[key] = value
        if cut:
            previous = attrs.get(sc.CONTENT_TRUNCATED)
            names = list(previous) if isinstance(previous, list | tuple) else []
            attrs[sc.CONTENT_TRUNCATED] = [*(str(n) for n in names), key]

    # --- RunObserver -----------------------------------------------------------------------

    @_safe
    def run_started(self, info: RunInfo, budget: BudgetSnapshot) -> None:
        if self._run is not None:
            return
        self._info = info
        self._common = {sc.RUN_ID: info.run_id, sc.TASK_TYPE: info.task_type}
        # The caller's extra attributes first, so they can never overwrite loopwatch's own.
        attrs: dict[str, AttributeValue] = {
            key: _attribute(value) for key, value in info.attributes.items() if value is not None
        }
        provider = info.provider or attrs.get(sc.GEN_AI_PROVIDER_NAME)
        if isinstance(provider, str) and provider:
            self._provider = provider
            self._provider_known = True
        attrs[sc.GEN_AI_OPERATION_NAME] = sc.OP_INVOKE_AGENT
        attrs[sc.GEN_AI_PROVIDER_NAME] = self._provider
        attrs[sc.GEN_AI_AGENT_NAME] = info.agent_name
        attrs[sc.OI_SPAN_KIND] = sc.OI_AGENT
        attrs[sc.LIMITS_VERSION] = info.limits_version
        conversation = _conversation_id(info)
        if conversation is not None:
            self._conversation = conversation
            attrs[sc.GEN_AI_CONVERSATION_ID] = conversation
            attrs[sc.OI_SESSION_ID] = conversation
        attrs.update(self._common)
        if info.parent_run_id:
            attrs[sc.PARENT_RUN_ID] = info.parent_run_id
        # The caller's current context is the parent: a sub-agent started inside a tool call
        # nests under that tool's span.
        parent = context_api.get_current()
        span = self._tracer.start_span(
            f"{sc.SPAN_RUN} {info.agent_name}", parent, SpanKind.INTERNAL, attrs
        )
        self._run = span
        self._run_ctx = trace.set_span_in_context(span, parent)
        self._open(span, self._run_ctx)

    @_safe
    def step_started(self, step: int, budget: BudgetSnapshot) -> None:
        if self._run is None:
            return
        if self._step is not None:  # the previous step was never ended
            self._end_step(None, budget)
        attrs: dict[str, AttributeValue] = {
            sc.STEP_INDEX: step,
            sc.OI_SPAN_KIND: sc.OI_CHAIN,
            **self._common,
        }
        name = f"{sc.SPAN_STEP} {step}"
        span = self._tracer.start_span(name, self._run_ctx, SpanKind.INTERNAL, attrs)
        self._step = span
        self._step_n = step
        self._step_ctx = trace.set_span_in_context(span, self._run_ctx)
        self._open(span, self._step_ctx)

    @_safe
    def model_call_started(self, step: int, model: str | None, budget: BudgetSnapshot) -> None:
        if self._run is None:
            return
        if self._model is not None:
            self._end_model(budget)
        attrs: dict[str, AttributeValue] = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
            sc.GEN_AI_PROVIDER_NAME: self._provider,
            sc.OI_SPAN_KIND: sc.OI_LLM,
            sc.STEP_INDEX: step,
            **self._common,
        }
        if model:
            attrs[sc.GEN_AI_REQUEST_MODEL] = model
            if self._request_model is None:
                self._request_model = model
        if self._conversation is not None:
            attrs[sc.GEN_AI_CONVERSATION_ID] = self._conversation
        if self._capture and self._info is not None:
            self._capture_inputs(attrs, self._info)
        name = f"{sc.SPAN_MODEL} {model}" if model else sc.SPAN_MODEL
        parent = self._parent_ctx()
        span = self._tracer.start_span(name, parent, SpanKind.CLIENT, attrs)
        self._model = span
        self._open(span, trace.set_span_in_context(span, parent))

    def _capture_inputs(self, attrs: dict[str, AttributeValue], info: RunInfo) -> None:
        messages = list(info.messages)
        self._content(attrs, sc.GEN_AI_INPUT_MESSAGES, input_messages(messages))
        instructions = system_instructions(messages)
        if instructions is not None:
            self._content(attrs, sc.GEN_AI_SYSTEM_INSTRUCTIONS, instructions)
        if self._tool_defs is None:
            self._tool_defs = tool_definitions(info.registry) or ""
        if self._tool_defs:
            self._content(attrs, sc.GEN_AI_TOOL_DEFINITIONS, self._tool_defs)

    @_safe
    def model_call_ended(
        self, response: ModelResponse | None, error: BaseException | None, budget: BudgetSnapshot
    ) -> None:
        span = self._model
        if span is None:
            return
        if span.is_recording():
            attrs = budget_attributes(budget)
            if response is not None:
                self._response_attributes(attrs, response)
            span.set_attributes(attrs)
            if error is not None:
                span.set_attribute(sc.ERROR_TYPE, type(error).__qualname__)
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__qualname__))
        self._end_model(None)

    def _response_attributes(
        self, attrs: dict[str, AttributeValue], response: ModelResponse
    ) -> None:
        if response.stop_reason is not None:
            attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [response.stop_reason]
            self._finish = response.stop_reason
        usage = response.usage
        cost = float(usage.cost_usd)
        attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = usage.input_tokens
        attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.output_tokens
        attrs[sc.OI_TOKEN_COUNT_PROMPT] = usage.input_tokens
        attrs[sc.OI_TOKEN_COUNT_COMPLETION] = usage.output_tokens
        attrs[sc.COST_USD] = cost
        attrs[sc.GEN_AI_USAGE_COST] = cost
        attrs[sc.OI_COST_TOTAL] = cost
        if response.provider:
            attrs[sc.GEN_AI_PROVIDER_NAME] = response.provider
            if not self._provider_known:
                self._provider = response.provider
                self._provider_known = True
        attrs[sc.OI_LLM_PROVIDER] = response.provider or self._provider
        if response.model:
            attrs[sc.GEN_AI_RESPONSE_MODEL] = response.model
            attrs[sc.OI_LLM_MODEL_NAME] = response.model
        elif self._request_model:
            attrs[sc.OI_LLM_MODEL_NAME] = self._request_model
        if response.response_id:
            attrs[sc.GEN_AI_RESPONSE_ID] = response.response_id
        if self._capture:
            self._content(attrs, sc.GEN_AI_OUTPUT_MESSAGES, output_messages(response))

    def _end_model(self, budget: BudgetSnapshot | None) -> None:
        span = self._model
        if span is None:
            return
        if budget is not None and span.is_recording():
            span.set_attributes(budget_attributes(budget))
        span.end()
        self._model = None
        self._close(span)

    @_safe
    def tool_call_started(self, call: ToolCall, fingerprint: str, budget: BudgetSnapshot) -> None:
        if self._run is None:
            return
        attrs: dict[str, AttributeValue] = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: call.name,
            sc.GEN_AI_TOOL_CALL_ID: call.id,
            sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
            sc.OI_SPAN_KIND: sc.OI_TOOL,
            sc.TOOL_FINGERPRINT: fingerprint,
            sc.STEP_INDEX: self._step_n,
            **self._common,
        }
        info = self._info
        if info is not None and info.registry is not None:
            description = tool_description(info.registry, call.name)
            if description is not None:
                attrs[sc.GEN_AI_TOOL_DESCRIPTION] = description
        if self._capture:
            self._content(attrs, sc.GEN_AI_TOOL_CALL_ARGUMENTS, json_text(call.arguments))
        parent = self._parent_ctx()
        span = self._tracer.start_span(
            f"{sc.SPAN_TOOL} {call.name}", parent, SpanKind.INTERNAL, attrs
        )
        self._tools.append((call, span))
        self._open(span, trace.set_span_in_context(span, parent))

    @_safe
    def tool_call_ended(self, record: ToolRecord, budget: BudgetSnapshot) -> None:
        span = self._pop_tool(record.call)
        if span is None:
            return
        if span.is_recording():
            attrs = budget_attributes(budget)
            attrs[sc.TOOL_STATUS] = record.status
            attrs[sc.TOOL_RETRIES] = record.retries
            attrs[sc.RESULT_FINGERPRINT] = record.result_fingerprint
            if self._capture:
                self._content(attrs, sc.GEN_AI_TOOL_CALL_RESULT, record.content)
            if record.status != _OK:
                code = record.error_code or "error"
                attrs[sc.ERROR_TYPE] = code
                attrs[sc.ERROR_CODE] = code
                if record.error_fingerprint:
                    attrs[sc.ERROR_FINGERPRINT] = record.error_fingerprint
                # The code is error.type already; a description would only repeat it.
                span.set_status(Status(StatusCode.ERROR))
            span.set_attributes(attrs)
        span.end()
        self._close(span)

    def _pop_tool(self, call: ToolCall) -> Span | None:
        tools = self._tools
        for i in range(len(tools) - 1, -1, -1):
            if tools[i][0] is call:
                return tools.pop(i)[1]
        for i in range(len(tools) - 1, -1, -1):
            if tools[i][0].id == call.id:
                return tools.pop(i)[1]
        return None

    @_safe
    def event(self, name: str, attributes: Mapping[str, AttributeValue]) -> None:
        target = self._current()
        if target is not None:
            target.add_event(name, dict(attributes))

    def _current(self) -> Span | None:
        for entry in reversed(self._stack):
            if not entry.done:
                return entry.span
        return None

    @_safe
    def step_ended(self, step: int, decision: str, budget: BudgetSnapshot) -> None:
        if self._step is None:
            return
        self._end_step(decision, budget)

    def _end_step(self, decision: str | None, budget: BudgetSnapshot) -> None:
        span = self._step
        if span is None:
            return
        self._end_children(budget)
        if span.is_recording():
            attrs = budget_attributes(budget)
            if decision is not None:
                attrs[sc.GUARD_DECISION] = str(decision)
            span.set_attributes(attrs)
        span.end()
        self._step = None
        self._step_ctx = None
        self._close(span)

    @_safe
    def run_ended(self, result: RunResult, budget: BudgetSnapshot) -> None:
        span = self._run
        if span is None:
            return
        self._run = None
        try:
            if self._step is not None:
                self._end_step(str(result.stop_reason), budget)
            else:
                self._end_children(budget)
            if span.is_recording():
                explanation = result.explanation
                if not self._capture:
                    explanation = redact_content(explanation, result.messages)
                attrs = run_attributes(result, budget, explanation)
                attrs[sc.GEN_AI_PROVIDER_NAME] = self._provider
                if self._request_model is not None:
                    attrs[sc.GEN_AI_REQUEST_MODEL] = self._request_model
                if self._finish is not None:
                    attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [self._finish]
                span.set_attributes(attrs)
                if result.shadow:
                    span.set_attributes(shadow_attributes(result, self._capture))
                if is_error_outcome(result.outcome):
                    description = explanation or str(result.stop_reason)
                    span.set_status(Status(StatusCode.ERROR, description))
        finally:
            span.end()
            # Undo everything this run attached, even if a call above failed or was skipped:
            # a context left behind would parent the thread's next spans to a finished run.
            stack = self._stack
            while stack:
                _detach(stack.pop().token)


class OTelObserverFactory:
    """Makes an :class:`OTelRunObserver` for each run; install it with ``set_observer_factory``.

    ``tracer_provider=None`` uses the global provider (OTel's proxy follows a provider set later).
    ``capture_content=None`` reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` once,
    when the factory is made.
    """

    __slots__ = ("_capture", "_max_chars", "_tracer")

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool | None = None,
        content_max_chars: int | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            INSTRUMENTATION_SCOPE, _version(), tracer_provider=tracer_provider
        )
        self._capture = capture_content_enabled(capture_content)
        self._max_chars = resolve_content_max_chars(content_max_chars)

    @property
    def capture_content(self) -> bool:
        """Whether raw arguments, results and message content are recorded."""
        return self._capture

    @property
    def content_max_chars(self) -> int:
        """The size cap of one captured-content attribute (0 = none)."""
        return self._max_chars

    def __call__(self, info: RunInfo) -> RunObserver:
        return OTelRunObserver(
            self._tracer, capture_content=self._capture, content_max_chars=self._max_chars
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopwatch")
    except PackageNotFoundError:
        return "0"
