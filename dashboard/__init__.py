"""The dashboard, the loopwatch CLI and the serve process.

- :mod:`.cli`: the ``loopwatch`` command; :mod:`.server`: ``loopwatch serve``;
- :mod:`.app`: the Streamlit pages; :mod:`.demo`: the demo fleet.
"""

from loopwatch.instrumentation.runtime.lazy import moved_modules

__all__: list[str] = []

# Modules that moved into subpackages keep their old import paths (docs/architecture.md,
# "Old import paths"); type checkers read the OLD.pyi stubs beside this file.
_MOVED: dict[str, str] = {
    "api": ".server.api",
    "charts": ".app.charts",
    "cli_args": ".cli.args",
    "cli_demo": ".cli.demo",
    "cli_import": ".cli.import_logs",
    "cli_report": ".cli.report",
    "cli_report_text": ".cli.report_text",
    "cli_serve": ".cli.serve",
    "cli_text": ".cli.text",
    "cli_upgrade": ".cli.upgrade",
    "filters": ".app.filters",
    "fleet": ".demo.fleet",
    "ingest": ".server.ingest",
    "pagekit": ".app.pagekit",
    "ports": ".server.ports",
    "serve": ".server.serve",
    "settings": ".app.settings",
    "source": ".app.source",
    "summary": ".app.summary",
    "theme": ".app.theme",
    "ui": ".app.ui",
}
moved_modules(__name__, _MOVED)
