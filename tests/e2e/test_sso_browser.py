"""Single sign-on (SPEC 23.2) in a real Chromium against a real OpenID provider: panva's
`oidc-provider` (tests/servers/oidc.mjs) on http://127.0.0.1, its development login page
driven as a person would, from the console's `Sign in with <name>` button and back.

One console maps groups to roles (AGENVOY_OIDC_ROLES) and asks every person for a second
factor (AGENVOY_REQUIRE_2FA=1, which SSO people are spared); another leaves roles to the People
page and turns password sign-in off. Every person's identity is a fresh browser context, so no
provider session carries over from one person to the next.

Run on its own: `pytest -m e2e tests/e2e/test_sso_browser.py`."""

import json
import re
import subprocess
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import Page, expect

from tests.e2e import a11y
from tests.e2e.browser import DESKTOP, console_with_user, new_context
from tests.live import ROOT, db_rows, free_port, stop_process, wait_until

pytestmark = pytest.mark.e2e

CALLBACK = "/accounts/oidc/sso/login/callback/"
CLIENT_ID, CLIENT_SECRET = "agenvoy-console", "oidc-client-secret-e2e"
ROLES = "admin:platform;approver:ops,oncall;viewer:staff"
PASSWORD_USER, PASSWORD = "carol", "carol-password-23"
PROBLEMS: list[str] = []  # axe-core, the headers and the Tab walk, per page (a11y.check)


class Provider:
    """`node tests/servers/oidc.mjs` with an accounts file the tests rewrite."""

    def __init__(self, folder: Path, redirect_uris: list[str]) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.accounts_file = folder / "accounts.json"
        self.accounts: dict = {}
        self.save()
        self.log_path = folder / "oidc.log"
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                "node",
                str(ROOT / "tests/servers/oidc.mjs"),
                str(self.port),
                CLIENT_ID,
                CLIENT_SECRET,
                ",".join(redirect_uris),
                str(self.accounts_file),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self._ready, 30, what="oidc-provider ready")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"oidc.mjs exited: {self.log_path.read_text()[-2000:]}")
        return "oidc ready" in self.log_path.read_text()

    def account(self, sub: str, groups: list[str], email: str | None = None, username: str | None = None):
        self.accounts[sub] = {
            "email": email or f"{sub}@example.com",
            "email_verified": True,
            "preferred_username": username or sub,
            "groups": groups,
        }
        self.save()

    def save(self) -> None:
        self.accounts_file.write_text(json.dumps(self.accounts))

    def close(self) -> None:
        stop_process(self.proc)
        self.log.close()


@pytest.fixture(scope="module")
def consoles(module_console, tmp_path_factory):
    """(mapped, plain, provider): the console with roles from the provider, the one without
    (and without password sign-in), and the provider both are registered at."""
    mapped = console_with_user(
        module_console,
        None,
        PASSWORD_USER,
        PASSWORD,
        {"AGENVOY_REQUIRE_2FA": "1", "AGENVOY_OIDC_ROLES": ROLES},
    )
    mapped.manage("shell", "-c", _set_email(PASSWORD_USER, "carol@example.com"))
    plain = console_with_user(module_console, None, "olga", "olga-password-23")
    plain.env["AGENVOY_PASSWORD_SIGNIN"] = "0"  # with the issuer below: alone it stops start-up
    provider = Provider(tmp_path_factory.mktemp("oidc"), [c.url + CALLBACK for c in (mapped, plain)])
    for c in (mapped, plain):
        c.env |= {
            "AGENVOY_PUBLIC_URL": c.url,
            "AGENVOY_OIDC_ISSUER": provider.issuer,
            "AGENVOY_OIDC_CLIENT_ID": CLIENT_ID,
            "AGENVOY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "AGENVOY_OIDC_NAME": "Team SSO",
        }
        module_console.start(c)
    yield mapped, plain, provider
    provider.close()


@pytest.fixture(scope="module")
def mapped(consoles):
    return consoles[0]


@pytest.fixture(scope="module")
def plain(consoles):
    return consoles[1]


@pytest.fixture(scope="module")
def provider(consoles):
    return consoles[2]


def _set_email(username: str, email: str) -> str:
    return (
        "from django.contrib.auth.models import User; "
        f"User.objects.filter(username={username!r}).update(email={email!r})"
    )


def sso_sign_in(browser, console, sub: str) -> Page:
    """A fresh browser: the console's button, the provider's login and consent, and back."""
    context = new_context(browser, viewport=DESKTOP, base_url=console.url)
    page = context.new_page()
    page.goto("/login/")
    PROBLEMS.extend(a11y.check(page, f"sign-in with a provider ({console.url})"))
    page.get_by_role("button", name="Sign in with Team SSO").click()
    at_the_provider(page, console, sub)
    return page


def at_the_provider(page: Page, console, sub: str) -> None:
    """The provider's development login (any password) and consent, and back to `console`."""
    expect(page).to_have_url(re.compile(r"^http://127\.0\.0\.1:\d+/interaction/"))
    page.locator("input[name=login]").fill(sub)
    page.locator("input[name=password]").fill("any password: the provider's development login")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()  # the provider's consent
    expect(page).to_have_url(re.compile("^" + re.escape(console.url)))


def person(console, username: str) -> tuple:
    """(role, from_sso, [groups]) of a person, read from the console's database."""
    (row,) = db_rows(
        console,
        "select p.role, p.from_sso, u.id from mcpcore_person p join auth_user u on u.id = p.user_id "
        "where u.username = ?",
        username,
    )
    groups = db_rows(
        console,
        "select g.name from mcpcore_group g join mcpcore_group_people gp on gp.group_id = g.id "
        "where gp.user_id = ? order by g.name",
        row[2],
    )
    return row[0], bool(row[1]), [g for (g,) in groups]


def audit_rows(console, action: str, obj: str) -> list:
    rows = db_rows(
        console, "select after from mcpcore_auditentry where action = ? and object = ?", action, obj
    )
    return [json.loads(after) if after else None for (after,) in rows]


def test_it_signs_in_with_the_role_of_the_providers_groups_and_no_second_factor(browser, mapped, provider):
    provider.account("alice", ["platform", "ops", "Team Leads"])
    page = sso_sign_in(browser, mapped, "alice")
    # AGENVOY_REQUIRE_2FA=1 holds password people on Account: not a person from the provider.
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    page.goto("/history/")
    expect(page.get_by_role("heading", name="History")).to_be_visible()
    # The highest role met; groups exactly the claim's values that are group names.
    assert person(mapped, "alice") == ("admin", True, ["ops", "platform"])
    assert audit_rows(mapped, "signin.ok", "alice") == [{"via": "sso"}]
    # Account offers no password to change and asks for no second factor (SPEC 23.2).
    page.goto("/account/")
    expect(page.get_by_text("there is no password here to change")).to_be_visible()
    expect(page.get_by_role("link", name="Change password")).to_have_count(0)
    expect(page.get_by_role("alert")).to_have_count(0)
    page.context.close()


def test_it_replaces_role_and_groups_at_the_next_sign_in(browser, mapped, provider):
    provider.account("alice", ["oncall"])
    page = sso_sign_in(browser, mapped, "alice")
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    assert person(mapped, "alice") == ("approver", True, ["oncall"])
    # The provider's change is audited as the People page's is (SPEC 23.1), before and after.
    assert audit_rows(mapped, "person.edit", "alice")[-1] == {"role": "approver", "groups": ["oncall"]}
    page.context.close()


def test_it_does_not_ask_an_sso_person_for_a_second_factor_they_added(browser, mapped, provider):
    mapped.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from allauth.mfa.totp.internal.auth import TOTP; "
        "TOTP.activate(User.objects.get(username='alice'), 'JBSWY3DPEHPK3PXPJBSWY3DP')",
    )
    page = sso_sign_in(browser, mapped, "alice")
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    assert "/2fa/" not in page.url
    page.context.close()


def test_it_refuses_a_person_with_no_role(browser, mapped, provider):
    provider.account("bob", ["guests"])
    page = sso_sign_in(browser, mapped, "bob")
    expect(page.get_by_role("alert")).to_have_text("bob@example.com has no role in this console.")
    PROBLEMS.extend(a11y.check(page, "sign-in refused (no role)"))
    assert db_rows(mapped, "select count(*) from auth_user where email = 'bob@example.com'") == [(0,)]
    assert audit_rows(mapped, "signin.failed", "bob@example.com") == [{"via": "sso", "reason": "no role"}]
    page.goto("/history/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()  # not signed in
    page.context.close()


def test_it_never_joins_the_identity_to_an_existing_person_with_its_email(browser, mapped, provider):
    provider.account("carol-sso", ["staff"], email="carol@example.com", username="carol")
    page = sso_sign_in(browser, mapped, "carol-sso")
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    people = db_rows(mapped, "select username from auth_user where email = 'carol@example.com' order by id")
    # A new person (SPEC 23.2: the first sign-in makes a new person), its username made unique.
    assert [u for (u,) in people][0] == PASSWORD_USER and len(people) == 2, people
    new = people[1][0]
    assert new != PASSWORD_USER and new.startswith("carol")
    assert person(mapped, new) == ("viewer", True, ["staff"])
    linked = db_rows(
        mapped, "select u.username from socialaccount_socialaccount s join auth_user u on u.id = s.user_id"
    )
    assert (PASSWORD_USER,) not in linked
    # The existing person is untouched: no Person row (an admin, as before) and their password.
    assert db_rows(
        mapped,
        "select count(*) from mcpcore_person p join auth_user u on u.id = p.user_id where u.username = ?",
        PASSWORD_USER,
    ) == [(0,)]
    page.context.close()


def test_it_refuses_to_connect_an_identity_to_the_person_signed_in(browser, mapped, provider):
    # allauth's "connect" process would join the identity to the person signed in: an existing
    # person (here one with a password), which SPEC 23.2 forbids.
    provider.account("carol-connect", ["platform"], email="carol@example.com", username="carol-connect")
    context = new_context(browser, viewport=DESKTOP, base_url=mapped.url)
    page = context.new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill(PASSWORD_USER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click(timeout=90_000)
    expect(page.get_by_role("heading", name="Account")).to_be_visible()  # held: AGENVOY_REQUIRE_2FA
    page.goto("/accounts/oidc/sso/login/?process=connect")
    page.get_by_role("button", name="Continue").click()
    at_the_provider(page, mapped, "carol-connect")
    expect(page.get_by_role("alert")).to_have_text("A provider identity is not joined to an existing person.")
    assert db_rows(
        mapped, "select count(*) from socialaccount_socialaccount where uid = 'carol-connect'"
    ) == [(0,)]
    assert db_rows(mapped, "select count(*) from auth_user where username like 'carol-connect%'") == [(0,)]
    context.close()


def test_it_refuses_a_deactivated_person(browser, mapped, provider):
    provider.account("dave", ["ops"])
    page = sso_sign_in(browser, mapped, "dave")
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    page.context.close()
    mapped.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; User.objects.filter(username='dave').update(is_active=False)",
    )
    page = sso_sign_in(browser, mapped, "dave")
    expect(page.get_by_role("alert")).to_have_text("dave@example.com is deactivated in this console.")
    page.goto("/history/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert {"via": "sso", "reason": "deactivated"} in audit_rows(mapped, "signin.failed", "dave@example.com")
    page.context.close()


def test_without_roles_the_first_sign_in_makes_a_viewer_and_later_ones_change_nothing(
    browser, plain, provider
):
    provider.account("erin", ["platform"])
    page = sso_sign_in(browser, plain, "erin")
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    page.context.close()
    assert person(plain, "erin") == ("viewer", False, [])
    plain.manage(
        "shell",
        "-c",
        "from mcpcore.models import Person, Group; p = Person.objects.get(user__username='erin'); "
        "p.role = 'approver'; p.save(); Group.objects.create(name='reviewers').people.add(p.user)",
    )
    provider.account("erin", ["platform", "ops"])
    page = sso_sign_in(browser, plain, "erin")
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    page.context.close()
    assert person(plain, "erin") == ("approver", False, ["reviewers"])


def test_with_password_sign_in_off_there_is_no_form_and_a_password_gets_403(browser, plain):
    context = new_context(browser, viewport=DESKTOP, base_url=plain.url)
    page = context.new_page()
    page.goto("/login/")
    expect(page.get_by_role("button", name="Sign in with Team SSO")).to_be_visible()
    expect(page.get_by_label("Password")).to_have_count(0)
    expect(page.get_by_role("button", name="Sign in with a passkey")).to_have_count(0)
    context.close()
    with httpx2.Client(base_url=plain.url, timeout=60) as web:
        web.get("/login/")
        for path in ("/login/", "/accounts/login/"):
            r = web.post(
                path,
                data={
                    "username": "olga",
                    "password": "olga-password-23",
                    "csrfmiddlewaretoken": web.cookies["csrftoken"],
                },
                headers={"Referer": plain.url + "/login/"},
            )
            assert r.status_code == 403, (path, r.status_code)
            assert "Password sign-in is turned off here" in r.text
        assert web.get("/history/").status_code == 302  # still not signed in


def test_it_found_no_serious_problem_on_the_sign_in_pages():
    assert not PROBLEMS, "\n".join(PROBLEMS)
