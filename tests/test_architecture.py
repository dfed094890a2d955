"""The import contract of docs/architecture.md, checked on every module's syntax tree.

- Imports point down the layers only (:data:`LAYERS`), including imports inside functions and
  ``TYPE_CHECKING`` blocks, and ``importlib.import_module("...")`` with a literal name.
- No module imports another module's private (``_underscore``) name.
- Modules stay under :data:`MAX_MODULE_LINES` lines and functions under
  :data:`MAX_FUNCTION_LINES`, except today's offenders, listed with their current size so the
  lists can only shrink.
"""

from __future__ import annotations

import ast
import re
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "package": "loopwatch",
    "instrumentation": "loopwatch.instrumentation",
    "queries": "loopwatch.queries",
    "dashboard": "loopwatch.dashboard",
}

# Each layer, lowest first, as (rank, dotted prefix). A module belongs to the layer with the
# longest matching prefix; it may import its own layer (its own subpackage) and layers of a
# lower rank, never one of the same or a higher rank. Package faces (`loopwatch.queries`,
# ...) sit above their subpackages: they re-export them.
LAYERS: tuple[tuple[int, str], ...] = (
    (0, "loopwatch"),
    (1, "loopwatch.instrumentation.runtime"),
    (2, "loopwatch.instrumentation.telemetry"),
    (2, "loopwatch.instrumentation.clients"),
    (3, "loopwatch.instrumentation.integrations"),
    (4, "loopwatch.instrumentation"),
    (5, "loopwatch.queries.store"),
    (6, "loopwatch.queries.analysis"),
    # above analysis: the synthetic fleets compute their ground truth with the analysis's fit
    (7, "loopwatch.queries.ingest"),
    (8, "loopwatch.queries"),
    (9, "loopwatch.dashboard.app"),
    (10, "loopwatch.dashboard.server"),
    (10, "loopwatch.dashboard.demo"),
    (11, "loopwatch.dashboard.cli"),
    (12, "loopwatch.dashboard"),
)

# Upward imports that exist today, each with who removes it. The test fails when one is
# added, and when one listed here is gone (then delete its line). Empty since instrument()
# finds the store through the `loopwatch.stores` entry point (telemetry/stores.py) instead of
# importing the store exporter; add an entry only with its owner and the plan to remove it.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

# Modules over MAX_MODULE_LINES today, with their line count when this list was written. A
# module may shrink (then lower its number, or delete its line once it is under the limit),
# never grow.
LONG_MODULES: dict[str, int] = {
    "dashboard/app/charts.py": 426,
    "dashboard/demo/runner.py": 416,
    "dashboard/server/ingest.py": 423,
    "instrumentation/integrations/langgraph.py": 405,
    "instrumentation/runtime/limits.py": 551,
    "instrumentation/telemetry/metrics.py": 508,
    "instrumentation/telemetry/tracing.py": 566,
    "queries/analysis/gateway.py": 438,
    "queries/analysis/history.py": 407,
    "queries/ingest/chatlogs.py": 540,
    "queries/ingest/importer.py": 697,
    "queries/ingest/jsonstream.py": 545,
    "queries/ingest/synthetic.py": 581,
    "queries/store/columns.py": 1117,
    "queries/store/database.py": 516,
}

# Functions over MAX_FUNCTION_LINES today ("file:qualified.name": lines), under the same rule.
LONG_FUNCTIONS: dict[str, int] = {
    "dashboard/cli/import_logs.py:_import": 83,
    "dashboard/cli/report_text.py:report_text": 97,
    "instrumentation/telemetry/pipeline.py:instrument": 106,
    "queries/ingest/importer.py:_import": 108,
    "queries/ingest/importer.py:_run_records": 103,
}


@dataclass(frozen=True)
class Module:
    """One source file of the package, as the contract sees it."""

    path: Path
    rel: str
    name: str
    is_package: bool


@dataclass(frozen=True)
class Edge:
    """One import: ``source`` imports ``target`` (a module, or a name in it) at ``line``."""

    source: Module
    target: str
    names: tuple[str, ...]
    line: int


def modules(root: Path = ROOT) -> list[Module]:
    """Every ``.py`` and ``.pyi`` file under the package folders of ``root``."""
    found = []
    for folder, dotted in FOLDERS.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted([*base.rglob("*.py"), *base.rglob("*.pyi")]):
            if "__pycache__" in path.parts:
                continue
            parts = [*dotted.split("."), *path.relative_to(base).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            rel = path.relative_to(root).as_posix()
            found.append(Module(path, rel, ".".join(parts), is_package))
    return found


def _package_of(module: Module) -> str:
    return module.name if module.is_package else module.name.rpartition(".")[0]


def _resolve(module: Module, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = _package_of(module).split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports(module: Module, known: set[str]) -> Iterator[Edge]:
    """Every import in the module's syntax tree, wherever it is (functions, ``TYPE_CHECKING``).

    ``from package import name`` counts as importing ``package.name`` when that is a module.
    """
    tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node.level, node.module)
            plain = []
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:
                    yield Edge(module, sub, (), node.lineno)
                else:
                    plain.append(alias.name)
            if plain:
                yield Edge(module, target, tuple(plain), node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield Edge(module, node.args[0].value, (), node.lineno)


def rank(name: str) -> tuple[int, str] | None:
    """The (rank, prefix) of the layer ``name`` belongs to; ``None`` outside loopwatch."""
    best = None
    for layer_rank, prefix in LAYERS:
        if (name == prefix or name.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[1])
        ):
            best = (layer_rank, prefix)
    return best


def upward_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    """(importer, imported) pairs that point to the same or a higher layer."""
    mods = modules(root)
    known = {m.name for m in mods}
    bad = set()
    for module in mods:
        source = rank(module.name)
        assert source is not None, module.rel
        for edge in imports(module, known):
            target = rank(edge.target)
            if target is None or target[1] == source[1]:
                continue
            if target[0] >= source[0]:
                bad.add((module.name, edge.target))
    return bad


def private_imports(root: Path = ROOT) -> set[str]:
    """``file:line name`` for each private name one module takes from another."""
    mods = modules(root)
    known = {m.name for m in mods}
    found = set()
    for module in mods:
        tree = ast.parse(module.path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for edge in imports(module, known):
            if not edge.target.startswith("loopwatch"):
                continue
            for name in (*edge.names, edge.target.rpartition(".")[2]):
                if name.startswith("_") and not name.startswith("__"):
                    found.add(f"{module.rel}:{edge.line} {edge.target} {name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("loopwatch"):
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, node.level, node.module)
                for alias in node.names:
                    if f"{target}.{alias.name}" in known:
                        aliases[alias.asname or alias.name] = f"{target}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                dotted = _dotted(node.value)
                if dotted is not None and dotted.split(".")[0] in aliases:
                    head, _, rest = dotted.partition(".")
                    full = aliases[head] + ("." + rest if rest else "")
                    if full in known:
                        found.add(f"{module.rel}:{node.lineno} {full} {node.attr}")
    return found


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def module_sizes(root: Path = ROOT) -> dict[str, int]:
    """Line count of every ``.py`` module."""
    return {
        m.rel: len(m.path.read_text(encoding="utf-8").splitlines())
        for m in modules(root)
        if m.path.suffix == ".py"
    }


def function_sizes(root: Path = ROOT) -> dict[str, int]:
    """Lines of every function and method (``file:Class.method``), decorators excluded."""
    sizes = {}
    for module in modules(root):
        tree = ast.parse(module.path.read_text(encoding="utf-8"))

        def visit(node: ast.AST, prefix: str, rel: str = module.rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{child.name}"
                    assert child.end_lineno is not None
                    sizes[f"{rel}:{name}"] = child.end_lineno - child.lineno + 1
                    visit(child, name + ".")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)

        visit(tree, "")
    return sizes


# --- the contract -------------------------------------------------------------------------------


def test_every_module_belongs_to_a_layer() -> None:
    for module in modules():
        assert rank(module.name) is not None, module.rel


def test_imports_point_down_the_layers() -> None:
    upward = upward_imports()
    new = sorted(upward - KNOWN_UPWARD.keys())
    assert not new, (
        "imports from a lower layer to a higher one (docs/architecture.md; an old module path"
        " such as loopwatch.instrumentation.guard counts as its package face: import the new"
        " home):\n" + "\n".join(f"  {a} -> {b}" for a, b in new)
    )
    gone = sorted(KNOWN_UPWARD.keys() - upward)
    assert not gone, f"no longer imported: delete from KNOWN_UPWARD: {gone}"


def test_no_module_imports_another_modules_private_names() -> None:
    found = sorted(private_imports())
    assert not found, "make the name public if two modules need it:\n" + "\n".join(found)


def test_modules_stay_short() -> None:
    sizes = module_sizes()
    too_long = {f: n for f, n in sizes.items() if n > MAX_MODULE_LINES}
    grew = {f: (n, LONG_MODULES.get(f)) for f, n in too_long.items() if n > LONG_MODULES.get(f, 0)}
    assert not grew, f"modules over {MAX_MODULE_LINES} lines (now, allowed): {grew}"
    stale = {f: sizes.get(f) for f, n in LONG_MODULES.items() if sizes.get(f) != n}
    assert not stale, f"shrunk or gone: lower or delete their LONG_MODULES entries: {stale}"


def test_functions_stay_short() -> None:
    sizes = function_sizes()
    too_long = {f: n for f, n in sizes.items() if n > MAX_FUNCTION_LINES}
    grew = {
        f: (n, LONG_FUNCTIONS.get(f)) for f, n in too_long.items() if n > LONG_FUNCTIONS.get(f, 0)
    }
    assert not grew, f"functions over {MAX_FUNCTION_LINES} lines (now, allowed): {grew}"
    stale = {f: sizes.get(f) for f, n in LONG_FUNCTIONS.items() if sizes.get(f) != n}
    assert not stale, f"shrunk or gone: lower or delete their LONG_FUNCTIONS entries: {stale}"


# --- the checks can fail ------------------------------------------------------------------------


def _plant(root: Path, rel: str, code: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(code), encoding="utf-8")


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A small tree with the layout of the package and one module of each rule's offence."""
    for rel in (
        "instrumentation/__init__.py",
        "instrumentation/runtime/__init__.py",
        "instrumentation/telemetry/__init__.py",
        "queries/__init__.py",
        "queries/store/__init__.py",
        "queries/store/database.py",
    ):
        _plant(tmp_path, rel, '"""x"""\n')
    _plant(tmp_path, "instrumentation/runtime/guard.py", "from . import loop\n")
    _plant(tmp_path, "instrumentation/runtime/loop.py", "X = 1\n")
    return tmp_path


def test_the_walker_finds_an_upward_import_inside_a_function(planted: Path) -> None:
    assert upward_imports(planted) == set()
    _plant(
        planted,
        "instrumentation/runtime/hidden.py",
        """
        def later():
            from loopwatch.queries.store.database import Store
            return Store
        """,
    )
    assert upward_imports(planted) == {
        ("loopwatch.instrumentation.runtime.hidden", "loopwatch.queries.store.database")
    }


def test_the_walker_finds_relative_and_type_checking_imports(planted: Path) -> None:
    _plant(
        planted,
        "instrumentation/runtime/typed.py",
        """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from ..telemetry import tracing
        """,
    )
    _plant(planted, "instrumentation/telemetry/tracing.py", "X = 1\n")
    assert upward_imports(planted) == {
        ("loopwatch.instrumentation.runtime.typed", "loopwatch.instrumentation.telemetry.tracing")
    }


def test_an_old_module_path_in_the_runtime_counts_as_upward(planted: Path) -> None:
    # loopwatch.instrumentation.guard is served by the package face's moved-module hook.
    _plant(planted, "instrumentation/runtime/old.py", "from ..guard import LoopGuard\n")
    assert upward_imports(planted) == {
        ("loopwatch.instrumentation.runtime.old", "loopwatch.instrumentation.guard")
    }


def test_the_walker_finds_private_names(planted: Path) -> None:
    assert private_imports(planted) == set()
    _plant(planted, "instrumentation/runtime/peek.py", "from .loop import _hidden\n")
    _plant(
        planted,
        "instrumentation/runtime/poke.py",
        "from loopwatch.instrumentation.runtime import loop\nY = loop._hidden\n",
    )
    found = private_imports(planted)
    assert {f.split(":")[0] for f in found} == {
        "instrumentation/runtime/peek.py",
        "instrumentation/runtime/poke.py",
    }, found


def test_the_size_checks_see_a_long_function(planted: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    _plant(planted, "instrumentation/runtime/long.py", f"class C:\n  def f(self):\n{body}")
    sizes = function_sizes(planted)
    assert sizes["instrumentation/runtime/long.py:C.f"] == MAX_FUNCTION_LINES + 1
    assert module_sizes(planted)["instrumentation/runtime/long.py"] == MAX_FUNCTION_LINES + 2


# --- one tool call, one record -----------------------------------------------------------------

# A class is a record of one tool call when its fields name the call, hold what came back and say
# how it ended (docs/architecture.md, "One tool call's record"). Fields are what the class body
# annotates (dataclasses, NamedTuples, TypedDicts, slotted classes) and what ``__init__`` sets on
# ``self``; a record renamed field by field would slip through, a new one written in good faith
# does not.
NAMES_THE_CALL = frozenset({"call", "tool", "tool_call", "tool_name", "name"})
WHAT_CAME_BACK = frozenset({"content", "result", "output", "result_fp", "result_fingerprint"})
HOW_IT_ENDED = frozenset({"ok", "status", "tool_status", "error", "error_code"})

# The one record, and each other class of its shape with why it is not a second record. The test
# fails on a class not listed (use ToolOutcome, or list it here with the reason) and on a listed
# one that is gone (then delete its line).
TOOL_CALL_SHAPES: dict[str, str] = {
    "instrumentation/runtime/toolspec.py:ToolOutcome": "the one record",
    "queries/ingest/foreign/conventions.py:SpanView": "one foreign span of any role (agent, "
    "model, tool): fingerprints and a last line, not a call's record",
    "queries/ingest/synthetic.py:SyntheticSpan": "one synthetic span of any role (test data)",
}


def _fields(node: ast.ClassDef) -> set[str]:
    found = set()
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.add(item.target.id)
        elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
            for sub in ast.walk(item):
                targets = sub.targets if isinstance(sub, ast.Assign) else []
                if isinstance(sub, ast.AnnAssign):
                    targets = [sub.target]
                for target in targets:
                    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(t, ast.Attribute) and _dotted(t.value) == "self":
                            found.add(t.attr)
    return found


def tool_call_shapes(root: Path = ROOT) -> set[str]:
    """``file:Class`` of every class shaped like a record of one tool call."""
    found = set()
    for module in modules(root):
        if module.path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(module.path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                fields = _fields(node)
                if all(fields & kind for kind in (NAMES_THE_CALL, WHAT_CAME_BACK, HOW_IT_ENDED)):
                    found.add(f"{module.rel}:{node.name}")
    return found


def test_one_tool_call_has_one_record() -> None:
    shapes = tool_call_shapes()
    new = sorted(shapes - TOOL_CALL_SHAPES.keys())
    assert not new, (
        'a second record of one tool call: use ToolOutcome (docs/architecture.md, "One tool '
        "call's record\"), or list it in TOOL_CALL_SHAPES with why it is not one:\n  "
        + "\n  ".join(new)
    )
    gone = sorted(TOOL_CALL_SHAPES.keys() - shapes)
    assert not gone, f"no longer a tool-call shape: delete from TOOL_CALL_SHAPES: {gone}"


def test_the_record_check_sees_a_dataclass_and_a_plain_class(planted: Path) -> None:
    assert tool_call_shapes(planted) == set()
    _plant(
        planted,
        "queries/store/calls.py",
        """
        from dataclasses import dataclass

        @dataclass
        class StoredCall:
            tool: str
            output: str
            ok: bool = True

        class LoggedCall:
            def __init__(self, name, result, status):
                self.name, self.result = name, result
                self.status: str = status

        class Budget:  # names nothing a tool returned
            name: str
            ok: bool
        """,
    )
    assert tool_call_shapes(planted) == {
        "queries/store/calls.py:StoredCall",
        "queries/store/calls.py:LoggedCall",
    }


# --- citations ----------------------------------------------------------------------------------

# Spelt in two parts so that this file does not cite what it forbids.
_OUTSIDE_CONTRACT = re.compile("DESIGN" + r"(\s*§|\.md)")


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):  # not a checkout: walk the folders
        skip = {".git", ".venv", "build", "__pycache__"}
        return [
            p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]
    return [ROOT / name for name in out.split("\0") if name]


def test_no_file_cites_the_design_contract() -> None:
    """Docstrings, comments and docs cite the project's own docs (docs/*.md), never a section of
    a design document the repository does not contain."""
    found = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE_CONTRACT.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "cite docs/*.md instead:\n" + "\n".join(found)


def test_the_citation_check_can_fail() -> None:
    assert _OUTSIDE_CONTRACT.search("limits (DESIG" + "N §3)")
    assert _OUTSIDE_CONTRACT.search("see DESIG" + "N.md")
    assert not _OUTSIDE_CONTRACT.search('limits (docs/runtime.md, "Defaults")')
