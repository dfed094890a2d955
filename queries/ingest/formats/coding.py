"""Coding agents' recorded runs → the spans a loop would have made (docs/import.md).

Each reader turns one recorded session into :class:`~..foreign.conventions.SpanView` objects —
an agent span per run, a model-call span per model turn, a tool span per tool call with its
arguments, result and failure — so that the same reconstruction, stop-reason derivation and
replay as foreign traces apply (:mod:`..foreign.reconstruct`):

* SWE-agent ``.traj`` (:func:`swe_agent`): one JSON object; ``trajectory`` holds the steps
  (``response``/``thought``, ``action``, ``observation``), ``info`` the ``exit_status`` and
  ``model_stats``. One run per file.
* OpenHands event logs (:func:`openhands`): a list of events; actions (``source`` ``agent``,
  ``action`` ``run``/``edit``/``read``/``browse``/...) with ``tool_call_metadata``, observations
  with ``cause`` (the action's id), ``extras.metadata.exit_code``, ``observation`` ``error``;
  ``agent_state_changed`` ends a run. Each user message starts a run.
* Claude Code session transcripts (:func:`claude_code`): JSONL of ``user``/``assistant`` lines
  whose ``message`` is an Anthropic message; ``tool_use`` blocks, ``tool_result`` blocks with
  ``is_error``; a ``result`` line (Claude Agent SDK, ``--output-format stream-json``) carries the
  run's ``subtype`` (``error_max_turns`` ...). Each user prompt (not a tool result) starts a run.

Error conventions: a non-zero exit code, an ``is_error`` flag, an OpenHands ``error``
observation, or a shell error line (``command not found``, ``No such file or directory``, a
Python traceback) make the tool call a failure, with the exit code or error kind as its code.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from loopwatch.instrumentation.runtime.fingerprint import call_fingerprint, result_fingerprint

from ..foreign.conventions import AGENT, MODEL, TOOL, SpanView, last_line, parse_arguments

__all__ = [
    "TASK_LABEL", "LogBuilder", "claude_code", "openhands", "shell_error", "swe_agent"
]  # fmt: skip

TASK_LABEL: Final = "loopwatch.import.task_type"
"""The label key carrying the task type the import was given."""

_SHELL_ERROR: Final = re.compile(
    r"^(?:bash: |/bin/sh: |sh: )|: command not found|: No such file or directory"
    r"|^Traceback \(most recent call last\)|^Exit code:? ?[1-9]",
    re.M,
)


def shell_error(text: str | None) -> str | None:
    """The error kind of a shell observation (``shell_error``), or ``None`` for a success."""
    if not text:
        return None
    head = text[:4096]
    # Substring tests first (C speed, written out: a generator over them costs as much): the
    # pattern runs only on the few outputs that may match.
    if (
        "sh: " in head
        or "command not found" in head
        or "No such file or directory" in head
        or "Traceback (" in head
        or "Exit code" in head
    ) and _SHELL_ERROR.search(head):
        return "shell_error"
    return None


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text") or part.get("content") or ""))
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return str(content)


def _obj(value: Any) -> Mapping[str, Any]:
    """``value`` when it is an object, else an empty one (a field missing or of another type)."""
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


class LogBuilder:
    """Builds the spans of one recorded session: ids from its identity, times one microsecond
    apart from ``start_ns`` (recorded logs are timestamped at the import)."""

    def __init__(self, identity: str, start_ns: int, task_type: str, agent: str) -> None:
        self.trace_id = hashlib.blake2b(identity.encode(), digest_size=16).hexdigest()
        self._prefix = self.trace_id[:8]
        self._k = 0
        self._now = start_ns
        self.views: list[SpanView] = []
        self._task = ((TASK_LABEL, task_type),)
        self._agent = agent
        self.run: SpanView | None = None

    def _view(self, role: str | None, name: str, parent: str | None) -> SpanView:
        self._k += 1
        self._now += 1000
        view = SpanView(
            self.trace_id, f"{self._prefix}{self._k:08x}", parent, name, self._now, self._now, role
        )
        self.views.append(view)
        return view

    def start_run(self) -> None:
        """A run starts (a user message); the previous one ends."""
        self.end_run()
        self.run = self._view(AGENT, f"invoke_agent {self._agent}", None)
        self.run.agent_name = self._agent
        self.run.labels = self._task

    def end_run(self, error: tuple[str, str] | None = None) -> None:
        """The current run ends, with ``error`` (kind, message) when it ended in one."""
        if self.run is None:
            return
        self.run.end_ns = self._now + 500
        if error is not None:
            self.run.error, self.run.status_message = True, error[1]
            self.run.exceptions = (error,)
        self.run = None

    def model(
        self, model: str | None, tokens: tuple[int | None, int | None], finish: str | None
    ) -> None:
        if self.run is None:
            self.start_run()
        assert self.run is not None
        view = self._view(MODEL, f"chat {model or 'model'}", self.run.span_id)
        view.model, (view.input_tokens, view.output_tokens) = model, tokens
        view.finish_reasons = (finish,) if finish else ()

    def tool(
        self, name: str, call_id: str | None, arguments: str | dict[str, Any] | None,
        result: str | None,
        error: tuple[str, str] | None = None,
    ) -> None:  # fmt: skip
        """A tool call: its arguments (the recorded text, or the object the log parsed: the same
        fingerprint as its JSON text) and result are fingerprinted, not kept; a failure keeps
        the result's last line (what names it)."""
        if self.run is None:
            self.start_run()
        assert self.run is not None
        view = self._view(TOOL, f"execute_tool {name}", self.run.span_id)
        view.tool_name, view.tool_call_id = name, call_id
        name = name or "unknown"
        view.call_fp = call_fingerprint(
            name, arguments if isinstance(arguments, dict) else parse_arguments(arguments)
        )
        if result is not None:
            view.result_fp = result_fingerprint(result)
        if error is not None:
            view.error, view.status_message = True, error[1]
            view.exceptions = (error,)
            if result is not None:
                view.result = last_line(result)


# --- SWE-agent ----------------------------------------------------------------------------------

# exit_status values of SWE-agent (and mini-SWE-agent) that are not a plain submission.
_SWE_EXITS: Final = {
    "exit_cost": "error_max_budget_usd",
    "limitsexceeded": "error_max_turns",
    "exit_context": "model_context_window_exceeded",
}


def swe_agent(data: Any, builder: LogBuilder) -> None:
    """One SWE-agent ``.traj`` object (see the module docstring)."""
    if not isinstance(data, dict) or not isinstance(data.get("trajectory"), list):
        raise ValueError("a SWE-agent .traj is an object with a 'trajectory' list")
    info = _obj(data.get("info"))
    stats = _obj(info.get("model_stats"))
    steps = data["trajectory"]
    sent, received = _int(stats.get("tokens_sent")), _int(stats.get("tokens_received"))
    builder.start_run()
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise ValueError(f"trajectory step {i} is not an object")
        # Only run totals are recorded: the first step carries them, the rest none.
        builder.model(None, (sent, received) if i == 0 else (None, None), None)
        action = step.get("action")
        if isinstance(action, str) and action.strip():
            observation = _text(step.get("observation"))
            kind = shell_error(observation)
            command = action.strip().split(None, 1)[0]
            builder.tool(
                command, None, action.strip(), observation,
                (kind, last_line(observation)) if kind else None,
            )  # fmt: skip
    status = str(info.get("exit_status") or "")
    exit_kind = next((v for k, v in _SWE_EXITS.items() if k in status.lower()), None)
    if exit_kind is not None:
        builder.end_run(("SWEAgentExit", f"exit_status {status} ({exit_kind})"))
    elif status and not status.lower().startswith("submitted"):
        builder.end_run(("SWEAgentExit", f"exit_status {status}"))
    else:
        builder.model(None, (None, None), "stop" if status else None)
        builder.end_run()


# --- OpenHands ----------------------------------------------------------------------------------

_OH_LIMITS: Final = (
    (re.compile(r"maximum iteration", re.I), "error_max_turns"),
    (re.compile(r"maximum budget", re.I), "error_max_budget_usd"),
)


def _oh_error(obs: Mapping[str, Any], content: str) -> tuple[str, str] | None:
    if obs.get("observation") == "error":
        return "error", last_line(content)
    extras = _obj(obs.get("extras"))
    meta = _obj(extras.get("metadata"))
    code = meta.get("exit_code", extras.get("exit_code"))
    if type(code) is int and code not in (0, -1):
        return f"exit_code_{code}", last_line(content)
    return None


def _oh_usage(response: Mapping[str, Any]) -> tuple[str | None, tuple[int | None, int | None]]:
    usage = _obj(response.get("usage"))
    return response.get("model"), (
        _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    )  # fmt: skip


def openhands(events: Any, builder: LogBuilder) -> None:
    """One OpenHands event list (see the module docstring)."""
    if isinstance(events, dict) and isinstance(events.get("events"), list):
        events = events["events"]
    if not isinstance(events, list):
        raise ValueError("an OpenHands event log is a list of events (or {'events': [...]})")
    results = {e.get("cause"): e for e in events if isinstance(e, dict) and "observation" in e}
    seen_response: set[Any] = set()
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            raise ValueError(f"event {i} is not an object")
        action, source = event.get("action"), event.get("source")
        if action == "message" and source == "user":
            builder.start_run()
        elif source == "agent" and action is not None:
            _oh_action(event, results, seen_response, builder)
        elif event.get("observation") == "agent_state_changed":
            _oh_state(event, builder)


_OH_KEPT_ARGUMENTS: Final = ("command", "path", "url", "code", "old_str", "new_str")


def _oh_action(
    event: Mapping[str, Any], results: Mapping[Any, Any], seen: set[Any], builder: LogBuilder
) -> None:
    meta = _obj(event.get("tool_call_metadata"))
    response = meta.get("model_response")
    response_id = response.get("id") if isinstance(response, dict) else None
    if response_id is None or response_id not in seen:  # one model call per response
        seen.add(response_id)
        model, tokens = _oh_usage(response) if isinstance(response, dict) else (None, (None, None))
        finish = "stop" if event.get("action") in ("finish", "message") else None
        builder.model(model, tokens, finish)
    if event.get("action") in ("finish", "message", "think", "system"):
        return
    obs = results.get(event.get("id"))
    args = _obj(event.get("args"))
    keep = {k: args[k] for k in _OH_KEPT_ARGUMENTS if k in args}
    # The parsed object itself: its fingerprint is its JSON text's (LogBuilder.tool)
    arguments = keep or {k: v for k, v in args.items() if k != "thought"}
    content = error = None
    if obs is not None:
        content = _text(obs.get("content"))
        error = _oh_error(obs, content)
    name = str(meta.get("function_name") or event.get("action"))
    builder.tool(name, meta.get("tool_call_id"), arguments, content, error)


def _oh_state(event: Mapping[str, Any], builder: LogBuilder) -> None:
    extras = _obj(event.get("extras"))
    state = extras.get("agent_state")
    reason = str(extras.get("reason") or event.get("content") or "")
    if state == "error":
        kind = next((k for p, k in _OH_LIMITS if p.search(reason)), "AgentError")
        builder.end_run((kind, reason or "agent state error"))
    elif state in ("finished", "stopped", "awaiting_user_input"):
        builder.end_run(("CancelledError", "agent stopped") if state == "stopped" else None)


# --- Claude Code ---------------------------------------------------------------------------------


def claude_code(lines: Iterable[tuple[int, Any]], builder: LogBuilder) -> list[str]:
    """One Claude Code session: ``(line number, object)`` pairs; returns odd lines skipped."""
    pending: dict[str, tuple[str, Any]] = {}  # tool_use id -> (name, arguments)
    last_message: str | None = None
    problems: list[str] = []
    for number, line in lines:
        kind = line.get("type") if isinstance(line, dict) else None
        message = line.get("message") if isinstance(line, dict) else None
        if kind == "result":
            subtype = str(line.get("subtype") or "")
            builder.end_run(None if subtype == "success" else ("ClaudeAgentResult", subtype))
        elif kind in ("user", "assistant") and isinstance(message, dict):
            if kind == "assistant":
                last_message = _cc_assistant(message, last_message, pending, builder)
            else:
                _cc_user(message, pending, builder)
        elif kind not in ("summary", "system", "file-history-snapshot", None):
            problems.append(f"line {number}: unknown line type {kind!r}")
    builder.end_run()
    return problems


def _cc_assistant(
    message: Mapping[str, Any], last: str | None, pending: dict[str, tuple[str, Any]],
    builder: LogBuilder,
) -> str | None:  # fmt: skip
    # Claude Code writes one line per content block; the blocks of one response share its id.
    message_id = message.get("id")
    if message_id is None or message_id != last:
        usage = _obj(message.get("usage"))
        tin = _int(usage.get("input_tokens"))
        if tin is not None:
            for extra in ("cache_read_input_tokens", "cache_creation_input_tokens"):
                tin += _int(usage.get(extra)) or 0
        builder.model(message.get("model"), (tin, _int(usage.get("output_tokens"))),
                      message.get("stop_reason"))  # fmt: skip
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "tool_use":
            arguments = block.get("input")  # an object as it is (tool_content), else as JSON
            if not isinstance(arguments, dict):
                arguments = json.dumps(arguments, sort_keys=True, default=str)
            pending[str(block.get("id"))] = (str(block.get("name") or "unknown"), arguments)
    return message_id if isinstance(message_id, str) else None


def _cc_user(
    message: Mapping[str, Any], pending: dict[str, tuple[str, Any]], builder: LogBuilder
) -> None:
    content = message.get("content")
    blocks: Sequence[Any] = content if isinstance(content, list) else ()
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        builder.start_run()
        return
    for block in results:
        call_id = str(block.get("tool_use_id"))
        name, arguments = pending.pop(call_id, ("unknown", ""))
        text = _text(block.get("content"))
        error = None
        if block.get("is_error") is True:
            error = ("is_error", last_line(text))
        elif name == "Bash" and (kind := shell_error(text)) is not None:
            error = (kind, last_line(text))
        builder.tool(name, call_id, arguments, text, error)
