"""The loopwatch dashboard: ``streamlit run`` this file (``loopwatch serve`` and
``loopwatch dashboard PATH`` do).

The sidebar holds the filters every page shares (time window, task types), mirrored in the URL so
a view can be shared; the pages live in ``pages/`` and read every number through the query
gateway of :mod:`loopwatch.dashboard.app.source`.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from loopwatch.dashboard.app.filters import (
    DEFAULT_WINDOW,
    WINDOWS,
    Filters,
    filters_from_params,
    filters_to_params,
    utc_now,
)
from loopwatch.dashboard.app.pagekit import FILTERS_KEY, REFRESH_KEY
from loopwatch.dashboard.app.source import current_source, gateway
from loopwatch.dashboard.app.theme import app_icon
from loopwatch.queries.analysis.gateway import QueryError
from loopwatch.queries.store.database import StoreError

_HERE = Path(__file__).parent
_WINDOW_KEY = "loopwatch.window"
_TYPES_KEY = "loopwatch.task_types"
_LOADED_KEY = "loopwatch.url_loaded"


def _known_task_types(f: Filters) -> list[str]:
    try:
        gw = gateway()
    except StoreError:
        return []
    try:
        res = gw.run("task_types", since=f.since(utc_now()), max_rows=1000)
        return [str(t) for t in res.column("task_type")]
    except QueryError:
        return []
    finally:
        gw.con.close()


def _sidebar() -> Filters:
    if not st.session_state.get(_LOADED_KEY):
        params = {k: st.query_params.get_all(k) for k in ("window", "task_type")}
        first = filters_from_params({k: v for k, v in params.items() if v})
        st.session_state[_WINDOW_KEY] = first.window
        st.session_state[_TYPES_KEY] = list(first.task_types)
        st.session_state["loopwatch.url_problems"] = first.problems
        st.session_state[_LOADED_KEY] = True

    source = current_source()
    with st.sidebar:
        st.markdown("### :material/autorenew: loopwatch")
        if source.mode == "live":
            st.caption(f"Live · {source.path}")
        else:
            st.caption(f"File (read-only) · {source.path}")

        window_options = list(WINDOWS)
        current = st.session_state.get(_WINDOW_KEY, DEFAULT_WINDOW)
        if current not in window_options:
            window_options.append(current)
        window = st.selectbox(
            "Time window",
            window_options,
            key=_WINDOW_KEY,
            format_func=lambda w: WINDOWS.get(w, f"Last {w}"),
        )
        draft = Filters(window=window)
        options = _known_task_types(draft)
        chosen = [t for t in st.session_state.get(_TYPES_KEY, []) if isinstance(t, str)]
        for t in chosen:
            if t not in options:
                options.append(t)
        st.session_state[_TYPES_KEY] = chosen
        task_types = st.multiselect(
            "Task types",
            options,
            key=_TYPES_KEY,
            placeholder="All task types",
            help="Leave empty for all. The address bar keeps the choice, so the view can be "
            "shared.",
        )
        if source.mode == "live":
            st.toggle("Auto-refresh", value=True, key=REFRESH_KEY)
        st.caption("The address holds the filters: copy it to share this view.")

    problems = st.session_state.get("loopwatch.url_problems", ())
    f = Filters(window=window, task_types=tuple(task_types), problems=tuple(problems))
    st.session_state["loopwatch.url_problems"] = ()
    wanted = filters_to_params(f)
    for key in ("window", "task_type"):
        if key in wanted:
            st.query_params[key] = wanted[key]
        elif key in st.query_params:
            del st.query_params[key]
    return f


st.set_page_config(
    page_title="loopwatch",
    page_icon=app_icon(),
    layout="wide",
    initial_sidebar_state="expanded",
)

pages = [
    st.Page(
        str(_HERE / "app_pages" / "overview.py"),
        title="Overview",
        icon=":material/space_dashboard:",
        url_path="overview",
        default=True,
    ),
    st.Page(
        str(_HERE / "app_pages" / "limits.py"),
        title="Limits",
        icon=":material/straighten:",
        url_path="limits",
    ),
    st.Page(
        str(_HERE / "app_pages" / "loops.py"),
        title="Loops & errors",
        icon=":material/sync_problem:",
        url_path="loops",
    ),
    st.Page(
        str(_HERE / "app_pages" / "runs.py"),
        title="Runs",
        icon=":material/list_alt:",
        url_path="runs",
    ),
    st.Page(
        str(_HERE / "app_pages" / "history.py"),
        title="History & shadow",
        icon=":material/history:",
        url_path="history",
    ),
]
nav = st.navigation(pages)
st.session_state[FILTERS_KEY] = _sidebar()
nav.run()
