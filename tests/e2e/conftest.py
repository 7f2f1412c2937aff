"""The browser suites' shared page, and their accessibility results (tests/e2e/a11y.py), printed
after the run."""

import pytest
from playwright.sync_api import sync_playwright

from tests.e2e.browser import DESKTOP, launch, new_context


def pytest_terminal_summary(terminalreporter):
    from tests.e2e.a11y import RESULTS

    if RESULTS:
        terminalreporter.section("axe-core and keyboard, per page")
        for line in RESULTS:
            terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module."""
    with sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page(console, browser):
    """One Chromium page at desktop width on the module's `console` (each browser module makes
    that fixture: `console_with_user` in tests/e2e/browser.py)."""
    context = new_context(browser, viewport=DESKTOP, base_url=console.url)
    yield context.new_page()
    context.close()
