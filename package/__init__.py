"""loopwatch: stop conditions for LLM agent loops, and observability of why they stopped.

The code lives in the subpackages, one per folder of the repository:
:mod:`loopwatch.instrumentation` (the runtime: standard library only; telemetry with the
``otel`` extra), :mod:`loopwatch.queries` (the store and the named queries: ``store`` extra) and
:mod:`loopwatch.dashboard` (the ``loopwatch`` command, ``serve`` and the dashboard:
``dashboard`` extra). Importing this package loads none of them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # Read from the installed metadata on first use: `import loopwatch.instrumentation` does
    # not pay for the metadata lookup.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("loopwatch")
    except PackageNotFoundError:  # run from a source tree without installing
        value = "0+unknown"
    globals()["__version__"] = value
    return value
