"""Test helpers: a page of Debian's headless Chromium driven by playwright (never
``playwright install``), and waits on a Streamlit page's state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from conftest import require_program


@contextmanager
def chromium_page() -> Iterator[Any]:
    """A new page of a headless Chromium (skips, or fails under ``CI=true``, without one)."""
    chromium = require_program("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser.new_page(viewport={"width": 1440, "height": 2400})
        finally:
            browser.close()


def settled(page: Any) -> None:
    """Wait until Streamlit's running indicator is gone (the script's run has ended)."""
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000
    )


def main_text(page: Any, needle: str) -> None:
    """Wait until the page's main area shows ``needle``."""
    page.wait_for_function(
        "s => (document.querySelector('[data-testid=\"stMain\"]') || {innerText: ''})"
        ".innerText.includes(s)",
        arg=needle,
        timeout=60_000,
        polling=100,
    )
