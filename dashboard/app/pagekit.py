"""What every page does the same way: its header, the shared filters, the live refresh, and the
states where there is nothing to chart (no store, a locked store, an empty store, an empty
window).

A page is a function ``body(ctx)`` handed to :func:`render_page`; it reads every number through
``ctx.gw`` (the query gateway of :func:`loopwatch.dashboard.app.source.gateway`). In live mode the
body runs inside ``st.fragment(run_every=...)``, so only it refreshes, not the sidebar.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import streamlit as st
from loopwatch.queries.analysis.alerts import AlertThresholds
from loopwatch.queries.analysis.gateway import (
    QueryError,
    QueryGateway,
    QueryTimeoutError,
    parse_duration,
)
from loopwatch.queries.store.database import StoreError, StoreLockedError, StoreNotFoundError

from . import settings
from .filters import Filters, bucket_seconds, utc_now
from .shared_memo import shared, store_version
from .source import DataSource, current_source, gateway

T = TypeVar("T")

__all__ = [
    "FILTERS_KEY",
    "REFRESH_KEY",
    "PageContext",
    "clip_text",
    "current_filters",
    "empty_store",
    "md_text",
    "render_page",
]

FILTERS_KEY = "loopwatch.filters"
"""Where ``app.py`` leaves the sidebar's :class:`Filters` in the session state."""
REFRESH_KEY = "loopwatch.auto_refresh"
"""The sidebar's auto-refresh toggle (live mode only)."""

_MD_SPECIAL = set("\\`*_{}[]()<>#+-.!|~$:")


def md_text(text: str) -> str:
    """``text`` escaped for Streamlit markdown, so user data shows as written, never as markup."""
    out = []
    for ch in str(text):
        if ch in _MD_SPECIAL:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append(" ")
        elif not ch.isprintable():
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else "?")
        else:
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class PageContext:
    """What a page body gets: the gateway, the filters, the time this refresh reads at."""

    gw: QueryGateway
    filters: Filters
    now: datetime
    source: DataSource
    task_types: tuple[dict[str, Any], ...]
    """``task_types`` rows (task_type, runs, first_run, last_run) of the window and filters."""

    def memo_key(self, name: str) -> tuple[Any, ...]:
        """A key for results that depend on the window's runs only: the store and its version
        (:func:`~.shared_memo.store_version`: every committed write changes it), the filters,
        and each task type's run count and last run (runs that aged out change it). A slider
        move or a widget click on the same data reuses what was computed."""
        rows = tuple((r["task_type"], r["runs"], r["last_run"]) for r in self.task_types)
        types = self.filters.task_type_list
        version = store_version(self.source.path)
        return (
            name,
            str(self.source.path),
            version,
            self.filters.window_label,
            None if types is None else tuple(types),
            rows,
        )

    def memo(self, name: str, compute: Callable[[], T]) -> T:
        """``compute()`` once while the window's runs stay the same (:meth:`memo_key`): kept in
        the session, and shared with other sessions of this process (:func:`~.shared_memo.shared`);
        pages that show the same analysis share it by ``name``."""
        slot = f"loopwatch.memo.{name}"
        key = self.memo_key(name)
        cached = st.session_state.get(slot)
        if cached is not None and cached[0] == key:
            value: T = cached[1]
            return value
        value = shared(key, compute)
        st.session_state[slot] = (key, value)
        return value

    def window(self) -> dict[str, Any]:
        """``since`` and ``task_types`` of the filters, at this refresh's ``now``."""
        return self.filters.params(self.now)

    @property
    def first_run(self) -> datetime:
        first: datetime = min(r["first_run"] for r in self.task_types)
        return first

    @property
    def last_run(self) -> datetime:
        last: datetime = max(r["last_run"] for r in self.task_types)
        return last

    @property
    def span(self) -> timedelta:
        """From the window's first run to the later of its last run and now (live) or its
        last run (file), at least one minute: what time axes cover."""
        end = self.now if self.source.mode == "live" else self.last_run
        return max(end - self.first_run, timedelta(minutes=1))

    def bucket_s(self, target: int = 60) -> int:
        """A round bucket width for about ``target`` points over :attr:`span`."""
        return bucket_seconds(self.span, target=target)

    def alert_step(self, short_window_s: float) -> int:
        """Seconds between alert evaluations in a chart: a third of the short window, or
        coarser so that the window holds at most about 600 evaluations."""
        return max(1, int(short_window_s // 3), int(self.span.total_seconds() // 600))

    def alert_history(self, t: AlertThresholds) -> list[dict[str, Any]]:
        """The repeated_error alert evaluated over the window, every :meth:`alert_step` seconds
        (the ``repeated_error_alert_history`` query), per task type."""
        short_s = parse_duration(t.short_window).total_seconds()
        return self.gw.run(
            "repeated_error_alert_history",
            **self.window(),
            step_s=self.alert_step(short_s),
            short_window_s=short_s,
            baseline_window_s=parse_duration(t.baseline_window).total_seconds(),
            factor=t.repeated_error_factor,
            min_ratio=t.repeated_error_min_ratio,
            min_runs=t.min_runs,
            max_rows=200_000,
        ).records()

    @property
    def runs(self) -> int:
        return sum(int(r["runs"]) for r in self.task_types)


def current_filters() -> Filters:
    """The sidebar's filters (defaults when a page runs without ``app.py``)."""
    f = st.session_state.get(FILTERS_KEY)
    return f if isinstance(f, Filters) else Filters()


def render_page(title: str, caption: str, body: Callable[[PageContext], None]) -> None:
    """Header, then ``body`` under the filters; refreshed every few seconds in live mode."""
    st.title(title)
    st.caption(caption)
    f = current_filters()
    for problem in f.problems:
        st.warning(problem, icon=":material/warning:")
    source = current_source()
    every: float | None = None
    if source.mode == "live" and st.session_state.get(REFRESH_KEY, True):
        try:
            every = settings.refresh_seconds()
        except settings.SettingsError as exc:
            st.warning(str(exc))

    def run() -> None:
        _run_body(body, f, source)

    if every is None:
        run()
    else:
        st.fragment(run, run_every=every)()


def _run_body(body: Callable[[PageContext], None], f: Filters, source: DataSource) -> None:
    try:
        gw = gateway()
    except StoreError as exc:
        _store_problem(exc, source)
        return
    try:
        now = utc_now()
        rows = gw.run("task_types", since=f.since(now), max_rows=100_000).records()
        # a window with runs means a store with runs: the whole store is read only when not
        if not rows and empty_store(gw):
            _empty_store(source)
            return
        if f.task_types:
            rows = [r for r in rows if r["task_type"] in f.task_types]
        if not rows:
            _empty_window(gw, f)
            return
        body(PageContext(gw, f, now, source, tuple(rows)))
    except QueryTimeoutError as exc:
        st.warning(f"{exc}. Narrow the time window or the task types.", icon=":material/timer:")
    except QueryError as exc:
        st.error(f"A query failed: {exc}", icon=":material/block:")
    finally:
        gw.con.close()


def empty_store(gw: QueryGateway) -> bool:
    """True when the store holds no run at all."""
    return len(gw.run("task_types", max_rows=1)) == 0


def _empty_window(gw: QueryGateway, f: Filters) -> None:
    latest = gw.run("task_types", max_rows=100_000).records()
    which = ""
    if f.task_types:
        which = " for " + ", ".join(f"“{md_text(t)}”" for t in f.task_types)
        latest = [r for r in latest if r["task_type"] in f.task_types]
    st.info(
        f"No runs in the window ({md_text(f.window_label.lower())}){which}.",
        icon=":material/search_off:",
    )
    if latest:
        last = max(r["last_run"] for r in latest)
        st.markdown(
            f"The latest matching run started at **{last:%Y-%m-%d %H:%M:%S} UTC**: choose a "
            "longer time window in the sidebar (or *All time*)."
        )
    elif f.task_types:
        st.markdown(
            "The store has no runs of these task types at all: check the spelling, or clear "
            "the task type filter in the sidebar."
        )


def _store_problem(exc: StoreError, source: DataSource) -> None:
    path = str(source.path)
    if isinstance(exc, StoreNotFoundError):
        st.error(f"No store at {path}.", icon=":material/inbox:")
        st.markdown(
            "Point the dashboard at a store file: `loopwatch dashboard PATH` (or set "
            "`LOOPWATCH_DB`), or start live mode with `loopwatch serve --db PATH` and send "
            "spans to it. To see everything with made-up data first: `loopwatch demo`."
        )
    elif isinstance(exc, StoreLockedError):
        st.error("The store file is locked by another process.", icon=":material/lock:")
        st.markdown(
            "DuckDB lets one process hold a file. If an agent writes it in file mode "
            "(`instrument(store=...)`), open the dashboard after the run ends; for a live "
            "view, run `loopwatch serve --db PATH` instead and send spans to it over OTLP: "
            "it serves this dashboard from the same process."
        )
    else:
        st.error("The store cannot be read.", icon=":material/block:")
    st.code(str(exc), language=None)


def _empty_store(source: DataSource) -> None:
    where = "this live store" if source.mode == "live" else f"`{md_text(str(source.path))}`"
    st.info(f"No runs in {where} yet.", icon=":material/inbox:")
    st.markdown(
        "Send runs to it from your agents, or run the demo to see every chart with a "
        "simulated fleet:"
    )
    st.code(
        "# live mode: agents send spans over OTLP to loopwatch serve\n"
        "from loopwatch.instrumentation import instrument, run\n"
        'instrument(otlp_endpoint="http://127.0.0.1:4318")\n'
        'result = run(model, tools, "Where is order A-17?", task_type="support_ticket")\n'
        "\n"
        "# file mode: one process writes the store, then `loopwatch dashboard PATH`\n"
        'instrument(store="loopwatch.duckdb")\n'
        "\n"
        "# or see it all with a simulated fleet:\n"
        "#   loopwatch demo",
        language="python",
    )


SHOWN_CHARS = 60
"""Longest label shown whole in a table cell; longer ones are cut, the full value in a tooltip."""


def clip_text(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, so one long value (a 10,000-character
    task type) cannot stretch a table; show the full value as a tooltip (``title``)."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape_html(text: str) -> str:
    """HTML-escaped text (for the few places that render HTML)."""
    return html.escape(str(text))
