"""A server's page with prompts, resources and templates (SPEC 20.1) in a real Chromium:
npm server-everything over stdio lists them; the page passes axe-core with no serious or
critical violation at 1280 and 390 px, nothing scrolls sideways on a phone, and the Tab key
reaches each control. Screenshots go to artifacts/listings/.

Run on its own: `pytest -m e2e tests/e2e/test_listings_browser.py`."""

import pytest
from playwright.sync_api import Page, expect

from tests.e2e import a11y
from tests.e2e.browser import DESKTOP, PHONE, console_with_user, shoot_into, sign_in
from tests.live import ROOT, everything_stdio

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "listings"
USER, PASSWORD = "operator", "e2e-password-1"


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"every": everything_stdio()}, USER, PASSWORD)
    module_console.start(c)
    c.wait_connected("every")
    return c


def test_it_shows_prompts_and_resources_on_the_server_page(page: Page, console):
    page.goto("/")
    sign_in(page, USER, PASSWORD)
    page.goto("/servers/every/")
    prompts = page.locator("#prompts")
    expect(prompts.get_by_role("heading", name="Prompts (4)")).to_be_visible()
    expect(prompts.get_by_role("heading", name="args-prompt")).to_be_visible()
    resources = page.locator("#resources")
    expect(resources.get_by_role("heading", name="Resources (7, 2 templates)")).to_be_visible()
    expect(resources.locator("table.resources tbody tr")).to_have_count(7)
    expect(resources.locator("table.templates tbody tr")).to_have_count(2)
    problems = a11y.check(page, "server-detail (prompts and resources) /servers/every/")
    assert not problems, "\n".join(problems)
    shoot_into(page, SHOTS, "server-listings")
    for size in (DESKTOP, PHONE):  # the two sections alone, easier to look at than the page
        page.set_viewport_size(size)
        for section in ("prompts", "resources"):
            page.locator(f"#{section}").screenshot(path=str(SHOTS / f"{section}-{size['width']}.png"))
    page.set_viewport_size(DESKTOP)
