"""Test helpers: a page of Debian's headless Chromium driven by playwright (never
``playwright install``), and waits on a Streamlit page's state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from conftest import require_program


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (skips, or fails under ``CI=true``, without one); a module's
    tests can share one and open their own pages."""
    program = require_program("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=program,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def chromium_page(width: int = 1440, height: int = 2400) -> Iterator[Any]:
    """A new page of its own headless Chromium (:func:`chromium`)."""
    with chromium() as browser:
        yield browser.new_page(viewport={"width": width, "height": height})


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


def opened(page: Any, url: str, *, ready: str, shows: str) -> list[str]:
    """Open ``url``, wait for the selector ``ready``, for ``shows`` in the main area and for the
    script's run to end; returns the list the page's JavaScript errors are collected into."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url, wait_until="load")
    page.wait_for_selector(ready, timeout=60_000)
    main_text(page, shows)
    settled(page)
    return errors
