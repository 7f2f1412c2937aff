"""Single sign-on's pages (SPEC 23.2) without a provider: the sign-in page's button and what
AGENVOY_PASSWORD_SIGNIN=0 leaves of it, allauth's sign-up and connection pages not routed, the
provider's flow never started by a GET, the People page's redirect URI line, and the roles
read from the groups claim. (Signing in through a real provider:
tests/e2e/test_sso_browser.py.)"""

import pytest
from django.template.loader import render_to_string
from django.test import RequestFactory

from mcpcore.web import sso
from mcpcore.web.context_processors import sign_on

pytestmark = pytest.mark.django_db

ISSUER = "http://127.0.0.1:9/realms/team"
APP = {
    "provider_id": "sso",
    "name": "Team SSO",
    "client_id": "console",
    "secret": "",
    "settings": {"server_url": ISSUER, "oauth_pkce_enabled": True},
}


@pytest.fixture
def with_sso(settings):
    settings.AGENVOY_OIDC_ISSUER = ISSUER
    settings.AGENVOY_OIDC_NAME = "Team SSO"
    settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": [APP]}}
    return settings


def test_it_offers_no_provider_on_the_sign_in_page_until_one_is_set(client):
    page = client.get("/login/").content.decode()
    assert "Sign in with" not in page.replace("Sign in with a passkey", "")
    assert 'name="password"' in page


def test_it_shows_the_sign_in_button_as_a_post_to_the_providers_login(client, with_sso):
    page = client.get("/login/").content.decode()
    assert '<form method="post" action="/accounts/oidc/sso/login/">' in page
    assert "Sign in with Team SSO</button>" in page
    assert 'name="password"' in page  # the default keeps both


def test_it_never_starts_the_providers_flow_on_a_get(client, with_sso):
    # A GET would let any page (an <img>, a link) start a sign-in: allauth asks to confirm.
    r = client.get("/accounts/oidc/sso/login/")
    assert r.status_code == 200
    assert "Location" not in r


def test_it_leaves_only_the_providers_button_without_password_sign_in(client, with_sso):
    with_sso.AGENVOY_PASSWORD_SIGNIN = False
    page = client.get("/login/").content.decode()
    assert "Sign in with Team SSO</button>" in page
    assert 'name="password"' not in page and "passkey" not in page
    r = client.post("/login/", {"username": "admin", "password": "whatever"})
    assert r.status_code == 403
    assert "Password sign-in is turned off here: sign in with Team SSO." in r.content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/3rdparty/",
        "/accounts/3rdparty/signup/",
        "/accounts/social/signup/",
        "/accounts/social/connections/",
    ],
)
def test_it_routes_no_sign_up_or_connection_page_for_provider_identities(signed_in, with_sso, path):
    assert signed_in.get(path).status_code == 404


def test_it_shows_the_redirect_uri_to_register_for_the_people_page(with_sso):
    request = RequestFactory().get("/people/")
    line = render_to_string("mcpcore/includes/people_sso.html", sign_on(request))
    assert "http://127.0.0.1:8000/accounts/oidc/sso/login/callback/" in line
    assert "Team SSO" in line


@pytest.mark.parametrize(
    "groups, role",
    [
        (["platform", "ops"], "admin"),
        (["oncall"], "approver"),
        (["ops", "guests"], "approver"),
        (["guests"], "viewer"),
        ([], "viewer"),
    ],
)
def test_it_gives_the_highest_role_whose_groups_the_claim_meets(settings, groups, role):
    settings.AGENVOY_OIDC_ROLES = [
        ("admin", frozenset({"platform"})),
        ("approver", frozenset({"ops", "oncall"})),
        ("viewer", frozenset({"*"})),
    ]
    assert sso.role_for(groups) == role


def test_it_gives_no_role_when_no_groups_match_and_nobody_is_anyone(settings):
    settings.AGENVOY_OIDC_ROLES = [("admin", frozenset({"platform"}))]
    assert sso.role_for(["ops"]) is None


def test_it_reads_the_groups_claim_as_a_list_or_one_string(settings):
    settings.AGENVOY_OIDC_GROUPS_CLAIM = "roles"
    assert sso.claimed_groups({"roles": ["a", "b", 3, ""]}) == ["a", "b"]
    assert sso.claimed_groups({"roles": "a"}) == ["a"]
    assert sso.claimed_groups({"groups": ["a"]}) == []
    assert sso.group_names(["ops", "/team/ops", "Team Leads", "x" * 65, "on-call_2"]) == ["on-call_2", "ops"]
