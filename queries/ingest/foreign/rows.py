"""A reconstructed foreign run as store rows: its ``runs`` row and the derived columns of its
spans (docs/foreign.md, "What is stored").

The spans themselves were stored as received; :func:`derived_rows` gives, per span of the run,
the typed columns a loopwatch span would have had (``run_id``, ``task_type``, ``step``,
``operation``, tool status and fingerprints, error code and fingerprint), which the store sets
on the stored rows (:meth:`~loopwatch.queries.store.database.Store.write_derived`). The run's
row has ``source = 'foreign'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pyarrow as pa
from loopwatch.instrumentation.runtime import semconv as sc
from loopwatch.instrumentation.runtime.fingerprint import (
    call_fingerprint,
    error_fingerprint,
    result_fingerprint,
)
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.reasons import LIMIT_OF, OUTCOME_OF, StopReason

from ...store.columns import SpanRecord, runs_table
from .conventions import SpanView
from .reconstruct import ForeignRun, tool_error

__all__ = ["DERIVED_SCHEMA", "FOREIGN_SOURCE", "derived_rows", "run_record", "span_records"]

FOREIGN_SOURCE: Final = "foreign"
"""The ``runs.source`` of runs reconstructed from other instrumentations' spans."""
DERIVED: Final = "loopwatch.stop_reason.derived"
"""Run span attribute (true): the stop reason was derived from the spans, not decided."""

DERIVED_SCHEMA: Final = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("start_ns", pa.int64()),
        ("run_id", pa.string()),
        ("task_type", pa.string()),
        ("step", pa.int32()),
        ("operation", pa.string()),
        ("tool_name", pa.string()),
        ("tool_status", pa.string()),
        ("tool_fingerprint", pa.string()),
        ("result_fingerprint", pa.string()),
        ("error_code", pa.string()),
        ("error_fingerprint", pa.string()),
        ("stop_reason", pa.string()),
        ("outcome", pa.string()),
    ]
)
"""The derived columns set on a foreign run's stored spans."""


_OUTCOMES: Final = {r.value: o.value for r, o in OUTCOME_OF.items()}
_LIMITS: Final = {r.value: limit for r, limit in LIMIT_OF.items()}
_USED: Final = {b: sc.budget_used(b) for b in ("steps", "model_calls", "tool_calls", "tokens",
                                               "cost_usd")}  # fmt: skip
_PEAK_OF: Final = (
    (sc.PROGRESS_MAX_SAME_CALL, StopReason.REPEATED_TOOL_CALL.value),
    (sc.PROGRESS_MAX_SAME_ERROR, StopReason.REPEATED_ERROR.value),
)


def _outcome(reason: str) -> str:
    return _OUTCOMES.get(reason, "unknown")


def _limit_attributes(limits: LoopLimits) -> dict[str, Any]:
    """``loopwatch.budget.<b>.limit`` of each budget on, per limits object (by identity)."""
    known = _LIMIT_ATTRIBUTES.get(id(limits))
    if known is not None and known[0] is limits:
        return known[1]
    attrs: dict[str, Any] = {}
    for b in sc.BUDGETS:
        value = limits.limit_of(b)
        if value is not None:
            attrs[sc.budget_limit(b)] = float(value)
    if len(_LIMIT_ATTRIBUTES) >= 256:
        _LIMIT_ATTRIBUTES.clear()
    _LIMIT_ATTRIBUTES[id(limits)] = (limits, attrs)
    return attrs


_LIMIT_ATTRIBUTES: dict[int, tuple[LoopLimits, dict[str, Any]]] = {}


def run_record(run: ForeignRun) -> SpanRecord:
    """The run as a run-span record, from which the store's ``runs`` row is made."""
    view, recorded, replay = run.run, run.recorded, run.replay
    reason = run.stop.reason
    attrs: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
        sc.GEN_AI_AGENT_NAME: run.agent_name,
        sc.RUN_ID: run.run_id,
        sc.TASK_TYPE: run.task_type,
        sc.STOP_REASON: reason,
        sc.OUTCOME: _outcome(reason),
        sc.STOP_EXPLANATION: run.stop.explanation,
        DERIVED: True,
        sc.LIMITS_VERSION: run.limits.version,
        _USED["steps"]: float(len(recorded.turns)),
        _USED["model_calls"]: float(sum(1 for m, _ in run.steps if m is not None)),
        _USED["tool_calls"]: float(recorded.tool_calls),
    }
    for key, detector in _PEAK_OF:
        attrs[key] = replay.peaks.get(detector, 0)
    attrs[sc.REPLAY_STOP_REASON] = replay.decision
    attrs[sc.REPLAY_STEP] = replay.step
    limit = _LIMITS.get(reason)
    if limit is not None:
        attrs[sc.LIMIT] = limit
    if replay.explanation:
        attrs[sc.REPLAY_EXPLANATION] = replay.explanation
    if run.conversation_id:
        attrs[sc.GEN_AI_CONVERSATION_ID] = run.conversation_id
    tin = [m.input_tokens for m, _ in run.steps if m is not None and m.input_tokens is not None]
    tout = [m.output_tokens for m, _ in run.steps if m is not None and m.output_tokens is not None]
    if tin or tout:
        attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = sum(tin)
        attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = sum(tout)
        attrs[_USED["tokens"]] = float(sum(tin) + sum(tout))
    cost = sum(run.costs) if run.costs else view.cost_usd
    if cost is not None:
        attrs[_USED["cost_usd"]] = cost
        attrs[sc.COST_USD] = cost
    attrs.update(_limit_attributes(run.limits))
    for b, v in replay.saved.items():
        attrs[sc.REPLAY_SAVED_PREFIX + b] = v
    for name, peak in replay.peaks.items():
        attrs[sc.REPLAY_PEAK_PREFIX + name] = peak
    return SpanRecord(
        view.trace_id, view.span_id, f"{sc.SPAN_RUN} {run.agent_name}", view.start_ns,
        view.end_ns, view.parent_id, "INTERNAL", "ERROR" if view.error else "UNSET",
        view.status_message, view.service, attrs,
    )  # fmt: skip


def _tool_row(tool: SpanView, step: int) -> dict[str, Any]:
    name = tool.tool_name or "unknown"
    row: dict[str, Any] = {
        "operation": sc.OP_EXECUTE_TOOL,
        "tool_name": name,
        "step": step,
        "tool_fingerprint": tool.call_fp or call_fingerprint(name, {}),
        "tool_status": "ok",
        "result_fingerprint": tool.result_fp,
    }
    error = tool_error(tool)
    if error is not None:
        row["tool_status"] = "error"
        row["error_code"] = error[0]
        row["error_fingerprint"] = error_fingerprint(name, error[0], error[1])
        if tool.result_fp is None:
            row["result_fingerprint"] = result_fingerprint(error[1], name)
    return row


def derived_rows(runs: Sequence[ForeignRun]) -> list[dict[str, Any]]:
    """Per span of each run, the derived columns (``trace_id`` and ``span_id`` say which)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        base = {"run_id": run.run_id, "task_type": run.task_type}
        rows.append(
            {
                **base,
                "trace_id": run.run.trace_id,
                "span_id": run.run.span_id,
                "start_ns": run.run.start_ns,
                "operation": sc.OP_INVOKE_AGENT,
                "stop_reason": run.stop.reason,
                "outcome": _outcome(run.stop.reason),
            }
        )
        placed = {run.run.span_id}
        for step, (model, tools) in enumerate(run.steps, 1):
            if model is not None:
                placed.add(model.span_id)
                rows.append(
                    {**base, "trace_id": model.trace_id, "span_id": model.span_id,
                     "start_ns": model.start_ns,
                     "operation": sc.OP_CHAT, "step": step}
                )  # fmt: skip
            for tool in tools:
                placed.add(tool.span_id)
                rows.append(
                    {**base, "trace_id": tool.trace_id, "span_id": tool.span_id,
                     "start_ns": tool.start_ns,
                     **_tool_row(tool, step)}
                )  # fmt: skip
        for view in run.spans:
            if view.span_id not in placed:
                rows.append(
                    {**base, "trace_id": view.trace_id, "span_id": view.span_id,
                     "start_ns": view.start_ns}
                )  # fmt: skip
    return rows


def derived_table(runs: Sequence[ForeignRun]) -> tuple[pa.Table, pa.Table | None]:
    """The derived span columns and the ``runs`` rows of ``runs``, as Arrow tables."""
    # from_pylist reads the dicts in C++ (a key missing is NULL): ~3x a list per column
    table = pa.Table.from_pylist(derived_rows(runs), schema=DERIVED_SCHEMA)
    return table, runs_table([run_record(r) for r in runs], source=FOREIGN_SOURCE)


# derived column -> the attribute a loopwatch span carries it in
_ATTRIBUTE_OF: Final = {
    "run_id": sc.RUN_ID,
    "task_type": sc.TASK_TYPE,
    "step": sc.STEP_INDEX,
    "operation": sc.GEN_AI_OPERATION_NAME,
    "tool_name": sc.GEN_AI_TOOL_NAME,
    "tool_status": sc.TOOL_STATUS,
    "tool_fingerprint": sc.TOOL_FINGERPRINT,
    "result_fingerprint": sc.RESULT_FINGERPRINT,
    "error_code": sc.ERROR_CODE,
    "error_fingerprint": sc.ERROR_FINGERPRINT,
}


def span_records(run: ForeignRun) -> list[SpanRecord]:
    """The run's model-call and tool spans as records with the derived attributes, for runs
    that have no stored spans (recorded logs read by ``loopwatch import``): the columns of
    :func:`derived_rows` as attributes, in its order, built straight into each record's."""
    base: dict[str, Any] = {sc.RUN_ID: run.run_id, sc.TASK_TYPE: run.task_type}
    out: list[SpanRecord] = []
    placed = {run.run.span_id}
    for step, (model, tools) in enumerate(run.steps, 1):
        if model is not None:
            placed.add(model.span_id)
            _add_record(out, model, {**base, sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
                                     sc.STEP_INDEX: step})  # fmt: skip
        for tool in tools:
            placed.add(tool.span_id)
            attrs = base.copy()
            for k, v in _tool_row(tool, step).items():
                if v is not None:
                    attrs[_ATTRIBUTE_OF[k]] = v
            _add_record(out, tool, attrs)
    for view in run.spans:
        if view.span_id not in placed:
            _add_record(out, view, base.copy())
    return out


def _add_record(out: list[SpanRecord], view: SpanView, attrs: dict[str, Any]) -> None:
    if view.role is None:
        return
    if view.model is not None:
        attrs[sc.GEN_AI_REQUEST_MODEL] = view.model
    if view.input_tokens is not None:
        attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = view.input_tokens
    if view.output_tokens is not None:
        attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = view.output_tokens
    if view.tool_call_id is not None:
        attrs[sc.GEN_AI_TOOL_CALL_ID] = view.tool_call_id
    out.append(
        SpanRecord(
            view.trace_id, view.span_id, view.name, view.start_ns, view.end_ns,
            view.parent_id, "INTERNAL", "ERROR" if view.error else "UNSET",
            view.status_message, view.service, attrs,
        )
    )  # fmt: skip
