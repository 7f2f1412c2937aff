"""What every browser test needs: Chromium as this image has it, a console with a person who
can sign in, and shots at desktop and phone width."""

import os
import threading
import weakref
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import Page, Response, expect

from tests.live import ROOT, Console, Consoles

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT = 30_000  # ms, for anything that waits on a server (generous: CI machines get busy)
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SHOTS = ROOT / "artifacts" / "screenshots"


def need_chromium() -> None:
    """Skip without Chromium on a person's machine; in CI (`CI=true`) fail instead, so a
    browser suite that did not run never passes as green."""
    if Path(CHROMIUM).exists():
        return
    reason = f"chromium is not installed at {CHROMIUM} (scripts/install-system.sh installs it)"
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason}: CI must run the browser tests", pytrace=False)
    pytest.skip(reason)


def console_with_user(
    made: Consoles, servers: dict | None, user: str, password: str, env: dict | None = None
) -> Console:
    """A console (not started yet: `made.start(c)`) with one person who can sign in; `made` is
    tests/conftest.py's `module_console`, which closes it after the module."""
    need_chromium()
    c = made(servers, env, start=False)
    c.manage(
        "shell",
        "-c",
        f"from django.contrib.auth.models import User; User.objects.create_user({user!r}, password={password!r})",
    )
    return c


def sign_in(page: Page, user: str, password: str) -> None:
    """Through the sign-in form, as a person does, onto the Servers page."""
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(password)
    # Password hashing is deliberately slow; on a loaded machine the sign-in takes a while.
    page.get_by_role("button", name="Sign in", exact=True).click(timeout=90_000)
    expect(page.get_by_role("heading", name="Servers")).to_be_visible(timeout=90_000)


# Before any of the page's own scripts: every CSP violation (a blocked inline script, style or
# eval) is kept where `a11y.headers` looks.
RECORD_CSP = """
window.agvCspViolations = [];
document.addEventListener("securitypolicyviolation", e => {
  window.agvCspViolations.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
                               (e.sourceFile ? " at " + e.sourceFile + ":" + e.lineNumber : ""));
});
"""


def new_context(browser, **options):
    """A browser context as every browser test uses one: the default timeout, and Chromium's
    CSP violations recorded on each of its pages."""
    context = browser.new_context(**options)
    context.set_default_timeout(TIMEOUT)
    context.add_init_script(RECORD_CSP)
    context.on("response", _keep_document)
    return context


# Each page's last document answer (its headers, for a11y.headers; fetching the page again
# could change it: the authenticator app's page makes a new secret on every GET).
DOCUMENTS: "weakref.WeakKeyDictionary[Page, Response]" = weakref.WeakKeyDictionary()


def _keep_document(response: Response) -> None:
    frame = response.frame
    if response.request.is_navigation_request() and frame.parent_frame is None:
        DOCUMENTS[frame.page] = response


def launch(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def shoot_into(page: Page, folder: Path, name: str) -> None:
    """Full-page screenshots at desktop and phone width (looked at by a person, not committed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for size in (DESKTOP, PHONE):
        page.set_viewport_size(size)
        page.wait_for_timeout(150)
        page.screenshot(path=str(folder / f"{name}-{size['width']}.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


def shoot(page: Page, name: str) -> None:
    """`shoot_into` artifacts/screenshots/."""
    shoot_into(page, SHOTS, name)


def nav(page: Page, name: str):
    """A link of the main navigation."""
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name)


def call_in_background(
    console: Console, name: str, arguments: dict, token: str | None = None, **extra
) -> dict:
    """A confirm-mode call through /v1 with `token` (else the console's own) and any `extra`
    fields of the body, in a thread; the dict gets its answer (`answer` waits for it)."""
    box: dict = {}
    body = {"name": name, "arguments": arguments, "mode": "confirm", "wait": 60, **extra}

    def run():
        headers = {"Authorization": f"Bearer {token or console.token}"}
        with httpx2.Client(base_url=console.url, timeout=90, headers=headers) as http:
            r = http.post("/v1/mcp/call", json=body)
            box["status"], box["body"] = r.status_code, r.json()

    box["thread"] = threading.Thread(target=run, daemon=True)
    box["thread"].start()
    return box


def answer(box: dict, timeout: float = 60) -> dict:
    """The answer of a `call_in_background`, once it came (within `timeout` seconds)."""
    box["thread"].join(timeout)
    assert not box["thread"].is_alive(), "the API call did not return"
    return box
