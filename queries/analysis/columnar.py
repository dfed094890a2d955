"""Named queries read column by column (docs/queries.md, "Speed").

:func:`run_query_columns` runs a named query like :func:`~.gateway.run_query` (the same
``.sql`` file, parameter checks, row cap and time limit) and hands back its result as Arrow
columns converted to Python lists, one list per column. For results of hundreds of thousands
of rows that an analysis reads column by column (the successful runs a limits file is fit on),
this skips building a tuple per row and transposing them back.

A command that fits the same successful runs twice (``loopwatch report``: the limits file,
then the file with the spend-rate stop) reads them once (``recommend.read_usage``) and hands the
columns to both (``usage=``), as the dashboard's pages do.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .gateway import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    bind_params,
    query_spec,
)
from .timelimit import time_limited_cursor

__all__ = ["QueryColumns", "run_query_columns"]

_BATCH_ROWS = 100_000


@dataclass(frozen=True, slots=True)
class QueryColumns:
    """What a query returned, column by column."""

    name: str
    columns: dict[str, list[Any]]
    """Column name → its values (at most the row cap), in the query's order."""
    rows: int
    elapsed_ms: float
    truncated: bool
    """True when the query had more rows than the cap."""


def run_query_columns(
    con: Any,
    name: str,
    params: Mapping[str, Any] | None = None,
    /,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float | None = None,
) -> QueryColumns:
    """Run the named query on its own cursor of ``con`` and return its columns (at most
    ``max_rows`` rows; interrupted after ``timeout_s``, default :data:`DEFAULT_TIMEOUT_S`)."""
    spec = query_spec(name)
    bound = bind_params(spec, params)
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    start = time.perf_counter()
    with time_limited_cursor(con, name, timeout) as cur:
        reader = cur.sql(spec.sql, params=bound).to_arrow_reader(_BATCH_ROWS)
        batches, rows = [], 0
        for batch in reader:
            batches.append(batch)
            rows += batch.num_rows
            if rows > max_rows:
                break
        schema = reader.schema
    import pyarrow as pa  # the `store` extra, as DuckDB's Arrow output needs

    table = pa.Table.from_batches(batches, schema=schema).slice(0, max_rows)
    columns = {c: table.column(c).to_pylist() for c in table.column_names}
    elapsed_ms = (time.perf_counter() - start) * 1000.0
    return QueryColumns(name, columns, min(rows, max_rows), elapsed_ms, rows > max_rows)
