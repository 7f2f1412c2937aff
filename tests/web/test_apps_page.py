"""The Tokens page's Connected apps (SPEC 21.4) and the `Allow an app` page's answers to a bad
request (21.3), with grants written through mcpcore.oauth (no app signs in here: that is
tests/mcpserver/test_oauth_server.py and tests/e2e/test_apps_browser.py)."""

import uuid

import pytest

from mcpcore import audit
from mcpcore.models import ApiToken, AppGrant, AuditEntry
from mcpcore.oauth import clients, grants

pytestmark = pytest.mark.django_db


def allowed(user, name: str = "Pocket") -> AppGrant:
    client, _ = clients.register(
        {"client_id": str(uuid.uuid4()), "client_name": name, "redirect_uris": ["https://app.example/cb"]},
        None,
        "1.2.3.4",
    )
    grant, _code = grants.allow(
        client,
        user,
        "/mcp",
        [],
        redirect_uri="https://app.example/cb",
        redirect_uri_explicit=True,
        code_challenge="c" * 43,
        asked_resource="",
        by=audit.Actor(user.username),
    )
    return grant


def test_it_lists_connected_apps_apart_from_the_tokens(signed_in, user):
    grant = allowed(user)
    html = signed_in.get("/tokens/").content.decode()
    apps = html[html.index('id="connected-apps"') :]
    assert "Pocket" in apps and grant.client.client_id in apps and "op" in apps and "all tools" in apps
    tokens = html[: html.index('id="connected-apps"')]
    assert "Pocket (app of op)" not in tokens


def test_it_revokes_an_app_from_the_tokens_page(signed_in, user):
    grant = allowed(user)
    r = signed_in.post(f"/tokens/apps/{grant.pk}/revoke/")
    assert r.status_code == 302
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    assert ApiToken.objects.get(pk=grant.token_id).revoked_at is not None
    assert AuditEntry.objects.filter(action="grant.revoke", actor="op", object="Pocket (app of op)").exists()
    assert "Pocket" not in signed_in.get("/tokens/").content.decode().split('id="connected-apps"')[1]


def test_it_answers_a_bad_or_stale_allow_request_with_a_400_page(signed_in):
    for query in ("", "?request=nonsense", "?request=" + grants.sign_request({"client_id": "gone"})):
        r = signed_in.get("/apps/allow/" + query)
        assert r.status_code == 400
        assert "Authorization failed: this request has expired or is not valid" in r.content.decode()


def test_it_never_lets_the_allow_page_be_framed(signed_in, user, settings):
    settings.AGENVOY_PUBLIC_URL = "https://console.example"
    grant = allowed(user)
    request = grants.sign_request(
        {
            "client_id": grant.client.client_id,
            "redirect_uri": "https://app.example/cb",
            "explicit": True,
            "code_challenge": "c" * 43,
            "state": "s",
            "resource": "/mcp",
            "asked_resource": "",
        }
    )
    r = signed_in.get("/apps/allow/", {"request": request})
    assert r.status_code == 200 and "Allow an app" in r.content.decode()
    assert r["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in r["Content-Security-Policy"]
    assert r["Cache-Control"] == "no-store"


def test_it_keeps_the_earlier_grant_when_allowing_an_app_again_fails(signed_in, user, monkeypatch):
    """Allowing an app again replaces the person's earlier grant: its revocation and the new
    grant are one change, so a new grant that cannot be written leaves the earlier one (and its
    token) in force instead of the app with none."""
    earlier = allowed(user)
    request = grants.sign_request(
        {
            "client_id": earlier.client.client_id,
            "redirect_uri": "https://app.example/cb",
            "explicit": True,
            "code_challenge": "c" * 43,
            "state": "s",
            "resource": "/mcp",
            "asked_resource": "",
        }
    )

    def failing(*args, **kwargs):
        raise RuntimeError("the new grant could not be written")

    monkeypatch.setattr(grants, "allow", failing)
    with pytest.raises(RuntimeError):
        signed_in.post("/apps/allow/", {"request": request, "decision": "allow"})
    earlier.refresh_from_db()
    assert earlier.revoked_at is None
    assert ApiToken.objects.get(pk=earlier.token_id).revoked_at is None
