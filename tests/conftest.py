"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from loopwatch.instrumentation.runtime.drops import reset_drops

IN_CI = os.environ.get("CI", "").lower() == "true"


def require_program(name: str) -> str:
    """Path of an outside program; skip without it on a laptop, fail without it in CI."""
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is required in CI (CI=true) but is not on PATH")
        pytest.skip(f"{name} not installed")
    return path


@pytest.fixture(autouse=True)
def _store_writer_from_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's LOOPWATCH_STORE_WRITER must not change which writer the tests get."""
    monkeypatch.delenv("LOOPWATCH_STORE_WRITER", raising=False)


@pytest.fixture
def fresh_drops() -> Iterator[None]:
    """Drop counters at zero before the test and after it."""
    reset_drops()
    yield
    reset_drops()
