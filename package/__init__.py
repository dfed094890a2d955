"""loopwatch: stop conditions for LLM agent loops, and observability of why they stopped.

The code lives in the subpackages, one per folder of the repository:
:mod:`loopwatch.instrumentation` (the runtime: standard library only; telemetry with the
``otel`` extra), :mod:`loopwatch.queries` (the store and the named queries: ``store`` extra) and
:mod:`loopwatch.dashboard` (the ``loopwatch`` command, ``serve`` and the dashboard:
``dashboard`` extra). Importing this package loads none of them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__: str = version("loopwatch")
    """The installed distribution's version."""
except PackageNotFoundError:  # run from a source tree without installing
    __version__ = "0+unknown"
