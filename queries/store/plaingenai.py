"""What spans from agents without loopwatch's instrumentation lack, filled in as the ``spans``
table is built (:mod:`.columns`; docs/foreign.md): a GenAI span's task type, a tool span's
status."""

from __future__ import annotations

from itertools import compress, repeat
from operator import eq
from typing import Any, Final

import pyarrow as pa
from loopwatch.instrumentation.runtime import semconv as sc

__all__ = ["GENAI_OPERATIONS", "fill_plain_genai", "lacks_genai_fields"]

GENAI_OPERATIONS: Final = (sc.OP_INVOKE_AGENT, sc.OP_CHAT, sc.OP_EXECUTE_TOOL)
"""The GenAI operations (``gen_ai.operation.name``) whose spans are a run, a step, a tool call."""
_STR: Final = frozenset({str})


def lacks_genai_fields(operations: list[Any], task_types: list[Any], statuses: list[Any]) -> bool:
    """Whether a GenAI span may lack its task type, or a tool span its status (a value of
    another type counts as lacking: its column refuses it), from the raw values: batches that
    lack neither (loopwatch's own spans, an import's) skip :func:`fill_plain_genai` and the
    import of ``pyarrow.compute`` (~0.08 CPU s, paid again in each import worker process)."""
    tool = sc.OP_EXECUTE_TOOL
    # in C (map, compress, set: ~4x faster than a loop over the rows), as serve's batches go
    tool_statuses = compress(statuses, map(eq, operations, repeat(tool)))
    if not set(map(type, tool_statuses)) <= _STR:
        return True
    if set(map(type, task_types)) <= _STR:
        return False
    return any(
        operation in GENAI_OPERATIONS and type(task_type) is not str
        for operation, task_type in zip(operations, task_types, strict=True)
    )


def fill_plain_genai(columns: dict[str, pa.Array], unknown: str) -> None:
    """What can be known of spans from agents without loopwatch's instrumentation: a GenAI span
    without ``loopwatch.task_type`` gets task type ``unknown`` (as its run does), a tool span
    without ``loopwatch.tool.status`` the status its span status says (ERROR: ``error``), the
    same rule the metrics use. ``unknown``: the task type given (``columns.UNKNOWN``)."""
    task_type, operation = columns["task_type"], columns["operation"]
    if task_type.null_count == 0 and columns["tool_status"].null_count == 0:
        return
    import pyarrow.compute as pc  # here: readers of a store (report) never need it

    # built here, not at import: pa.array() of a list imports pandas, which readers never need
    genai_operations = pa.array(GENAI_OPERATIONS)
    genai = pc.fill_null(pc.is_in(operation, value_set=genai_operations), False)
    missing = pc.and_(genai, pc.is_null(task_type))
    if pc.any(missing).as_py():
        columns["task_type"] = pc.if_else(missing, unknown, task_type)
    tool_status = columns["tool_status"]
    plain_tool = pc.and_(
        pc.fill_null(pc.equal(operation, sc.OP_EXECUTE_TOOL), False), pc.is_null(tool_status)
    )
    if pc.any(plain_tool).as_py():
        derived = pc.if_else(pc.equal(columns["status_code"], "ERROR"), "error", "ok")
        columns["tool_status"] = pc.if_else(plain_tool, derived, tool_status)
