"""The install fits where it runs: a fresh venv with only the runtime (``pip install loopwatch``)
runs the reference loop on the standard library alone; one with ``loopwatch[otel]`` exports
spans over OTLP/HTTP to a real receiver; neither has (or imports) Streamlit, DuckDB or Arrow.

The wheel is built from this checkout once per session and installed as a user would install
it, extras resolved by pip from its index (about 10 s in all on the development machine).
"""

from __future__ import annotations

import gzip
import http.server
import json
import subprocess
import sys
import textwrap
import threading
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("opentelemetry", "prometheus_client", "duckdb", "pyarrow", "streamlit", "pandas")

RUN_LOOP = """
import json, sys
import loopwatch
from loopwatch.instrumentation import LoopLimits, ToolRegistry, run
from loopwatch.instrumentation.testing import FakeModel, tool_call

registry = ToolRegistry()

@registry.tool
def lookup(q: str) -> str:
    \"\"\"Look something up.\"\"\"
    return f"result for {q}"

ok = run(FakeModel([tool_call("lookup", q="a"), "done"]), registry, "go")
looping = run(
    FakeModel([tool_call("lookup", q=str(i)) for i in range(5)]), registry, "go",
    limits=LoopLimits(max_steps=2), raise_on_stop=False,
)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({
    "version": loopwatch.__version__,
    "reasons": [str(ok.stop_reason), str(looping.stop_reason)],
    "heavy": heavy,
}))
"""


def _venv(path: Path, requirement: str) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    python = path / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", requirement],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return python


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("loopwatch-*.whl")
    return built


@pytest.fixture(scope="session")
def runtime_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(tmp_path_factory.mktemp("venv-runtime"), str(wheel))


@pytest.fixture(scope="session")
def otel_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(tmp_path_factory.mktemp("venv-otel"), f"{wheel}[otel]")


def _run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    # Run outside the checkout, so nothing of it is importable but the installed wheel.
    return subprocess.run(
        [str(python), "-c", f"HEAVY = {HEAVY!r}\n" + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, cwd=python.parent,
    )  # fmt: skip


def _installed(python: Path) -> set[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return {p["name"].lower().replace("_", "-") for p in json.loads(out.stdout)}


def test_the_runtime_alone_runs_the_reference_loop(runtime_python: Path) -> None:
    assert _installed(runtime_python) <= {"loopwatch", "pip", "setuptools"}
    proc = _run(runtime_python, RUN_LOOP)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["reasons"] == ["completed", "max_steps"]
    assert out["version"] == "0.1.0"
    assert out["heavy"] == []


def test_without_the_otel_extra_telemetry_names_the_extra(runtime_python: Path) -> None:
    proc = _run(runtime_python, "from loopwatch.instrumentation import instrument")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        "loopwatch.instrumentation.runtime.extras.MissingExtraError: "
        "loopwatch.instrumentation.telemetry.pipeline"
        " needs the 'otel' extra: pip install 'loopwatch[otel]' (missing module: opentelemetry)"
    ), last


def test_the_cli_answers_and_names_a_missing_extra(runtime_python: Path) -> None:
    loopwatch = runtime_python.parent / "loopwatch"
    version = subprocess.run([str(loopwatch), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == "loopwatch 0.1.0"
    helped = subprocess.run([str(loopwatch), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "report" in helped.stdout and "serve" in helped.stdout
    report = subprocess.run(
        [str(loopwatch), "report", "--db", "x.duckdb"],
        capture_output=True, text=True, cwd=runtime_python.parent,
    )  # fmt: skip
    assert report.returncode == 2
    assert report.stderr.strip() == (
        "loopwatch report: loopwatch.queries.store.database needs the 'store' extra:"
        " pip install 'loopwatch[store]' (missing module: duckdb)"
    )


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_otel_extra_exports_spans(otel_python: Path, receiver: str) -> None:
    installed = _installed(otel_python)
    assert {"opentelemetry-sdk", "prometheus-client"} <= installed
    assert not {"streamlit", "duckdb", "pyarrow", "pandas", "plotly"} & installed
    proc = _run(
        otel_python,
        f"""
        import json, sys
        from loopwatch.instrumentation import ToolRegistry, instrument, run
        from loopwatch.instrumentation.testing import FakeModel
        handle = instrument(otlp_endpoint={receiver!r}, metrics_port=0)
        result = run(FakeModel(["hi"]), ToolRegistry(), "hello")
        flushed = handle.force_flush()
        handle.shutdown()
        print(json.dumps({{
            "flushed": flushed,
            "reason": str(result.stop_reason),
            "heavy": sorted({{m.split(".")[0] for m in sys.modules}} & {{"streamlit", "duckdb",
                                                                        "pyarrow", "pandas"}}),
        }}))
        """,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"flushed": True, "reason": "completed", "heavy": []}
    # The spans reached the receiver: the run's span name is in the protobuf body.
    body = b"".join(_Receiver.bodies)
    assert b"invoke_agent agent" in body and b"loopwatch.stop_reason" in body


def test_a_store_without_the_store_extra_names_the_extra(otel_python: Path) -> None:
    """The store is found through its entry point; without duckdb the agent still runs, the
    handle names the missing extra and every span meant for the store is counted."""
    proc = _run(
        otel_python,
        """
        import json
        from loopwatch.instrumentation import ToolRegistry, instrument, run
        from loopwatch.instrumentation.runtime.drops import dropped
        from loopwatch.instrumentation.testing import FakeModel
        handle = instrument(store="runs.duckdb")
        result = run(FakeModel(["hi"]), ToolRegistry(), "hello")
        handle.shutdown()
        print(json.dumps({"error": handle.store_error, "reason": str(result.stop_reason),
                          "dropped": dropped()}))
        """,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["reason"] == "completed"
    assert out["error"].startswith("MissingExtraError: ") and (
        "needs the 'store' extra: pip install 'loopwatch[store]'" in out["error"]
    ), out["error"]
    assert out["dropped"] == {"store_unavailable": 3}
