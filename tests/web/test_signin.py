"""Signing in (SPEC 22.1) through the pages as a browser posts them: failed sign-ins locked per
username and address with the exact 429, the trusted-proxy rule, `axes_reset`; an
authenticator app added from its shown secret and then asked for, a wrong code counting as a
failed sign-in, recovery codes single use; AGENVOY_REQUIRE_2FA; signing out another session;
`reset_2fa`. (Passkeys, which need a browser's authenticator: tests/e2e/test_signin_browser.py.)"""

import base64
import hashlib
import hmac
import io
import ipaddress
import re
import struct
import time

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

PASSWORD = "signin-pw-2201"
LOCKED = "Too many failed sign-ins. Try again in 15 minutes."


def totp(secret: str, at: float | None = None) -> str:
    """RFC 6238 (30 s, 6 digits, SHA-1) from a base32 secret, as an authenticator app does."""
    key = base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))
    counter = int((time.time() if at is None else at) // 30)
    digest = hmac.new(key, struct.pack(">Q", counter), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    number = struct.unpack(">I", digest[offset : offset + 4])[0] & 0x7FFFFFFF
    return f"{number % 1_000_000:06d}"


@pytest.fixture
def person(db) -> User:
    return User.objects.create_user("alice", password=PASSWORD)


def sign_in(c: Client, username: str = "alice", password: str = PASSWORD, **extra):
    return c.post("/login/", {"username": username, "password": password}, **extra)


def test_the_password_signs_in_with_the_consoles_own_form_fields(client, person):
    r = sign_in(client)
    assert r.status_code == 302 and r["Location"] == "/"
    assert client.get("/history/").status_code == 200


def test_a_wrong_password_says_so_and_signs_nobody_in(client, person):
    r = sign_in(client, password="wrong")
    assert r.status_code == 200
    assert "didn&#x27;t match" in r.content.decode() or "didn't match" in r.content.decode()
    assert client.get("/history/").status_code == 302


def test_five_failures_lock_the_pair_and_the_right_password_is_refused_with_429(client, person):
    for _ in range(5):
        assert sign_in(client, password="wrong").status_code in (200, 429)
    r = sign_in(client)
    assert r.status_code == 429
    assert LOCKED in r.content.decode()
    assert client.get("/history/").status_code == 302  # not signed in
    # Another person from the same address, and the same person from another address, are not locked.
    User.objects.create_user("bob", password=PASSWORD)
    assert sign_in(Client(), "bob").status_code == 302
    assert sign_in(Client(REMOTE_ADDR="10.9.8.7")).status_code == 302
    # The package's own command unlocks.
    call_command("axes_reset", stdout=io.StringIO())
    assert sign_in(client).status_code == 302


def test_a_username_counts_as_one_whatever_its_letter_case(client, person):
    spellings = ["alice", "Alice", "ALICE", "aLiCe", "alicE"]
    tries = [sign_in(client, name, password="wrong").status_code for name in spellings]
    assert tries == [200] * 4 + [429]
    for name in ("alice", "ALICE", "Alice"):
        r = sign_in(client, name)
        assert r.status_code == 429 and LOCKED in r.content.decode()
    assert client.get("/history/").status_code == 302  # not signed in


def test_four_failures_do_not_lock(client, person):
    for _ in range(4):
        sign_in(client, password="wrong")
    assert sign_in(client).status_code == 302


@override_settings(AXES_FAILURE_LIMIT=2)
def test_forwarded_for_is_read_from_the_right_through_trusted_proxies_only(person):
    # No trusted proxy: the header is ignored, so a new forwarded address does not escape the lock.
    for _ in range(2):
        sign_in(Client(), password="wrong", HTTP_X_FORWARDED_FOR="203.0.113.9, 10.0.0.1")
    assert sign_in(Client(), HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 429
    call_command("axes_reset", stdout=io.StringIO())

    # Behind a trusted proxy (the peer, 127.0.0.1) that appended the client's address: the
    # entries the client wrote itself, left of it, change nothing.
    with override_settings(AGENVOY_TRUSTED_PROXIES=(ipaddress.ip_network("127.0.0.0/8"),)):
        for forged in ("203.0.113.1", "203.0.113.2, 10.1.1.1"):
            sign_in(Client(), password="wrong", HTTP_X_FORWARDED_FOR=f"{forged}, 198.51.100.7")
        assert sign_in(Client(), HTTP_X_FORWARDED_FOR="203.0.113.3, 198.51.100.7").status_code == 429
        # Another client behind the same proxy is not locked.
        assert sign_in(Client(), HTTP_X_FORWARDED_FOR="203.0.113.1, 198.51.100.8").status_code == 302
    call_command("axes_reset", stdout=io.StringIO())

    # Two trusted hops (a proxy in front of the proxy): the walk goes past both.
    proxies = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("10.0.0.0/8"))
    with override_settings(AGENVOY_TRUSTED_PROXIES=proxies):
        for forged in ("203.0.113.1", "203.0.113.2"):
            sign_in(Client(), password="wrong", HTTP_X_FORWARDED_FOR=f"{forged}, 198.51.100.7, 10.0.0.5")
        assert sign_in(Client(), HTTP_X_FORWARDED_FOR="198.51.100.7, 10.0.0.6").status_code == 429
        assert sign_in(Client(), HTTP_X_FORWARDED_FOR="10.0.0.6").status_code == 302  # all trusted


REAUTHENTICATE = "/accounts/reauthenticate/"


def reauthenticate(c: Client, password: str = PASSWORD) -> None:
    """allauth's "confirm it's you": the password again (good for the next 5 minutes)."""
    r = c.post(REAUTHENTICATE, {"password": password})
    assert r.status_code == 302, r.content.decode()[:2000]


def _add_authenticator_app(c: Client) -> tuple[str, list[str]]:
    """On the Account page's link: the QR code and the secret as text; a code computed from
    that secret activates it. The secret, and the recovery codes made with it."""
    reauthenticate(c)
    page = c.get("/accounts/2fa/totp/activate/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'src="data:image/svg+xml' in html  # the QR code
    secret = re.search(r'id="authenticator_secret"[^>]*value="([A-Z2-7]+)"', html) or re.search(
        r'value="([A-Z2-7]{16,})"', html
    )
    assert secret, html
    r = c.post("/accounts/2fa/totp/activate/", {"code": totp(secret.group(1))})
    assert r.status_code == 302, r.content.decode()[:2000]
    codes_page = c.get("/accounts/2fa/recovery-codes/").content.decode()
    codes = re.findall(r"\b[0-9a-f]{8}\b", codes_page)
    return secret.group(1), codes


def test_an_authenticator_app_is_added_from_its_secret_and_then_asked_for(client, person):
    sign_in(client)
    assert "Add an authenticator app" in client.get("/account/").content.decode()
    secret, codes = _add_authenticator_app(client)
    assert len(set(codes)) == 10
    assert "Added" in client.get("/account/").content.decode()

    fresh = Client()
    r = sign_in(fresh)
    assert r.status_code == 302 and r["Location"].startswith("/accounts/2fa/authenticate/")
    assert fresh.get("/history/").status_code == 302  # not in yet
    r = fresh.post("/accounts/2fa/authenticate/", {"code": totp(secret, time.time() + 60)})  # not this one
    assert r.status_code == 200 and fresh.get("/history/").status_code == 302
    r = fresh.post("/accounts/2fa/authenticate/", {"code": totp(secret)})
    assert r.status_code == 302
    assert fresh.get("/history/").status_code == 200


def test_second_factors_ask_for_the_password_again_before_they_are_shown_or_changed(client, person):
    """A session left open (or taken) does not show the recovery codes nor add or remove a
    factor: allauth's reauthentication asks for the password (or a factor) first."""
    from allauth.mfa.models import Authenticator

    sign_in(client)
    r = client.get("/accounts/2fa/totp/activate/")
    assert r.status_code == 302 and r["Location"].startswith(REAUTHENTICATE)
    assert client.post("/accounts/2fa/totp/activate/", {"code": "123456"}).status_code == 302
    secret, codes = _add_authenticator_app(client)  # after the password again

    taken = Client()
    sign_in(taken)
    assert taken.post("/accounts/2fa/authenticate/", {"code": totp(secret)}).status_code == 302
    for path in ("/accounts/2fa/recovery-codes/", "/accounts/2fa/recovery-codes/generate/"):
        r = taken.get(path)
        assert r.status_code == 302 and "reauthenticate" in r["Location"], path
    r = taken.post("/accounts/2fa/recovery-codes/generate/")
    assert r.status_code == 302 and "reauthenticate" in r["Location"]
    r = taken.post("/accounts/2fa/totp/deactivate/")
    assert r.status_code == 302 and "reauthenticate" in r["Location"]
    assert taken.get("/accounts/2fa/webauthn/add/")["Location"].startswith("/accounts/")
    assert "reauthenticate" in taken.get("/accounts/2fa/webauthn/add/")["Location"]
    assert Authenticator.objects.filter(user=person, type="totp").exists()
    assert not any(code in taken.get("/account/").content.decode() for code in codes)


def test_a_recovery_code_works_once_and_not_twice(client, person):
    sign_in(client)
    _secret, codes = _add_authenticator_app(client)
    first = Client()
    sign_in(first)
    assert first.post("/accounts/2fa/authenticate/", {"code": codes[0]}).status_code == 302
    assert first.get("/history/").status_code == 200
    second = Client()
    sign_in(second)
    r = second.post("/accounts/2fa/authenticate/", {"code": codes[0]})
    assert r.status_code == 200 and second.get("/history/").status_code == 302
    assert second.post("/accounts/2fa/authenticate/", {"code": codes[1]}).status_code == 302


def test_wrong_codes_count_as_failed_sign_ins(client, person):
    sign_in(client)
    secret, _codes = _add_authenticator_app(client)
    c = Client()
    sign_in(c)
    for _ in range(5):
        c.post("/accounts/2fa/authenticate/", {"code": "000000"})
    r = c.post("/accounts/2fa/authenticate/", {"code": totp(secret)})
    assert r.status_code == 429 and LOCKED in r.content.decode()
    assert c.get("/history/").status_code == 302
    assert sign_in(Client()).status_code == 429  # the password step is locked too


@override_settings(AGENVOY_REQUIRE_2FA=True)
def test_require_2fa_keeps_a_person_on_the_account_page_until_one_is_added(client, person):
    assert sign_in(client).status_code == 302
    for path in ("/", "/history/", "/tokens/"):
        r = client.get(path)
        assert r.status_code == 302 and r["Location"] == "/account/", path
    page = client.get("/account/").content.decode()
    assert "asks every person for a second factor" in page
    _add_authenticator_app(client)
    assert client.get("/history/").status_code == 200


def test_a_person_signs_out_another_of_their_sessions(person):
    here, there = (
        Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Chrome/140.0"),
        Client(REMOTE_ADDR="10.1.2.3", HTTP_USER_AGENT="Mozilla/5.0 (iPhone) Safari/605.1"),
    )
    sign_in(here)
    sign_in(there)
    assert there.get("/history/").status_code == 200
    page = here.get("/account/").content.decode()
    assert "Chrome on Linux" in page and "Safari on iOS" in page and "10.1.2.3" in page
    from allauth.usersessions.models import UserSession

    other = UserSession.objects.get(user=person, ip="10.1.2.3")
    r = here.post(f"/account/sessions/{other.pk}/sign-out/")
    assert r.status_code == 302 and r["Location"] == "/account/"
    assert there.get("/history/").status_code == 302  # signed out
    assert here.get("/history/").status_code == 200  # still in
    assert "10.1.2.3" not in here.get("/account/").content.decode()


def test_nobody_signs_out_someone_elses_session(person):
    User.objects.create_user("bob", password=PASSWORD)
    alice, bob = Client(), Client(REMOTE_ADDR="10.4.4.4")
    sign_in(alice)
    sign_in(bob, "bob")
    from allauth.usersessions.models import UserSession

    theirs = UserSession.objects.get(user__username="bob")
    assert alice.post(f"/account/sessions/{theirs.pk}/sign-out/").status_code == 404
    assert bob.get("/history/").status_code == 200


def test_reset_2fa_removes_a_persons_second_factors_and_says_what(client, person):
    sign_in(client)
    _add_authenticator_app(client)
    out = io.StringIO()
    call_command("reset_2fa", "alice", stdout=out)
    assert "removed authenticator app" in out.getvalue() and "removed recovery codes" in out.getvalue()
    assert sign_in(Client()).status_code == 302 and sign_in(Client())["Location"] == "/"
    out = io.StringIO()
    call_command("reset_2fa", "alice", stdout=out)
    assert "nothing removed" in out.getvalue()


def test_there_is_no_sign_up(client):
    assert client.get("/accounts/signup/").status_code in (200, 302, 403, 404)
    client.post("/accounts/signup/", {"username": "mallory", "password1": "x" * 12, "password2": "x" * 12})
    assert not User.objects.filter(username="mallory").exists()


def test_the_account_page_changes_the_password(client, person):
    sign_in(client)
    assert "/accounts/password/change/" in client.get("/account/").content.decode()
    new = "a-new-password-2201"
    r = client.post(
        "/accounts/password/change/", {"oldpassword": PASSWORD, "password1": new, "password2": new}
    )
    assert r.status_code == 302
    assert sign_in(Client(), password=new).status_code == 302
    assert sign_in(Client(REMOTE_ADDR="10.7.7.7")).status_code == 200  # the old one no longer


def test_every_page_the_account_page_leads_to_opens(client, person):
    """allauth's pages in the console's look, each answering (a template library missing, a
    layout block renamed, would be a 500 on one of them)."""
    sign_in(client)
    _add_authenticator_app(client)
    for path in (
        "/account/",
        "/accounts/2fa/",
        "/accounts/2fa/totp/deactivate/",
        "/accounts/2fa/recovery-codes/",
        "/accounts/2fa/recovery-codes/generate/",
        "/accounts/2fa/webauthn/",
        "/accounts/2fa/webauthn/add/",
        "/accounts/password/change/",
        "/accounts/sessions/",
        "/accounts/reauthenticate/",
    ):
        r = client.get(path)
        assert r.status_code == 200, path
        assert 'class="topbar"' in r.content.decode() and "Agenvoy MCP console" in r.content.decode(), path


def _rows(action: str) -> list:
    from mcpcore.models import AuditEntry

    return list(AuditEntry.objects.filter(action=action).order_by("id"))


def test_sign_ins_and_second_factors_are_in_the_audit_trail(person, django_capture_on_commit_callbacks):
    """SPEC 22.2: signin.ok, signin.failed, signin.locked, mfa.add, mfa.remove, with actor,
    object and address; no password or code in any row."""
    from mcpcore.models import AuditEntry

    c = Client(REMOTE_ADDR="10.2.2.2")
    sign_in(c, password="wrong-guess-1")
    [failed] = _rows("signin.failed")
    assert (failed.actor, failed.object, failed.address) == ("alice", "alice", "10.2.2.2")
    for _ in range(4):
        sign_in(c, password="wrong-guess-1")
    [locked] = _rows("signin.locked")
    assert (locked.object, locked.address, locked.after) == ("alice", "10.2.2.2", {"minutes": 15})
    call_command("axes_reset", stdout=io.StringIO())
    sign_in(c)
    [ok] = _rows("signin.ok")
    assert (ok.actor, ok.object, ok.address) == ("alice", "alice", "10.2.2.2")
    with django_capture_on_commit_callbacks(execute=True):  # allauth tells once committed
        secret, codes = _add_authenticator_app(c)
    added = _rows("mfa.add")
    assert {tuple(r.after.items()) for r in added} >= {(("kind", "authenticator app"),)}
    assert all(r.actor == "alice" and r.address == "10.2.2.2" for r in added)
    call_command("reset_2fa", "alice", stdout=io.StringIO())
    removed = _rows("mfa.remove")
    assert {r.before["kind"] for r in removed} == {"authenticator app", "recovery codes"}
    assert all(r.actor == "system" for r in removed)
    everything = " ".join(str([r.before, r.after, r.object]) for r in AuditEntry.objects.all())
    for secret_value in (PASSWORD, "wrong-guess-1", secret, *codes):
        assert secret_value not in everything


def test_the_second_factors_secrets_are_not_kept_in_clear(client, person):
    from allauth.mfa.models import Authenticator

    sign_in(client)
    secret, codes = _add_authenticator_app(client)
    stored = " ".join(str(a.data) for a in Authenticator.objects.filter(user=person))
    assert secret not in stored
    assert not any(code in stored for code in codes)
