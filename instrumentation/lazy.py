"""Names a package imports on first use (PEP 562), so that importing it costs nothing.

Both ``loopwatch.instrumentation`` and ``loopwatch.queries`` use it::

    __getattr__, __dir__ = lazy_names(globals(), {"run": ".loop", ...}, __all__)

A lazy name must not also be a submodule's name: importing the submodule binds it on the
package, and the name would then be the module (tests/test_lazy_imports.py keeps them apart).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    namespace: MutableMapping[str, Any], modules: Mapping[str, str], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__``: ``modules`` maps each name to the module,
    relative to the package, it is imported from on first use (then kept in ``namespace``)."""
    package = str(namespace["__name__"])

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__
