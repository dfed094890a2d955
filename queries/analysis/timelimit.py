"""The query gateway's errors and its time limit: a cursor of its own, interrupted when the
time runs out (docs/queries.md). :mod:`.gateway` re-exports every name here."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "QueryError",
    "QueryFailedError",
    "QueryParameterError",
    "QueryTimeoutError",
    "UnknownQueryError",
    "time_limited_cursor",
]


class QueryError(Exception):
    """Base of every error the gateway raises."""


class UnknownQueryError(QueryError, LookupError):
    """No ``.sql`` file has that name."""


class QueryParameterError(QueryError, ValueError):
    """A parameter is unknown, missing, of the wrong type or out of range."""


class QueryTimeoutError(QueryError, TimeoutError):
    """The query ran past its time limit and was interrupted."""


class QueryFailedError(QueryError):
    """DuckDB raised while running the query (the original error is chained)."""


@contextmanager
def time_limited_cursor(con: Any, name: str, timeout_s: float) -> Iterator[Any]:
    """A cursor of ``con`` of its own, interrupted after ``timeout_s`` (so interrupting it never
    touches other queries sharing ``con``) and closed on the way out. What the block raises
    becomes :class:`QueryTimeoutError` when the time ran out, else :class:`QueryFailedError`
    naming the query ``name``."""
    cur = con.cursor()
    timed_out = threading.Event()

    def _interrupt() -> None:
        timed_out.set()
        cur.interrupt()

    timer = threading.Timer(timeout_s, _interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield cur
    except Exception as exc:
        if timed_out.is_set():
            raise QueryTimeoutError(
                f"query {name!r} was interrupted after {timeout_s:g} s; "
                "narrow the time window or task types, or raise timeout_s"
            ) from exc
        raise QueryFailedError(f"query {name!r} failed: {exc}") from exc
    finally:
        timer.cancel()
        cur.close()
