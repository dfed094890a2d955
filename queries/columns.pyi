"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.store.columns`.
"""

from loopwatch.queries.store.columns import (
    RUN_COLUMNS as RUN_COLUMNS,
)
from loopwatch.queries.store.columns import (
    RUNS_SCHEMA as RUNS_SCHEMA,
)
from loopwatch.queries.store.columns import (
    SPAN_COLUMNS as SPAN_COLUMNS,
)
from loopwatch.queries.store.columns import (
    SPAN_TYPED_COLUMNS as SPAN_TYPED_COLUMNS,
)
from loopwatch.queries.store.columns import (
    SPANS_SCHEMA as SPANS_SCHEMA,
)
from loopwatch.queries.store.columns import (
    UNKNOWN as UNKNOWN,
)
from loopwatch.queries.store.columns import (
    EventRecord as EventRecord,
)
from loopwatch.queries.store.columns import (
    SpanBatch as SpanBatch,
)
from loopwatch.queries.store.columns import (
    SpanColumns as SpanColumns,
)
from loopwatch.queries.store.columns import (
    SpanRecord as SpanRecord,
)
from loopwatch.queries.store.columns import (
    record_from_span as record_from_span,
)
from loopwatch.queries.store.columns import (
    records_from_spans as records_from_spans,
)
from loopwatch.queries.store.columns import (
    runs_table as runs_table,
)
from loopwatch.queries.store.columns import (
    spans_table as spans_table,
)

__all__ = [
    "RUNS_SCHEMA",
    "RUN_COLUMNS",
    "SPANS_SCHEMA",
    "SPAN_COLUMNS",
    "SPAN_TYPED_COLUMNS",
    "UNKNOWN",
    "EventRecord",
    "SpanBatch",
    "SpanColumns",
    "SpanRecord",
    "record_from_span",
    "records_from_spans",
    "runs_table",
    "spans_table",
]
