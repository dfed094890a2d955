"""Shared test helpers."""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require_program(name: str) -> str:
    """Path of an outside program; skip without it on a laptop, fail without it in CI."""
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is required in CI (CI=true) but is not on PATH")
        pytest.skip(f"{name} not installed")
    return path
