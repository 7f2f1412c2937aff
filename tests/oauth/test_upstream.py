"""Servers that need OAuth (SPEC 16), against the real authorization server and protected MCP
server of tests/servers/oauthlab/ and a live console: detection and `needs_authorization`, the
authorization-code flow through the consent page and `/oauth/callback`, the failures of the
flow, client credentials, renewal (before expiry, after a restart, refused) and forgetting;
and in process, the encrypted rows, the expiry the provider loads, and the pure helpers."""

import datetime
import json
import time
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.utils import timezone

from mcpcore import schemas
from mcpcore.calls import notify
from mcpcore.models import OAuthAccount, OAuthFlow, mask_config, unmask_config
from mcpcore.oauth import upstream as oauth_upstream
from mcpcore.supervisor import upstream
from tests.live import db_rows, signed_in, wait_until
from tests.servers.oauthlab.run import NOT_AUTHORIZED, Lab, consent

MACHINE = ("machine", "machine-secret-4711")
WHOAMI = "mcp__lab__whoami"


@pytest.fixture
def lab(tmp_path):
    made = Lab(tmp_path / "lab", access_ttl=3600, clients=dict([MACHINE])).start()
    yield made
    made.close()


def start_console(console, servers: dict, **env):
    """A console whose public URL is its own address (the redirect URI lands on it)."""
    c = console(servers, start=False, **env)
    c.env["AGENVOY_PUBLIC_URL"] = c.url
    return console.start(c)


def state_of(c, name: str = "lab") -> dict:
    return c.status().get(name, {})


def wait_state(c, state: str, name: str = "lab", timeout: float = 30) -> dict:
    return wait_until(
        lambda: state_of(c, name) if state_of(c, name).get("state") == state else None,
        timeout,
        0.1,
        what=f"{name} {state}",
    )


def authorize(c, web, decision: str = "approve") -> httpx2.Response:
    """`POST /v1/mcp/authorize`, the consent, and the browser's return to the callback."""
    r = c.post("/v1/mcp/authorize", {"name": "lab"})
    assert r.status_code == 200, r.text
    back = consent(r.json()["url"], decision)
    assert back.startswith(f"{c.url}/oauth/callback?"), back
    return web.get(back.removeprefix(c.url))


def waiting_console(console, lab):
    """A console with `lab` as an authorization-code server, waiting for a person."""
    c = start_console(console, {"lab": {"url": lab.mcp_url, "oauth": {}}})
    wait_state(c, "needs_authorization")
    return c


def authorized_console(console, lab):
    """A console whose `lab` server (the authorization-code grant) a person has authorized, connected."""
    c = waiting_console(console, lab)
    web = signed_in(c)
    try:
        authorize(c, web)
    finally:
        web.close()
    c.wait_connected("lab")
    return c


@pytest.mark.live
def test_it_detects_a_server_that_asks_for_oauth_and_connects_it_after_a_person_authorizes(console, lab):
    c = start_console(console, {"lab": {"url": lab.mcp_url}})
    st = wait_state(c, "needs_authorization")
    assert st["Connected"] is False and st["Error"] == "needs authorization"
    assert st["oauth"] == NOT_AUTHORIZED
    web = signed_in(c)
    try:
        page = web.get("/servers/lab/").text
        assert "Needs authorization" in page and ">Authorize</button>" in page
        assert "Needs authorization" in web.get("/").text
        r = authorize(c, web)
        assert r.status_code == 302 and r.headers["location"] == "/servers/lab/"
        st = c.wait_connected("lab")["lab"]
        assert st["oauth"]["authorized"] is True and st["oauth"]["authorized_by"] == "op"
        assert st["oauth"]["scopes"] and st["oauth"]["expires_at"] and st["oauth"]["authorized_at"]
        answer = c.call(WHOAMI, {}, mode="auto").json()
        assert answer["status"] == "done", answer
        assert lab.stats()["tool_calls"] >= 1
        page = web.get("/servers/lab/").text
        assert "Authorized by op" in page and "Forget authorization" in page
        request = lab.authorize_requests()[-1]
        assert request["code_challenge_method"] == "S256" and request["resource"] and request["state"]
        assert request["redirect_uri"] == f"{c.url}/oauth/callback"
        # No token in clear: not in the database file, mcp.json, the log, pages or answers.
        secrets = lab.issued_secrets()
        assert secrets
        seen = [
            (c.data / "db.sqlite3").read_bytes().decode(errors="replace"),
            (c.home / "mcp.json").read_text(),
            c.log_text(),
            page,
            c.get("/v1/mcp/status").text,
            c.get("/v1/mcp").text,
            str(answer),
        ]
        for text in seen:
            for secret in secrets:
                assert secret not in text
    finally:
        web.close()


def page_saying(web, text: str, path: str = "/servers/lab/") -> str:
    def found() -> str | None:
        page = web.get(path).text
        return page if text in page else None

    return wait_until(found, 30, 0.2, what=f"{text!r} on {path}")


def tokens_row(c, name: str = "lab") -> tuple:
    rows = db_rows(
        c,
        "select tokens, client_info, expires_at, authorized_by from mcpcore_oauthaccount where server_name = ?",
        name,
    )
    return rows[0] if rows else ("", "", None, "")


@pytest.mark.live
def test_it_refuses_unknown_used_and_replaced_states_and_keeps_what_the_person_denied(console, lab):
    c = waiting_console(console, lab)
    web = signed_in(c)
    try:
        r = web.get("/oauth/callback?state=nope&code=abc")
        assert r.status_code == 400 and "authorization failed: unknown or expired state" in r.text
        # The page's Authorize sends the browser to the authorization server; a second flow
        # replaces that first one: its state is then unknown.
        r = web.post(
            "/servers/lab/authorize/",
            data={"csrfmiddlewaretoken": web.cookies["csrftoken"]},
            headers={"Referer": c.url + "/servers/lab/"},
        )
        assert r.status_code == 302 and r.headers["location"].startswith(f"{lab.url}/authorize?")
        first = r.headers["location"]
        back = consent(first)
        r = authorize(c, web, "deny")
        assert r.status_code == 302
        assert tokens_row(c)[0] == ""
        page = web.get("/servers/lab/").text
        assert "authorization failed: access_denied" in page
        assert state_of(c)["state"] == "needs_authorization"
        r = web.get(back.removeprefix(c.url))
        assert r.status_code == 400 and "authorization failed: unknown or expired state" in r.text
        # A used state is unknown too, and nothing is stored for it.
        r = authorize(c, web)
        assert r.status_code == 302
        c.wait_connected("lab")
        used = lab.authorize_requests()[-1]["state"]
        r = web.get(f"/oauth/callback?state={used}&code=again")
        assert r.status_code == 400 and "authorization failed: unknown or expired state" in r.text
        # The callback needs a signed-in person.
        with httpx2.Client(base_url=c.url, timeout=20) as stranger:
            r = stranger.get(f"/oauth/callback?state={used}&code=x")
            assert r.status_code == 302 and "/login/" in r.headers["location"]
    finally:
        web.close()


@pytest.mark.live
def test_it_answers_the_authorize_api_as_the_contract_says(console, lab):
    c = start_console(
        console,
        {
            "lab": {"url": lab.mcp_url, "oauth": {}},
            "plain": {"command": "true"},
            "machine": {
                "url": lab.mcp_url,
                "oauth": {
                    "grant": "client_credentials",
                    "client_id": MACHINE[0],
                    "client_secret": MACHINE[1],
                },
            },
        },
    )
    assert c.post("/v1/mcp/authorize", {"name": "nope"}).json() == {"error": "server not found"}
    r = c.post("/v1/mcp/authorize", {"name": "plain"})
    assert (r.status_code, r.json()) == (400, {"error": "server plain does not use OAuth authorization"})
    r = c.post("/v1/mcp/authorize", {"name": "machine"})
    assert (r.status_code, r.json()) == (400, {"error": "server machine does not use OAuth authorization"})
    assert c.post("/v1/mcp/authorize", {}).status_code == 400
    with c.client_for("agent") as agent:
        r = agent.post("/v1/mcp/authorize", json={"name": "lab"})
        assert (r.status_code, r.json()) == (403, {"error": "this token may not change servers"})
    wait_state(c, "needs_authorization")
    r = c.post("/v1/mcp/authorize", {"name": "lab"})
    assert r.status_code == 200
    query = parse_qs(urlsplit(r.json()["url"]).query)
    assert query["redirect_uri"] == [f"{c.url}/oauth/callback"] and query["code_challenge_method"] == ["S256"]
    # The masked secret round-trips (SPEC 16.3, 12.3).
    listing = c.get("/v1/mcp").json()["servers"]["machine"]
    assert listing["oauth"]["client_secret"] == "********"
    assert c.post("/v1/mcp", {"name": "machine", "server": listing}).status_code == 200
    assert '"client_secret": "machine-secret-4711"' in (c.home / "mcp.json").read_text()


@pytest.mark.live
def test_it_connects_a_machine_account_and_says_when_the_authorization_server_refuses_it(console, lab):
    c = start_console(
        console,
        {
            "machine": {
                "url": lab.mcp_url,
                "oauth": {
                    "grant": "client_credentials",
                    "client_id": MACHINE[0],
                    "client_secret": "$LAB_SECRET",
                },
            },
            "wrong": {
                "url": lab.mcp_url,
                "oauth": {
                    "grant": "client_credentials",
                    "client_id": MACHINE[0],
                    "client_secret": "not-it-at-all",
                },
            },
        },
        LAB_SECRET=MACHINE[1],
    )
    st = c.wait_connected("machine")["machine"]
    assert st["oauth"]["grant"] == "client_credentials" and st["oauth"]["authorized"] is True
    assert st["oauth"]["authorized_by"] is None
    assert c.call("mcp__machine__whoami", {}, mode="auto").json()["status"] == "done"
    assert lab.stats()["client_credentials"] >= 1
    st = wait_state(c, "error", "wrong")
    assert st["Error"] == "authorization server refused the client: invalid_client"
    assert "not-it-at-all" not in c.log_text() and MACHINE[1] not in c.log_text()
    assert c.get("/v1/mcp").json()["servers"]["machine"]["oauth"]["client_secret"] == "********"


@pytest.mark.live
def test_it_forgets_an_authorization_and_answers_503_for_the_tools_until_authorized_again(console, lab):
    c = start_console(console, {"lab": {"url": lab.mcp_url, "oauth": {"scopes": ["lab.read"]}}})
    wait_state(c, "needs_authorization")
    web = signed_in(c)
    try:
        authorize(c, web)
        st = c.wait_connected("lab")["lab"]
        assert st["oauth"]["scopes"] == ["lab.read"]  # the configured scopes, not the server's
        assert lab.authorize_requests()[-1]["scope"] == "lab.read"
        # The buttons post with htmx (the CSRF token in the body's headers: a row or panel the
        # live socket re-rendered has none in its form) and are sent on with HX-Redirect.
        web.get("/servers/lab/")
        htmx = {
            "HX-Request": "true",
            "X-CSRFToken": web.cookies["csrftoken"],
            "Referer": c.url + "/servers/lab/",
        }
        r = web.post("/servers/lab/forget-authorization/", headers=htmx)
        assert (r.status_code, r.headers["HX-Redirect"]) == (204, "/servers/lab/")
        wait_state(c, "needs_authorization")
        assert tokens_row(c)[0] == ""
        r = c.call(WHOAMI, {}, mode="auto")
        assert (r.status_code, r.json()["error"]) == (
            503,
            f"server lab needs authorization: {c.url}/servers/lab/",
        )
        r = web.post("/servers/lab/authorize/", headers=htmx)
        assert r.status_code == 204 and r.headers["HX-Redirect"].startswith(f"{lab.url}/authorize?")
    finally:
        web.close()


@pytest.mark.live
def test_it_says_what_went_wrong_when_the_authorization_server_is_down_or_answers_garbage(console, lab):
    c = waiting_console(console, lab)
    web = signed_in(c)
    try:
        lab.token_garbage("html")
        r = authorize(c, web)
        assert r.status_code == 302
        page_saying(
            web, "authorization failed: the authorization server answered with something that is not a token"
        )
        assert state_of(c)["state"] == "needs_authorization" and tokens_row(c)[0] == ""
        lab.token_garbage("off")
        lab.stop()
        r = c.post("/v1/mcp/authorize", {"name": "lab"})
        assert r.status_code == 502
        assert r.json()["error"].startswith("authorization failed: the authorization server can't be reached")
        assert state_of(c)["state"] == "needs_authorization"
    finally:
        web.close()


def calls_keep_working(c, lab, refreshes: int, timeout: float = 40) -> None:
    """Call the tool again and again (each must succeed) until the lab counts `refreshes`."""

    def renewed() -> bool:
        answer = c.call(WHOAMI, {}, mode="auto").json()
        assert answer["status"] == "done", answer
        return lab.stats()["refreshes"] >= refreshes

    wait_until(renewed, timeout, 0.3, what=f"{refreshes} renewals")


@pytest.mark.live
def test_it_renews_short_lived_tokens_before_they_expire_and_after_a_restart(console, tmp_path):
    lab = Lab(tmp_path / "lab5", access_ttl=5).start()
    try:
        c = authorized_console(console, lab)
        calls_keep_working(c, lab, 3)
        assert lab.stats()["mcp_expired_token"] == 0
        exchanges = lab.stats()["code_exchanges"]
        c.stop()
        # Down long enough for the stored access token to expire: after the restart it is
        # renewed, never sent.
        wait_until(lambda: expired(c), 30, 0.2, what="the stored token expired")
        console.start(c)
        c.wait_connected("lab")
        before = lab.stats()["refreshes"]
        calls_keep_working(c, lab, before + 2)
        stats = lab.stats()
        assert stats["code_exchanges"] == exchanges  # no new authorization
        assert stats["mcp_expired_token"] == 0 and stats["refresh_reused"] == 0
    finally:
        lab.close()


def expired(c) -> bool:
    rows = db_rows(c, "select expires_at from mcpcore_oauthaccount where server_name = 'lab'")
    when = datetime.datetime.fromisoformat(rows[0][0]).replace(tzinfo=datetime.UTC)
    return when < datetime.datetime.now(datetime.UTC)


@pytest.mark.live
def test_it_goes_back_to_needs_authorization_and_tells_people_when_a_renewal_is_refused(console, tmp_path):
    lab = Lab(tmp_path / "lab5", access_ttl=5).start()
    try:
        c = authorized_console(console, lab)
        add_target = (
            "from mcpcore.calls import notify; notify.add_target('webhook', 'http://127.0.0.1:9/hook')"
        )
        c.manage("shell", "-c", add_target)
        lab.fail_refresh(-1)
        st = wait_state(c, "needs_authorization", timeout=30)
        assert st["Error"] == "needs authorization" and st["oauth"]["authorized"] is False
        assert lab.stats()["refusals"].get("invalid_grant", 0) >= 1
        assert tokens_row(c)[0] == ""
        rows = db_rows(c, "select body from mcpcore_delivery where event_type = 'server.needs_authorization'")
        assert len(rows) == 1
        body = json.loads(rows[0][0])
        assert body["type"] == "server.needs_authorization"
        assert body["data"] == {"server": "lab", "url": f"{c.url}/servers/lab/"}
        for secret in lab.issued_secrets():
            assert secret not in rows[0][0]
    finally:
        lab.close()


# --- in-process: the rows, the provider's expiry, the pure helpers ---------------------------

TOKENS = {
    "access_token": "at-4f1c9e2b7a65d3f0",
    "refresh_token": "rt-9b8a7c6d5e4f3a21",
    "token_type": "Bearer",
    "expires_in": 60,
    "scope": "lab.read lab.write",
}
URL = "http://127.0.0.1:9/mcp"


@pytest.mark.django_db
def test_it_keeps_tokens_encrypted_and_gives_them_back_only_for_the_same_address(settings):
    oauth_upstream.store_client("s", URL, {"client_id": "c-1", "client_secret": "cs-5e6f7a8b9c0d"})
    oauth_upstream.store_tokens("s", URL, TOKENS, authorized_by="op")
    raw = OAuthAccount.objects.values_list("tokens", "client_info").get(server_name="s")
    for secret in ("at-4f1c9e2b7a65d3f0", "rt-9b8a7c6d5e4f3a21", "cs-5e6f7a8b9c0d"):
        assert all(secret not in column for column in raw)
    tokens, client, expires_at = oauth_upstream.load("s", URL)
    assert tokens == TOKENS and client == {"client_id": "c-1", "client_secret": "cs-5e6f7a8b9c0d"}
    assert abs((expires_at - timezone.now()).total_seconds() - 60) < 5
    account = OAuthAccount.objects.get(server_name="s")
    assert (account.authorized_by, account.scopes) == ("op", ["lab.read", "lab.write"])
    assert oauth_upstream.load("s", "http://elsewhere/mcp") == (None, None, None)
    # A renewal keeps who authorized; the rotated refresh token is in the same write.
    oauth_upstream.store_tokens("s", URL, {**TOKENS, "access_token": "at-2", "refresh_token": "rt-2"})
    account.refresh_from_db()
    assert (account.authorized_by, account.renewals) == ("op", 1)
    assert oauth_upstream.load("s", URL)[0]["refresh_token"] == "rt-2"
    # Rows sealed under another secret key are as good as gone.
    settings.SECRET_KEY = "another-secret-key"
    assert oauth_upstream.load("s", URL)[0] is None
    settings.SECRET_KEY = "test-secret-key-not-for-production"
    assert oauth_upstream.forget("s") is True and oauth_upstream.load("s", URL)[0] is None
    assert oauth_upstream.load("s", URL)[1] is not None  # the registration stays


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_loads_the_stored_expiry_so_an_expired_token_is_renewed_not_sent(settings):
    from asgiref.sync import sync_to_async

    await sync_to_async(oauth_upstream.store_client)("s", URL, {"client_id": "c-1", "redirect_uris": [URL]})
    await sync_to_async(oauth_upstream.store_tokens)("s", URL, TOKENS, "op")
    config = {"url": URL, "oauth": {}}
    provider = upstream.auth_code_provider("s", config)
    await provider._initialize()
    assert provider.context.is_token_valid()
    assert abs(provider.context.token_expiry_time - (time.time() + 60)) < 5
    past = timezone.now() - datetime.timedelta(seconds=1)
    await OAuthAccount.objects.filter(server_name="s").aupdate(expires_at=past)
    provider = upstream.auth_code_provider("s", config)
    await provider._initialize()
    assert not provider.context.is_token_valid() and provider.context.can_refresh_token()


def test_it_adds_authorize_params_without_overriding_the_protocols():
    url = "https://as/authorize?response_type=code&state=s1&client_id=c"
    got = parse_qs(urlsplit(upstream.with_params(url, {"state": "evil", "prompt": "consent"})).query)
    assert got["state"] == ["s1"] and got["prompt"] == ["consent"] and got["client_id"] == ["c"]


def test_it_renews_at_80_percent_of_the_lifetime():
    now = datetime.datetime.now(datetime.UTC)
    due = upstream.renew_in(now, now + datetime.timedelta(seconds=100))
    assert 79 <= due <= 80
    assert upstream.renew_in(now, None) is None


def test_it_tells_ntfy_that_a_server_needs_authorization():
    body = json.loads(
        notify.payload(notify.NEEDS_AUTHORIZATION, timezone.now(), {"server": "lab", "url": "u"})
    )
    text, headers = notify.ntfy_request(body)
    assert text == "lab needs authorization" and headers["Click"] == "u"


def test_it_masks_the_client_secret_and_keeps_it_when_the_mask_comes_back():
    stored = {
        "url": URL,
        "oauth": {"grant": "client_credentials", "client_id": "m", "client_secret": "s3cr3t!"},
    }
    masked = mask_config(stored)
    assert masked["oauth"]["client_secret"] == "********" and stored["oauth"]["client_secret"] == "s3cr3t!"
    assert unmask_config(masked, stored)["oauth"]["client_secret"] == "s3cr3t!"
    moved = {**masked, "url": "http://elsewhere/mcp"}
    with pytest.raises(ValueError, match="secret values must be entered again"):
        unmask_config(moved, stored)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"url": URL, "oauth": []}, "server.oauth must be an object"),
        (
            {"url": URL, "oauth": {"grant": "password"}},
            "server.oauth.grant must be authorization_code or client_credentials",
        ),
        ({"url": URL, "oauth": {"scopes": "a b"}}, "server.oauth.scopes must be a list of strings"),
        ({"url": URL, "oauth": {"client_secret": 7}}, "server.oauth.client_secret must be a string"),
        (
            {"url": URL, "oauth": {"authorize_params": {"a": 1}}},
            "server.oauth.authorize_params must be an object of strings",
        ),
        (
            {"url": URL, "oauth": {"grant": "client_credentials"}},
            "server.oauth with client_credentials needs client_id and client_secret",
        ),
        ({"command": "x", "oauth": {}}, "server.oauth applies to streamable-http and sse servers only"),
    ],
)
def test_it_checks_the_oauth_key(config, message):
    with pytest.raises(schemas.InputError) as caught:
        schemas.server_config(config)
    assert caught.value.message == message


@pytest.mark.live
def test_it_does_not_retry_a_server_that_needs_authorization(console, lab):
    c = start_console(console, {"lab": {"url": lab.mcp_url}})
    wait_state(c, "needs_authorization")
    asked = lab.stats()["mcp_unauthorized"]
    # A failed server is retried after 2.5-7.5 s; one that needs a person is not, for as long
    # as we look (12 s, measured by the lab's count of refused requests).
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        assert state_of(c)["state"] == "needs_authorization"
        assert lab.stats()["mcp_unauthorized"] == asked
        time.sleep(0.5)


@pytest.mark.django_db
def test_it_forgets_a_removed_servers_tokens(agenvoy_home):
    from mcpcore import files

    (agenvoy_home / "mcp.json").write_text(json.dumps({"servers": {"s": {"url": URL, "oauth": {}}}}))
    files.sync_servers()
    oauth_upstream.store_tokens("s", URL, TOKENS, authorized_by="op")
    oauth_upstream.new_flow("s", "op")
    (agenvoy_home / "mcp.json").write_text(json.dumps({"servers": {}}))
    files.sync_servers()
    assert oauth_upstream.load("s", URL) == (None, None, None)
    assert not OAuthFlow.objects.filter(server_name="s").exists()
