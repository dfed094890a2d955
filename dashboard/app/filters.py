"""The filters every page shares (time window, task types), kept in the URL.

A view is shared by its address: ``?window=6h&task_type=support_ticket&task_type=refund``.
Reading and writing those parameters is plain Python here (:func:`filters_from_params`,
:func:`filters_to_params`), so it is tested without a browser; the sidebar in ``app.py`` puts
them on screen. Values from the URL are data, never markup or SQL: they are bound as query
parameters and shown as text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from loopwatch.queries.analysis.gateway import parse_duration

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_TASK_TYPES",
    "MAX_TEXT",
    "WINDOWS",
    "Filters",
    "bucket_seconds",
    "clean_text",
    "filters_from_params",
    "filters_to_params",
    "utc_now",
]

WINDOWS: dict[str, str] = {
    "5m": "Last 5 minutes",
    "15m": "Last 15 minutes",
    "1h": "Last hour",
    "6h": "Last 6 hours",
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "all": "All time",
}
"""The time windows offered, URL value → label. Other durations (``90m``) work from the URL."""
DEFAULT_WINDOW = "24h"
MAX_TASK_TYPES = 200
"""More task types than this in a URL are cut (a URL is not a bulk interface)."""
MAX_TEXT = 200
"""Filter texts are cut to this many characters."""


def utc_now() -> datetime:
    """Naive UTC now, the form ``runs.started_at`` has."""
    return datetime.now(UTC).replace(tzinfo=None)


def clean_text(value: str) -> str:
    """A filter text as the query gets it: cut to :data:`MAX_TEXT`, without NUL (which DuckDB
    strings cannot hold); everything else is kept and bound as a parameter."""
    return value.replace("\x00", "")[:MAX_TEXT]


@dataclass(frozen=True, kw_only=True, slots=True)
class Filters:
    """The shared filters: a window ending now and the task types (empty = all)."""

    window: str = DEFAULT_WINDOW
    """A key of :data:`WINDOWS`, another duration like ``90m``, or ``all``."""
    task_types: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=(), compare=False)
    """What was wrong with the URL's values (shown as a warning, as text)."""

    @property
    def window_delta(self) -> timedelta | None:
        """The window's length, ``None`` for all time."""
        return None if self.window == "all" else parse_duration(self.window)

    @property
    def window_label(self) -> str:
        return WINDOWS.get(self.window, f"Last {self.window}")

    def since(self, now: datetime | None = None) -> datetime | None:
        """The window's start (naive UTC), recomputed at each refresh; ``None`` for all time."""
        delta = self.window_delta
        return None if delta is None else (now or utc_now()) - delta

    @property
    def task_type_list(self) -> list[str] | None:
        """The task types as the queries take them: ``None`` = all."""
        return list(self.task_types) or None

    def params(self, now: datetime | None = None) -> dict[str, object]:
        """``since`` and ``task_types`` for a named query."""
        return {"since": self.since(now), "task_types": self.task_type_list}


def filters_from_params(params: Mapping[str, str | Sequence[str]]) -> Filters:
    """Filters from URL parameters (``window``, repeated ``task_type``); bad values fall back to
    the defaults and are reported in ``problems``."""
    problems: list[str] = []
    window = _first(params.get("window")) or DEFAULT_WINDOW
    window = clean_text(window.strip())
    if window != "all":
        try:
            parse_duration(window)
        except ValueError:
            problems.append(
                f"Unknown time window {window!r} in the address: showing "
                f"{WINDOWS[DEFAULT_WINDOW].lower()}."
            )
            window = DEFAULT_WINDOW
    raw = params.get("task_type") or ()
    values = [raw] if isinstance(raw, str) else list(raw)
    task_types: list[str] = []
    for v in values:
        v = clean_text(v)
        if v and v not in task_types:
            task_types.append(v)
    if len(task_types) > MAX_TASK_TYPES:
        problems.append(f"Only the first {MAX_TASK_TYPES} task types of the address are used.")
        task_types = task_types[:MAX_TASK_TYPES]
    return Filters(window=window, task_types=tuple(task_types), problems=tuple(problems))


def filters_to_params(f: Filters) -> dict[str, str | list[str]]:
    """URL parameters for ``f`` (defaults left out, so a plain address stays plain)."""
    out: dict[str, str | list[str]] = {}
    if f.window != DEFAULT_WINDOW:
        out["window"] = f.window
    if f.task_types:
        out["task_type"] = list(f.task_types)
    return out


def _first(value: str | Sequence[str] | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value[0] if value else None


_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)


def bucket_seconds(span: timedelta, *, target: int = 60) -> int:
    """A round bucket width giving about ``target`` buckets over ``span``."""
    want = max(span.total_seconds() / target, 1.0)
    for b in _BUCKETS_S:
        if b >= want:
            return b
    return _BUCKETS_S[-1]
