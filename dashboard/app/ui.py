"""The Streamlit dashboard as an ASGI app, for ``loopwatch serve`` (docs/serve.md, "How it runs").

The script is ``dashboard/app/streamlit_app.py``, the same one ``loopwatch dashboard PATH`` runs
in file mode;
in live mode it reads the store that ``serve`` set with
:func:`~loopwatch.dashboard.app.source.set_live_store`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from loopwatch.instrumentation.runtime.settings import env_str
from loopwatch.instrumentation.runtime.validate import check_choice

from .theme import ACCENT

__all__ = [
    "INGEST_SWITCH_INTERVAL_S",
    "STREAMLIT_OPTIONS",
    "TOOLBAR_MODE_ENV",
    "app_script",
    "share_gil_with_ingest",
    "streamlit_options",
    "ui_app",
]

STREAMLIT_OPTIONS: dict[str, Any] = {
    # an ops dashboard never phones home: no usage statistics to Streamlit's servers (the
    # machine may have no network, and what users look at must not leave it)
    "browser.gatherUsageStats": False,
    # no "Deploy" button, rerun or clear-cache entries: the menu keeps the viewer's options only
    "client.toolbarMode": "viewer",
    "server.headless": True,
    "theme.primaryColor": ACCENT,
}
"""The Streamlit settings of every dashboard loopwatch serves. They win over
``.streamlit/config.toml``: Streamlit reads ``STREAMLIT_*`` variables only under
``streamlit run``, not in an ``st.App`` served by uvicorn, so they are applied as the command
line's flags would be."""

TOOLBAR_MODE_ENV = "LOOPWATCH_STREAMLIT_TOOLBAR"
TOOLBAR_MODES = ("auto", "developer", "viewer", "minimal")
"""Streamlit's toolbar modes :data:`TOOLBAR_MODE_ENV` may name."""
"""Set to ``developer`` (or ``auto``, ``minimal``) to change the toolbar, e.g. to work on the
dashboard; usage statistics stay off whatever the environment says."""


def streamlit_options() -> dict[str, Any]:
    """:data:`STREAMLIT_OPTIONS` with the toolbar mode of :data:`TOOLBAR_MODE_ENV`, if set."""
    options = dict(STREAMLIT_OPTIONS)
    mode = env_str(TOOLBAR_MODE_ENV)
    if mode is not None:
        options["client.toolbarMode"] = check_choice(TOOLBAR_MODE_ENV, mode, TOOLBAR_MODES)
    return options


INGEST_SWITCH_INTERVAL_S = 0.001
"""The interpreter's switch interval while the dashboard shares a process with ingest."""


def share_gil_with_ingest() -> None:
    """Let ingest's writer thread through while a page refreshes in the same process.

    A page refresh is mostly Python (Streamlit's script, rows, figures) and holds the GIL while
    it runs; the writer gives the GIL up many times per batch (each DuckDB call, each Arrow
    conversion) and, after each, waits for the interpreter's switch interval (5 ms) to get it
    back: measured, a busy Python thread makes a 6 ms batch take ~100 ms. At 1 ms it takes
    ~25 ms, for a few percent more switching (``benchmarks/bench_dashboard.py`` measures both).
    Only ever lowers the interval.
    """
    sys.setswitchinterval(min(sys.getswitchinterval(), INGEST_SWITCH_INTERVAL_S))


def app_script() -> Path:
    """The dashboard's Streamlit script."""
    return Path(__file__).parent / "streamlit_app.py"


def ui_app() -> Any:
    """An ``st.App`` serving :func:`app_script` (start it with its lifespan on)."""
    import streamlit as st
    from streamlit.web import bootstrap

    app = st.App(app_script())  # first: it pins the folder of the script's config.toml
    bootstrap.load_config_options(streamlit_options())
    return app


def run_file_dashboard(path: Path, *, host: str, port: int, out: Any) -> int:
    """Serve the dashboard over a store file no process is writing, opened read-only per page
    run (``loopwatch dashboard PATH``); returns the exit code when stopped (SIGINT/SIGTERM).

    Raises :class:`~loopwatch.queries.store.StoreError` when the file cannot be read (missing,
    locked by a writer, not a loopwatch store), before anything listens.
    """
    import socket

    import uvicorn
    from loopwatch.queries.store.database import connect_read_only

    connect_read_only(path).close()  # fail now, with the store's message, not in the page
    os.environ["LOOPWATCH_DB"] = str(path)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait in the backlog until the server takes them
    shown = f"[{host}]" if ":" in host else host
    print(f"dashboard  http://{shown}:{sock.getsockname()[1]}/", file=out, flush=True)
    print(f"store      {path} (read-only)", file=out, flush=True)
    config = uvicorn.Config(ui_app(), lifespan="on", log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
