"""The Streamlit dashboard as an ASGI app, for ``loopwatch serve`` (DESIGN §6: ``st.App``).

The script is ``dashboard/app.py``, the same one ``loopwatch dashboard PATH`` runs in file mode;
in live mode it reads the store that ``serve`` set with
:func:`~loopwatch.dashboard.source.set_live_store`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["app_script", "ui_app"]

# Streamlit reads these at import: no telemetry to Streamlit's servers, no browser opened.
_STREAMLIT_ENV = {
    "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
    "STREAMLIT_SERVER_HEADLESS": "true",
}


def app_script() -> Path:
    """The dashboard's Streamlit script."""
    return Path(__file__).parent / "app.py"


def ui_app() -> Any:
    """An ``st.App`` serving :func:`app_script` (start it with its lifespan on)."""
    for key, value in _STREAMLIT_ENV.items():
        os.environ.setdefault(key, value)
    import streamlit as st

    return st.App(app_script())


def run_file_dashboard(path: Path, *, host: str, port: int, out: Any) -> int:
    """Serve the dashboard over a store file no process is writing, opened read-only per page
    run (``loopwatch dashboard PATH``); returns the exit code when stopped (SIGINT/SIGTERM).

    Raises :class:`~loopwatch.queries.store.StoreError` when the file cannot be read (missing,
    locked by a writer, not a loopwatch store), before anything listens.
    """
    import socket

    import uvicorn
    from loopwatch.queries.store import connect_read_only

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
