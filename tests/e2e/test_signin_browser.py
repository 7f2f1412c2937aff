"""Signing in, in a real Chromium (SPEC 22.1), on a console with AGENVOY_REQUIRE_2FA=1, at
`localhost` (WebAuthn refuses an IP address): five wrong passwords, then the right one refused
with 429; a person without a second factor held on `Account`; an authenticator app added from
the secret shown as text (after the password again) and then asked for; a recovery code used once and not twice; a passkey
added and used alone with Chromium's virtual authenticator; another session signed out. Every
page on the way under axe-core and the Tab walk, at 1280 and 390 px, with its headers.

Run on its own: `pytest -m e2e tests/e2e/test_signin_browser.py`."""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.e2e import a11y
from tests.e2e.browser import DESKTOP, console_with_user, new_context
from tests.web.test_signin import totp

pytestmark = pytest.mark.e2e

USER, PASSWORD = "signin-operator", "e2e-password-22"
LOCKED = "Too many failed sign-ins. Try again in 15 minutes."
PROBLEMS: list[str] = []


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, None, USER, PASSWORD, {"AGENVOY_REQUIRE_2FA": "1"})
    c.env["AGENVOY_PUBLIC_URL"] = c.url.replace("127.0.0.1", "localhost")
    module_console.start(c)
    return c


def at_localhost(browser, console):
    return new_context(browser, viewport=DESKTOP, base_url=console.env["AGENVOY_PUBLIC_URL"])


@pytest.fixture(scope="module")
def page(browser, console):
    context = at_localhost(browser, console)
    yield context.new_page()
    context.close()


@pytest.fixture(scope="module")
def person() -> dict:
    """What the person holds, gathered on the way: the TOTP secret, the recovery codes."""
    return {}


def check(page: Page, label: str) -> None:
    PROBLEMS.extend(a11y.check(page, label))


def password_step(page: Page, password: str = PASSWORD) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click(timeout=90_000)


def confirm_access(page: Page) -> None:
    """allauth's reauthentication, asked before a second factor is shown or changed."""
    expect(page.get_by_role("heading", name="Confirm Access")).to_be_visible()
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Confirm").click()


def sign_out(page: Page) -> None:
    page.get_by_role("button", name=re.compile("^Sign out")).first.click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_five_wrong_passwords_then_the_right_one_is_refused_with_429(page, console):
    page.goto("/login/")
    check(page, "sign-in")
    for _ in range(5):
        password_step(page, "not-the-password")
        expect(page.get_by_role("alert")).to_be_visible()
    with page.expect_response(lambda r: r.url.endswith("/login/") and r.request.method == "POST") as answer:
        password_step(page)
    assert answer.value.status == 429
    expect(page.get_by_role("alert")).to_have_text(LOCKED)
    check(page, "sign-in (locked)")
    assert console.manage("axes_reset") is not None  # the package's own command unlocks


def test_without_a_second_factor_a_person_is_held_on_the_account_page(page):
    password_step(page)
    expect(page.get_by_role("heading", name="Account")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("asks every person for a second factor")
    page.goto("/history/")
    expect(page).to_have_url(re.compile(r"/account/$"))
    check(page, "account (second factor required)")


def test_an_authenticator_app_is_added_and_asked_for(page, person):
    page.get_by_role("link", name="Add an authenticator app").click()
    check(page, "confirm access")
    confirm_access(page)
    secret = page.locator("#authenticator_secret").input_value()
    assert re.fullmatch(r"[A-Z2-7]{16,}", secret), secret
    expect(page.locator("img[src^='data:image/svg+xml']")).to_be_visible()  # the QR code beside it
    check(page, "totp activate")
    page.get_by_label("Authenticator code").fill(totp(secret))
    page.get_by_role("button", name="Activate").click()
    expect(page).not_to_have_url(re.compile("/activate/"))
    page.goto("/accounts/2fa/recovery-codes/")
    codes = re.findall(r"\b[0-9a-f]{8}\b", page.locator("main").inner_html())
    assert len(set(codes)) == 10, codes
    check(page, "recovery codes")
    person.update(secret=secret, codes=codes)
    page.goto("/history/")
    expect(page.get_by_role("heading", name="History")).to_be_visible()  # no longer held

    sign_out(page)
    password_step(page)
    expect(page).to_have_url(re.compile(r"/accounts/2fa/authenticate/"))
    check(page, "second step")
    page.get_by_label("Code").fill(totp(secret))
    page.get_by_role("button", name="Sign in").first.click()
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()


def test_a_recovery_code_is_used_once_and_not_twice(page, person):
    code = person["codes"][0]
    sign_out(page)
    password_step(page)
    page.get_by_label("Code").fill(code)
    page.get_by_role("button", name="Sign in").first.click()
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    sign_out(page)
    password_step(page)
    page.get_by_label("Code").fill(code)
    page.get_by_role("button", name="Sign in").first.click()
    expect(page.get_by_text("Incorrect code.")).to_be_visible()
    check(page, "second step (a used code)")
    page.get_by_label("Code").fill(person["codes"][1])  # (the app's code of this half-minute is spent)
    page.get_by_role("button", name="Sign in").first.click()
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()


def test_a_passkey_is_added_and_signs_in_alone(page):
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    options = {"protocol": "ctap2", "transport": "internal", "hasResidentKey": True}
    options |= {"hasUserVerification": True, "isUserVerified": True, "automaticPresenceSimulation": True}
    authenticator = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": options})["authenticatorId"]
    page.goto("/account/")
    page.get_by_role("link", name="Add a passkey").click()
    confirm_access(page)  # a new session since the app was added
    check(page, "passkey add")
    page.get_by_label("Name").fill("virtual key")
    page.get_by_label("Passwordless").check()
    page.get_by_role("button", name="Add").click()  # the virtual authenticator answers at once
    expect(page).not_to_have_url(re.compile("/webauthn/add/"))
    assert len(cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]) == 1
    page.goto("/account/")
    expect(page.locator("dd", has_text="Manage passkeys")).to_contain_text("1")
    check(page, "account (three kinds of second factor)")
    page.get_by_role("link", name="Manage passkeys").click()
    expect(page.get_by_text("virtual key")).to_be_visible()
    check(page, "passkeys")
    page.goto("/account/")
    page.get_by_role("link", name="Change password").click()
    expect(page.get_by_label("Current Password")).to_be_visible()
    check(page, "password change")

    sign_out(page)
    check(page, "sign-in (a passkey offered)")
    page.get_by_role("button", name="Sign in with a passkey").click()
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()  # no password, no code
    assert len(cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]) == 1


def test_a_person_signs_out_another_of_their_sessions(page, browser, console, person):
    other = at_localhost(browser, console)
    try:
        phone = other.new_page()
        password_step(phone)
        phone.get_by_label("Code").fill(person["codes"][2])
        phone.get_by_role("button", name="Sign in").first.click()
        expect(phone.get_by_role("heading", name="Servers")).to_be_visible()

        page.goto("/account/")
        rows = page.locator("tr[data-session]")
        expect(rows).to_have_count(2)
        check(page, "account (two sessions)")
        rows.filter(has_not_text="this browser").get_by_role("button", name="Sign out").click()
        expect(page.get_by_text("Signed out that session.")).to_be_visible()
        expect(rows).to_have_count(1)
        phone.goto("/history/")
        expect(phone.get_by_role("heading", name="Sign in")).to_be_visible()
        page.goto("/history/")
        expect(page.get_by_role("heading", name="History")).to_be_visible()
    finally:
        other.close()


def test_it_found_no_serious_problem_on_the_sign_in_pages():
    assert not PROBLEMS, "\n".join(PROBLEMS)
