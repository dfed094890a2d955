"""Names a package imports on first use (PEP 562), so that importing it costs nothing; and the
old import paths of modules that moved into subpackages.

Both ``loopwatch.instrumentation`` and ``loopwatch.queries`` use it::

    __getattr__, __dir__ = lazy_names(globals(), {"run": ".loop", ...}, __all__)

A lazy name must not also be a submodule's name: importing the submodule binds it on the
package, and the name would then be the module (tests/test_lazy_imports.py keeps them apart).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

__all__ = ["MovedModules", "lazy_names", "moved_modules"]


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


class MovedModules:
    """Import hook (a meta path finder and its loader) that answers a moved module's old dotted
    path with the module at its new path: the same module object, so classes, ``isinstance``
    and monkeypatches are shared. Not an ``importlib.abc`` subclass: that module would cost
    every ``import loopwatch.instrumentation`` several milliseconds."""

    def __init__(self, package: str, moved: Mapping[str, str]) -> None:
        self.package = package
        """The package whose old submodule paths this finder answers."""
        self.targets = {
            f"{package}.{old}": importlib.util.resolve_name(new, package)
            for old, new in moved.items()
        }
        """Old dotted path -> new dotted path."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for an old path this finder knows, else ``None`` (other finders go on)."""
        if fullname not in self.targets:
            return None
        # Duck-typed: it has the two methods the import system calls on a loader.
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """The default module; :meth:`exec_module` replaces it."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Put the module at the new path where the import system looks for the old one."""
        sys.modules[module.__name__] = importlib.import_module(self.targets[module.__name__])


def moved_modules(package: str, moved: Mapping[str, str]) -> MovedModules:
    """Keep ``import package.OLD`` working for each module that moved inside ``package``.

    ``moved`` maps each old submodule name to its new path relative to the package
    (``{"guard": ".runtime.guard"}``). Installed once per package (the package's
    ``__init__`` calls it); type checkers follow the ``OLD.pyi`` stubs next to it instead.
    """
    for finder in sys.meta_path:
        if isinstance(finder, MovedModules) and finder.package == package:
            return finder
    finder = MovedModules(package, moved)
    sys.meta_path.append(finder)
    return finder
