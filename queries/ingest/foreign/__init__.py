"""Runs from other instrumentations' spans (GenAI semantic conventions, OpenInference,
OpenLLMetry): conventions read (:mod:`.conventions`), stop reasons derived (:mod:`.reasons`),
traces rebuilt into runs (:mod:`.reconstruct`, :mod:`.rows`) and live mode's completeness rule
(:mod:`.assembler`). See docs/foreign.md.
"""

from .assembler import DEFAULT_TASK_TYPE_KEYS, ForeignOptions, TraceAssembler
from .conventions import SpanView, views_of
from .reconstruct import ForeignRun, runs_of_trace
from .rows import FOREIGN_SOURCE, derived_table

__all__ = [
    "DEFAULT_TASK_TYPE_KEYS",
    "FOREIGN_SOURCE",
    "ForeignOptions",
    "ForeignRun",
    "SpanView",
    "TraceAssembler",
    "derived_table",
    "runs_of_trace",
    "views_of",
]
