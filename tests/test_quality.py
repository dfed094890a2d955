"""The code base stays typed and linted: mypy (strict) and ruff run as part of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    proc = _run(
        str(BIN / "ruff"), "check", "instrumentation", "queries", "dashboard", "tests", "benchmarks"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_is_clean() -> None:
    proc = _run(str(BIN / "mypy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
