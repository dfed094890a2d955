"""What an import loads: the runtime nothing heavy, the CLI's help and version no store."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import loopwatch

HEAVY = ("opentelemetry", "prometheus_client", "duckdb", "pyarrow", "streamlit", "pandas")


def _loaded_after(code: str) -> list[str]:
    probe = (
        "import sys, json\n"
        f"{code}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_runtime_loads_no_telemetry_store_or_dashboard() -> None:
    assert _loaded_after("import loopwatch.instrumentation") == []
    code = (
        "from loopwatch.instrumentation import LoopGuard, LoopLimits, ToolRegistry, run\n"
        "from loopwatch.instrumentation.testing import FakeModel\n"
        "run(FakeModel(['hi']), ToolRegistry(), 'hello')"
    )
    assert _loaded_after(code) == []


def test_telemetry_loads_otel_but_no_store() -> None:
    loaded = _loaded_after("from loopwatch.instrumentation import instrument")
    assert loaded == ["opentelemetry", "prometheus_client"]


def test_cli_help_and_version_load_no_store() -> None:
    for flag in ("--help", "--version"):
        code = (
            "from loopwatch.dashboard.cli import main\n"
            "import contextlib, io\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main([{flag!r}])"
        )
        assert _loaded_after(code) == [], flag


def test_version_is_the_distributions() -> None:
    assert loopwatch.__version__ == version("loopwatch")
    out = subprocess.run(
        [sys.executable, "-m", "loopwatch.dashboard.cli", "--version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == f"loopwatch {loopwatch.__version__}"


def test_no_lazy_name_is_shadowed_by_a_submodule_of_the_same_name() -> None:
    # Importing a submodule binds it on its package; a lazy name spelt the same would then
    # resolve to the module instead of the function (``instrument`` did, once
    # ``loopwatch.instrumentation.instrument`` had been imported by anyone).
    import pkgutil

    import loopwatch.instrumentation as instrumentation
    import loopwatch.queries as queries

    for package in (instrumentation, queries):
        submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
        assert submodules.isdisjoint(package.__all__), package.__name__


def test_a_name_is_the_same_object_whichever_import_came_first() -> None:
    code = (
        "import loopwatch.instrumentation.telemetry.pipeline\n"
        "import loopwatch.instrumentation.telemetry.tracing\n"
        "from loopwatch.instrumentation import instrument, OTelObserverFactory\n"
        "assert callable(instrument) and instrument.__module__.endswith('.pipeline')\n"
        "assert isinstance(OTelObserverFactory, type)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True)
