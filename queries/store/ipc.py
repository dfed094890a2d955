"""Arrow tables across a process boundary: a span batch's tables as Arrow IPC stream bytes and
back (serve's decoder processes, the import's worker processes; docs/architecture.md)."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["table_bytes", "table_from_bytes"]


def table_bytes(table: pa.Table | None) -> bytes | None:
    """``table`` as Arrow IPC stream bytes (``None`` stays ``None``)."""
    if table is None:
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return bytes(sink.getvalue())


def table_from_bytes(data: bytes | None) -> pa.Table | None:
    """The table :func:`table_bytes` wrote (``None`` stays ``None``)."""
    return pa.ipc.open_stream(data).read_all() if data is not None else None
