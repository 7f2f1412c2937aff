"""mcpcore.oauth (SPEC 21.2-21.4) on the database: the registration rules, the metadata
documents' checks, codes and tokens kept as hashes."""

import datetime
import uuid

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from mcpcore import audit
from mcpcore.models import AppClient, AppCode, AppToken
from mcpcore.oauth import clients, grants

BY = audit.Actor("alice", "127.0.0.1")


def meta(**more) -> dict:
    return {
        "client_id": str(uuid.uuid4()),
        "client_name": "App",
        "redirect_uris": ["https://app.example/cb"],
        "token_endpoint_auth_method": "none",
        **more,
    }


@pytest.mark.parametrize(
    "uri, ok",
    [
        ("https://claude.ai/api/mcp/auth_callback", True),
        ("http://127.0.0.1:33418/callback", True),
        ("http://[::1]:8080/cb", True),
        ("http://localhost:3000/callback", True),
        ("cursor://anysphere.cursor-mcp/oauth/callback", True),
        ("com.example.app:/oauth", True),
        ("http://example.com/cb", False),
        ("https://app.example/cb#x", False),
        ("myapp://callback", False),
        ("ftp://files.example/cb", False),
        ("javascript://x.y/alert", False),
    ],
)
def test_it_applies_the_redirect_rules_of_registration(uri, ok):
    assert (clients.redirect_problem(uri) is None) == ok


def test_it_matches_loopback_redirects_on_any_port_and_others_exactly():
    assert clients.redirect_matches("http://127.0.0.1:1/cb", "http://127.0.0.1:5555/cb")
    assert clients.redirect_matches("http://localhost/cb", "http://localhost:80/cb")
    assert not clients.redirect_matches("http://127.0.0.1:1/cb", "http://127.0.0.1:5555/other")
    assert not clients.redirect_matches("https://app.example:1/cb", "https://app.example:2/cb")
    assert not clients.redirect_matches("http://127.0.0.1/cb", "https://127.0.0.1/cb")


@pytest.mark.django_db
def test_it_reuses_an_identical_unallowed_public_registration_and_never_a_secret():
    first, _ = clients.register(meta(), None, "1.2.3.4")
    again, again_secret = clients.register(meta(), None, "1.2.3.4")
    assert again.pk == first.pk and again_secret is None
    AppClient.objects.filter(pk=first.pk).update(allowed_at=timezone.now())
    third, _ = clients.register(meta(), None, "1.2.3.4")
    assert third.pk != first.pk  # an allowed client is never handed to someone else
    confidential = meta(token_endpoint_auth_method="client_secret_post")
    one, secret = clients.register(confidential, "s3cret", "1.2.3.4")
    other, other_secret = clients.register({**confidential, "client_id": str(uuid.uuid4())}, "x", "1.2.3.4")
    assert other.pk != one.pk and (secret, other_secret) == ("s3cret", "x")
    assert "s3cret" not in AppClient.objects.get(pk=one.pk).secret  # sealed


@pytest.mark.django_db
def test_it_drops_unallowed_clients_after_a_day_and_keeps_at_most_100():
    old, _ = clients.register(meta(client_name="old"), None, "1.1.1.1")
    kept, _ = clients.register(meta(client_name="kept"), None, "1.1.1.1")
    day_ago = timezone.now() - datetime.timedelta(hours=25)
    AppClient.objects.filter(pk__in=[old.pk, kept.pk]).update(created_at=day_ago)
    AppClient.objects.filter(pk=kept.pk).update(allowed_at=timezone.now())
    clients.register(meta(client_name="new"), None, "1.1.1.1")
    assert not AppClient.objects.filter(pk=old.pk).exists()
    assert AppClient.objects.filter(pk=kept.pk).exists()
    first = None
    for i in range(101):
        row, _ = clients.register(meta(client_name=f"n{i}"), None, f"2.2.2.{i % 10}")
        first = first or row
    assert AppClient.objects.filter(allowed_at__isnull=True).count() == 100
    assert not AppClient.objects.filter(name="new").exists()  # the oldest went first


@pytest.mark.django_db
def test_it_allows_20_registrations_an_hour_per_address():
    for i in range(20):
        assert clients.registrations_left("9.9.9.9")
        clients.register(meta(client_name=f"r{i}"), None, "9.9.9.9")
    assert not clients.registrations_left("9.9.9.9")
    assert clients.registrations_left("9.9.9.8")
    with pytest.raises(clients.ClientError) as refused:
        clients.register(meta(client_name="one more"), None, "9.9.9.9")
    assert refused.value.error == "too_many_registrations"


@pytest.mark.parametrize(
    "document, why",
    [
        ([], "not a JSON object"),
        (
            {"client_id": "https://other.example/c.json", "redirect_uris": ["https://a.example/cb"]},
            "another client_id",
        ),
        (
            {"client_id": "ID", "redirect_uris": ["https://a.example/cb"], "client_secret": "x"},
            "carries a secret",
        ),
        (
            {
                "client_id": "ID",
                "redirect_uris": ["https://a.example/cb"],
                "jwks": {"keys": [{"kty": "EC", "d": "x"}]},
            },
            "private key",
        ),
        (
            {
                "client_id": "ID",
                "redirect_uris": ["https://a.example/cb"],
                "token_endpoint_auth_method": "private_key_jwt",
            },
            "only use token_endpoint_auth_method none",
        ),
        ({"client_id": "ID"}, "lists no redirect_uris"),
    ],
)
def test_it_refuses_a_bad_client_metadata_document(document, why):
    client_id = "https://app.example/client.json"
    if isinstance(document, dict) and document.get("client_id") == "ID":
        document = {**document, "client_id": client_id}
    with pytest.raises(clients.ClientError, match=why):
        clients.check_document(client_id, document)


def test_it_counts_only_public_addresses_as_public():
    assert clients.public_address("1.1.1.1")
    for private in (
        "127.0.0.1",
        "10.0.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fd00::1",
        "::ffff:10.0.0.1",
    ):
        assert not clients.public_address(private), private


def allowed(client, user):
    """The grant and code a person's Allow gives `client` for `/mcp` (SPEC 21)."""
    return grants.allow(
        client,
        user,
        "/mcp",
        [],
        redirect_uri="https://app.example/cb",
        redirect_uri_explicit=True,
        code_challenge="c" * 43,
        asked_resource="",
        by=BY,
    )


@pytest.mark.django_db
def test_it_keeps_codes_and_tokens_as_hashes_only_and_spends_a_code_once(settings):
    settings.AGENVOY_PUBLIC_URL = "https://console.example"
    user = User.objects.create_user("alice")
    client, _ = clients.register(meta(), None, "1.1.1.1")
    grant, code = allowed(client, user)
    assert grant.token.name == "App (app of alice)" and grant.token.role == "agent"
    assert not AppCode.objects.filter(code_hash=code).exists()
    row = grants.code_row(client.client_id, code)
    assert row is not None
    access, refresh, seconds = grants.exchange_code(row)
    assert seconds == 3600
    hashes = set(AppToken.objects.values_list("token_hash", flat=True))
    assert hashes == {grants.digest(access), grants.digest(refresh)}
    assert grants.exchange_code(row) is None
    assert grants.code_row(client.client_id, code) is None
    assert not AppToken.objects.filter(revoked_at__isnull=True).exists()


@pytest.mark.django_db
def test_it_refuses_an_expired_code(settings):
    user = User.objects.create_user("bob")
    client, _ = clients.register(meta(), None, "1.1.1.1")
    _grant, code = allowed(client, user)
    AppCode.objects.update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    row = grants.code_row(client.client_id, code)
    assert row is not None and row.expires_at < timezone.now()  # the SDK's handler refuses it by its expiry
    assert grants.exchange_code(row) is None


@pytest.mark.django_db
def test_it_names_the_endpoint_a_resource_asks_for(settings):
    from mcpcore.models import Server, View

    settings.AGENVOY_PUBLIC_URL = "https://console.example"
    Server.objects.create(name="echo", config={"command": "x"})
    View.objects.create(name="safe")
    p = "https://console.example"
    assert grants.endpoint_path(p + "/mcp") == "/mcp"
    assert grants.endpoint_path(p + "/mcp/") == "/mcp"
    assert grants.endpoint_path(p + "/mcp/echo/") == "/mcp/echo"
    assert grants.endpoint_path(p + "/mcp/v/safe") == "/mcp/v/safe"
    assert grants.endpoint_path(p + "/mcp/_permission") == "/mcp/_permission"
    for bad in (p + "/mcp/nope", p + "/mcp/v/nope", p + "/mcpx", "https://other.example/mcp", p + "/mcp?x=1"):
        assert grants.endpoint_path(bad) is None, bad
