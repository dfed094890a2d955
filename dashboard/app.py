"""Placeholder dashboard page: what the store holds, read through the query gateway.

Replaced by the real dashboard; kept minimal on purpose. Runs in live mode (``loopwatch serve``)
and in file mode (``loopwatch dashboard PATH``) alike, through :mod:`loopwatch.dashboard.source`.
"""

from __future__ import annotations

import streamlit as st
from loopwatch.dashboard import source
from loopwatch.queries.gateway import QueryError
from loopwatch.queries.store import StoreError

st.set_page_config(page_title="loopwatch", layout="wide")
st.title("loopwatch")
where = source.current_source()
st.caption(f"{where.mode} mode: {where.path}")
try:
    gw = source.gateway()
    try:
        mix = gw.run("stop_reason_mix")
    finally:
        gw.con.close()
except (StoreError, QueryError) as exc:
    st.error(str(exc))
else:
    rows = mix.records()
    total = sum(int(r["runs"]) for r in rows) if rows and "runs" in mix.columns else 0
    st.metric("runs stored", total)
    if rows:
        st.dataframe(rows, use_container_width=True)
