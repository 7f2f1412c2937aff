"""SPEC 21 against a real `manage.py serve`: the console as its own OAuth authorization server,
signed in to by the MCP SDK's own client side (`OAuthClientProvider`, dynamic registration)."""

import concurrent.futures
import itertools
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest

from tests.live import db_rows, our_server, signed_in
from tests.mcpclients import in_thread, mcp_client, pending_for, wait_pending
from tests.oauthapps import MemoryStorage, app_client, consent_over_http, pkce, provider_for

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def c(module_console):
    # Behind a "proxy" (the tests' own address), so that each registration can come from an
    # address of its own: the module registers more clients than one address may in an hour.
    console = module_console(
        {"echo": our_server("echo.py")}, start=False, AGENVOY_TRUSTED_PROXIES="127.0.0.1/32"
    )
    console.env["AGENVOY_PUBLIC_URL"] = console.url
    module_console.start(console)
    console.wait_connected("echo")
    return console


@pytest.fixture(scope="module")
def web(c):
    session = signed_in(c, "alice", "alice-pw-123")
    yield session
    session.close()


def test_it_serves_the_authorization_server_metadata_exactly(c):
    r = httpx2.get(c.url + "/.well-known/oauth-authorization-server")
    assert r.status_code == 200
    assert r.json() == {
        "issuer": c.url,
        "authorization_endpoint": f"{c.url}/authorize",
        "token_endpoint": f"{c.url}/token",
        "registration_endpoint": f"{c.url}/register",
        "revocation_endpoint": f"{c.url}/revoke",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "scopes_supported": ["mcp"],
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
    }


@pytest.mark.parametrize("path", ["", "/mcp", "/mcp/echo", "/mcp/_permission"])
def test_it_serves_protected_resource_metadata_for_every_endpoint(c, path):
    r = httpx2.get(c.url + "/.well-known/oauth-protected-resource" + path)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "resource": c.url + (path or "/mcp"),
        "authorization_servers": [c.url],
        "scopes_supported": ["mcp"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Agenvoy console",
    }


@pytest.mark.parametrize("path", ["/mcp/nope", "/mcp/v/nope", "/mcp/echo/more", "/other"])
def test_it_answers_unknown_resources_metadata_with_a_json_404(c, path):
    r = httpx2.get(c.url + "/.well-known/oauth-protected-resource" + path)
    assert r.status_code == 404
    assert r.json() == {"error": "not found"}


def test_it_names_the_metadata_in_the_401(c):
    r = httpx2.post(c.url + "/mcp/echo", json={})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == (
        f'Bearer realm="agenvoy", resource_metadata="{c.url}/.well-known/oauth-protected-resource/mcp/echo", '
        'scope="mcp"'
    )


def test_it_lets_the_sdk_client_sign_in_list_and_call_through_the_inbox(c, web):
    storage = MemoryStorage()
    provider = provider_for(c.url + "/mcp", storage, consent_over_http(web), name="Pocket agent")

    async def main():
        async with app_client(c.url + "/mcp", provider) as client:
            tools = await client.list_tools()
            assert "echo__echo" in {t.name for t in tools.tools}
            box: dict = {}
            async with anyio.create_task_group() as tg:

                async def call():
                    box["result"] = await client.call_tool("echo__echo", {"text": "from the app"})

                tg.start_soon(call)
                item = await wait_pending(c, "mcp__echo__echo", 15)
                by = db_rows(
                    c,
                    "select requested_by from mcpcore_toolcall where id = ?",
                    item["call_id"].replace("-", ""),
                )
                assert by == [("Pocket agent (app of alice)",)]
                r = await in_thread(lambda: c.reply(item["session_id"], item["id"], {"approve": True}))
                assert r.status_code == 200, r.text
            assert box["result"].content[0].text == "from the app"

    anyio.run(main)
    assert storage.tokens is not None and storage.tokens.access_token.startswith("agvat_")
    grants = c.get("/v1/grants").json()["grants"]
    assert [g["name"] for g in grants] == ["Pocket agent (app of alice)"]


# --- by hand: every bad input of 21.2-21.4 and its exact answer --------------------------------

REDIRECT = "http://127.0.0.1:9/callback"


_addresses = itertools.count(1)


def register(c, **fields) -> httpx2.Response:
    body = {"redirect_uris": [REDIRECT], "client_name": "Hand app", "token_endpoint_auth_method": "none"}
    n = next(_addresses)
    address = {
        "X-Forwarded-For": f"198.18.{n // 250}.{n % 250 + 1}"
    }  # heeded where the test's own is trusted
    return httpx2.post(c.url + "/register", json={**body, **fields}, headers=address)


def count(c, table: str) -> int:
    return db_rows(c, f"select count(*) from mcpcore_{table}")[0][0]


def authorize_params(client_id: str, challenge: str, **more) -> dict:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st-1",
    }
    return {**params, **more}


def allowed_code(c, web, client_id: str, challenge: str, decision: str = "allow", **more) -> dict:
    """Authorize `client_id` as the signed-in person; the redirect back's query."""
    r = web.get("/authorize", params=authorize_params(client_id, challenge, **more), follow_redirects=False)
    assert r.status_code == 302, r.text
    location = consent_over_http(web, decision)(str(r.url))
    assert location.startswith(REDIRECT + "?"), location
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def exchange(c, client_id: str, code: str, verifier: str) -> httpx2.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
    }
    return httpx2.post(c.url + "/token", data=form)


def refresh(c, client_id: str, token: str) -> httpx2.Response:
    return httpx2.post(
        c.url + "/token", data={"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id}
    )


def mcp_status(c, token: str, path: str = "/mcp") -> int:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    return httpx2.post(c.url + path, json=init, headers=headers).status_code


@pytest.mark.parametrize(
    "uri",
    [
        "http://example.com/callback",  # http off loopback
        "ftp://127.0.0.1/callback",
        "myapp://callback",  # a private-use scheme needs a dot
        "https://app.example/callback#frag",
        "not a url",
    ],
)
def test_it_refuses_a_bad_redirect_uri_at_registration_storing_nothing(c, uri):
    before = count(c, "appclient")
    r = register(c, redirect_uris=[uri])
    assert r.status_code == 400, r.text
    assert r.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata")
    if "://" in uri and " " not in uri:
        assert r.json()["error"] == "invalid_redirect_uri"
    assert count(c, "appclient") == before


def test_it_returns_the_same_client_for_an_identical_unallowed_registration(c):
    first = register(c, client_name="Twice", redirect_uris=["cursor://anysphere.cursor-mcp/oauth/callback"])
    again = register(c, client_name="Twice", redirect_uris=["cursor://anysphere.cursor-mcp/oauth/callback"])
    assert first.status_code == again.status_code == 201, first.text
    assert first.json()["client_id"] == again.json()["client_id"]
    other = register(c, client_name="Twice", redirect_uris=["https://app.example/cb"])
    assert other.json()["client_id"] != first.json()["client_id"]


def test_it_never_hands_out_a_secret_twice(c):
    fields = {"client_name": "Confidential twin", "token_endpoint_auth_method": "client_secret_post"}
    first, again = register(c, **fields), register(c, **fields)
    assert first.status_code == again.status_code == 201, first.text
    assert first.json()["client_id"] != again.json()["client_id"]
    assert first.json()["client_secret"] != again.json()["client_secret"]
    public = register(c, client_name="Public twin"), register(c, client_name="Public twin")
    assert public[0].json()["client_id"] == public[1].json()["client_id"]
    assert "client_secret" not in public[1].json()


def test_it_counts_registrations_sent_at_once_against_the_hours_limit(c, pool):
    def one(i: int) -> int:
        body = {
            "redirect_uris": [REDIRECT],
            "client_name": f"Flood {i}",
            "token_endpoint_auth_method": "none",
        }
        headers = {"X-Forwarded-For": "192.0.2.77"}
        return httpx2.post(c.url + "/register", json=body, headers=headers, timeout=30).status_code

    with concurrent.futures.ThreadPoolExecutor(40) as flood:
        statuses = list(flood.map(one, range(40)))
    assert sorted(statuses) == [201] * 20 + [429] * 20
    rows = db_rows(c, "select count(*) from mcpcore_appclient where address = ?", "192.0.2.77")
    assert rows == [(20,)]


def test_it_keeps_a_client_a_person_is_about_to_allow_when_strangers_register_100_more(c, web):
    _, challenge = pkce()
    client_id = register(c, client_name="About to be allowed").json()["client_id"]
    r = web.get("/authorize", params=authorize_params(client_id, challenge), follow_redirects=False)
    assert r.status_code == 302, r.text
    page_url = r.headers["location"]
    assert "About to be allowed" in web.get(page_url).text  # the person has the page open
    for i in range(100):
        assert register(c, client_name=f"Stranger {i}").status_code == 201
    page = web.get(page_url)
    assert page.status_code == 200 and "About to be allowed" in page.text, page.text


def test_it_answers_an_unknown_client_or_unregistered_redirect_with_a_page(c, web):
    _, challenge = pkce()
    client_id = register(c).json()["client_id"]
    before = count(c, "appgrant"), count(c, "appcode")
    r = web.get("/authorize", params=authorize_params("no-such-client", challenge), follow_redirects=False)
    assert r.status_code == 400
    assert "text/html" in r.headers["content-type"]
    assert "authorization failed: unknown client no-such-client" in r.text
    assert r.headers["x-frame-options"] == "DENY"
    r = web.get(
        "/authorize",
        params=authorize_params(client_id, challenge, redirect_uri="http://127.0.0.1:9/elsewhere"),
        follow_redirects=False,
    )
    assert r.status_code == 400
    assert "authorization failed: redirect_uri http://127.0.0.1:9/elsewhere is not registered" in r.text
    assert (count(c, "appgrant"), count(c, "appcode")) == before


def test_it_matches_loopback_redirects_on_any_port(c, web):
    verifier, challenge = pkce()
    client_id = register(c).json()["client_id"]
    other_port = "http://127.0.0.1:51234/callback"
    r = web.get(
        "/authorize",
        params=authorize_params(client_id, challenge, redirect_uri=other_port),
        follow_redirects=False,
    )
    assert r.status_code == 302 and r.headers["location"].startswith(c.url + "/apps/allow/")


@pytest.mark.parametrize(
    "more, error",
    [
        ({"scope": "mcp admin"}, "invalid_scope"),
        ({"resource": "https://elsewhere.example/mcp"}, "invalid_target"),
        ({"resource": "RESOURCE/mcp/nope"}, "invalid_target"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
    ],
)
def test_it_redirects_other_authorization_errors_with_state_and_iss(c, web, more, error):
    _, challenge = pkce()
    client_id = register(c, client_name=f"Allowed {error}").json()["client_id"]
    allowed_code(c, web, client_id, challenge)  # a client a person allowed: RFC 6749's redirects
    more = {k: v.replace("RESOURCE", c.url) for k, v in more.items()}
    before = count(c, "appgrant"), count(c, "appcode")
    r = web.get("/authorize", params=authorize_params(client_id, challenge, **more), follow_redirects=False)
    assert r.status_code == 302, r.text
    location = r.headers["location"]
    assert location.startswith(REDIRECT + "?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert query["error"] == error and query["state"] == "st-1" and query["iss"] == c.url
    assert (count(c, "appgrant"), count(c, "appcode")) == before


@pytest.mark.parametrize(
    "more, why",
    [
        ({"scope": "mcp admin"}, "invalid_scope: unknown scope admin"),
        ({"resource": "https://elsewhere.example/mcp"}, "invalid_target: resource must be one of"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
    ],
)
def test_it_answers_errors_for_a_client_nobody_allowed_with_a_page_not_a_redirect(c, more, why):
    # Anyone may register a client with their own redirect URI: an error redirect for it would
    # make the console's address a link to anywhere.
    _, challenge = pkce()
    client_id = register(c, redirect_uris=["https://phish.example/cb"]).json()["client_id"]
    params = authorize_params(client_id, challenge, redirect_uri="https://phish.example/cb", **more)
    r = httpx2.get(c.url + "/authorize", params=params, follow_redirects=False)
    assert r.status_code == 400, r.headers
    assert "location" not in r.headers
    assert f"authorization failed: {why}" in r.text


def test_it_turns_registration_off(module_console):
    closed = module_console(None, start=False, AGENVOY_OAUTH_REGISTRATION="0")
    closed.env["AGENVOY_PUBLIC_URL"] = closed.url
    module_console.start(closed)
    metadata = httpx2.get(closed.url + "/.well-known/oauth-authorization-server").json()
    assert "registration_endpoint" not in metadata
    assert metadata["client_id_metadata_document_supported"] is True
    r = register(closed)
    assert r.status_code == 404 and r.json() == {"error": "not found"}
    assert count(closed, "appclient") == 0


def test_it_sends_access_denied_when_the_person_denies(c, web):
    _, challenge = pkce()
    client_id = register(c).json()["client_id"]
    before = count(c, "appgrant"), count(c, "appcode")
    query = allowed_code(c, web, client_id, challenge, decision="deny")
    assert query == {"error": "access_denied", "state": "st-1", "iss": c.url}
    assert (count(c, "appgrant"), count(c, "appcode")) == before


def test_it_accepts_a_resource_with_a_trailing_slash_and_limits_the_token_to_it(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Echo only").json()["client_id"]
    query = allowed_code(c, web, client_id, challenge, resource=c.url + "/mcp/echo/")
    assert query["iss"] == c.url and query["state"] == "st-1"
    r = exchange(c, client_id, query["code"], verifier)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    assert r.json()["expires_in"] == 3600 and r.json()["token_type"] == "Bearer"
    wrong = httpx2.post(
        c.url + "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": r.json()["refresh_token"],
            "client_id": client_id,
            "resource": c.url + "/mcp",
        },
    )
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_target"
    access = r.json()["access_token"]
    assert mcp_status(c, access, "/mcp/echo") == 200
    assert mcp_status(c, access, "/mcp") == 401
    r = httpx2.get(c.url + "/v1/mcp/tools", headers={"Authorization": f"Bearer {access}"})
    assert r.status_code == 403
    assert r.json() == {"error": "this token may only be used on MCP endpoints"}


def test_it_refuses_a_code_used_twice_and_revokes_what_it_gave(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Code twice").json()["client_id"]
    code = allowed_code(c, web, client_id, challenge)["code"]
    first = exchange(c, client_id, code, verifier)
    assert first.status_code == 200, first.text
    access = first.json()["access_token"]
    assert mcp_status(c, access) == 200
    second = exchange(c, client_id, code, verifier)
    assert second.status_code == 400 and second.json()["error"] == "invalid_grant"
    assert mcp_status(c, access) == 401
    assert refresh(c, client_id, first.json()["refresh_token"]).json()["error"] == "invalid_grant"


def test_it_refuses_a_wrong_verifier(c, web):
    verifier, challenge = pkce()
    client_id = register(c).json()["client_id"]
    code = allowed_code(c, web, client_id, challenge)["code"]
    r = exchange(c, client_id, code, verifier + "x")
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"


def test_it_rotates_refresh_tokens_and_revokes_the_grant_on_reuse(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Rotator").json()["client_id"]
    code = allowed_code(c, web, client_id, challenge)["code"]
    tokens = exchange(c, client_id, code, verifier).json()
    second = refresh(c, client_id, tokens["refresh_token"])
    assert second.status_code == 200, second.text
    assert second.headers["cache-control"] == "no-store"
    second = second.json()
    assert second["refresh_token"] != tokens["refresh_token"]
    # Within 30 s the replaced one works once more (an answer that was lost) ...
    grace = refresh(c, client_id, tokens["refresh_token"])
    assert grace.status_code == 200, grace.text
    assert mcp_status(c, grace.json()["access_token"]) == 200
    # ... and not twice: that is a stolen token, and the whole grant goes.
    again = refresh(c, client_id, tokens["refresh_token"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    for access in (second["access_token"], grace.json()["access_token"]):
        assert mcp_status(c, access) == 401
    assert refresh(c, client_id, second["refresh_token"]).json()["error"] == "invalid_grant"
    rows = db_rows(
        c, "select actor, action from mcpcore_auditentry where object = ?", "Rotator (app of alice)"
    )
    assert ("app Rotator", "grant.revoke") in rows and ("app Rotator", "token.revoke") in rows


def test_it_refuses_an_expired_access_token_with_the_401_of_21_1(c, web):
    import sqlite3

    verifier, challenge = pkce()
    client_id = register(c, client_name="Short").json()["client_id"]
    code = allowed_code(c, web, client_id, challenge)["code"]
    access = exchange(c, client_id, code, verifier).json()["access_token"]
    assert mcp_status(c, access) == 200
    # The clock moves past its expiry (its row says so; the generation tells every process).
    conn = sqlite3.connect(c.data / "db.sqlite3", timeout=20)
    with conn:
        conn.execute(
            "update mcpcore_apptoken set expires_at = '2000-01-01 00:00:00' where kind = 'access' and grant_id = "
            "(select id from mcpcore_appgrant where token_id = (select id from mcpcore_apitoken where name = ?))",
            ("Short (app of alice)",),
        )
        conn.execute("update mcpcore_cachegeneration set n = n + 1 where id = 1")
    conn.close()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    r = httpx2.post(c.url + "/mcp", json=init, headers={"Authorization": f"Bearer {access}"})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == (
        f'Bearer realm="agenvoy", resource_metadata="{c.url}/.well-known/oauth-protected-resource/mcp", '
        'scope="mcp", error="invalid_token"'
    )


def test_it_revokes_a_token_on_post_revoke_and_answers_200_always(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Revoker").json()["client_id"]
    code = allowed_code(c, web, client_id, challenge)["code"]
    tokens = exchange(c, client_id, code, verifier).json()
    for form in ({"token": "nonsense", "client_id": client_id}, {"token": "x", "client_id": "nobody"}, {}):
        assert httpx2.post(c.url + "/revoke", data=form).status_code == 200
    assert mcp_status(c, tokens["access_token"]) == 200
    r = httpx2.post(c.url + "/revoke", data={"token": tokens["access_token"], "client_id": client_id})
    assert r.status_code == 200
    assert mcp_status(c, tokens["access_token"]) == 401


def test_it_ends_every_token_of_the_grant_when_its_refresh_token_is_revoked(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Refresh revoker").json()["client_id"]
    code = allowed_code(c, web, client_id, challenge)["code"]
    tokens = exchange(c, client_id, code, verifier).json()
    other = register(c, client_name="Someone else").json()["client_id"]
    r = httpx2.post(c.url + "/revoke", data={"token": tokens["refresh_token"], "client_id": other})
    assert r.status_code == 200
    assert mcp_status(c, tokens["access_token"]) == 200  # not another client's to revoke
    r = httpx2.post(c.url + "/revoke", data={"token": tokens["refresh_token"], "client_id": client_id})
    assert r.status_code == 200
    r = refresh(c, client_id, tokens["refresh_token"])
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
    assert mcp_status(c, tokens["access_token"]) == 401


def test_it_replaces_the_earlier_grant_when_the_same_person_allows_again(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Again").json()["client_id"]
    first = exchange(c, client_id, allowed_code(c, web, client_id, challenge)["code"], verifier).json()
    second = exchange(c, client_id, allowed_code(c, web, client_id, challenge)["code"], verifier).json()
    assert mcp_status(c, first["access_token"]) == 401
    assert mcp_status(c, second["access_token"]) == 200
    names = [g["name"] for g in c.get("/v1/grants").json()["grants"]]
    assert names.count("Again (app of alice)") == 1


def test_it_ends_the_earlier_grants_pending_calls_when_the_same_person_allows_again(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Pending again").json()["client_id"]
    first = exchange(c, client_id, allowed_code(c, web, client_id, challenge)["code"], verifier).json()
    box: dict = {}

    async def main():
        ended = anyio.Event()
        async with mcp_client(c, token=first["access_token"]) as client:
            async with anyio.create_task_group() as tg:

                async def call():
                    box["result"] = await client.call_tool("echo__echo", {"text": "on the earlier grant"})
                    ended.set()

                tg.start_soon(call)
                box["item"] = await wait_pending(c, "mcp__echo__echo", 15)
                await in_thread(allowed_code, c, web, client_id, challenge)  # the same person, again
                with anyio.fail_after(15):
                    await ended.wait()

    anyio.run(main)
    assert box["result"].is_error and "token revoked" in box["result"].content[0].text
    assert box["item"]["id"] not in [p["id"] for p in pending_for(c, "mcp__echo__echo")]
    r = c.reply(box["item"]["session_id"], box["item"]["id"], {"approve": True})
    assert r.status_code != 200


def test_it_lists_and_revokes_grants_for_admins_with_audit_rows(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Listed").json()["client_id"]
    tokens = exchange(c, client_id, allowed_code(c, web, client_id, challenge)["code"], verifier).json()
    grant = next(g for g in c.get("/v1/grants").json()["grants"] if g["client_name"] == "Listed")
    assert grant["client_id"] == client_id and grant["allowed_by"] == "alice" and grant["role"] == "agent"
    agent = c.client_for("agent")
    try:
        r = agent.get("/v1/grants")
        assert r.status_code == 403 and r.json() == {"error": "this token may not manage apps"}
        r = agent.post(f"/v1/grants/{grant['id']}/revoke")
        assert r.status_code == 403 and r.json() == {"error": "this token may not manage apps"}
    finally:
        agent.close()
    page = web.get("/tokens/")
    assert "Connected apps" in page.text and client_id in page.text and "Listed" in page.text
    assert c.post(f"/v1/grants/{grant['id']}/revoke").status_code == 200
    assert mcp_status(c, tokens["access_token"]) == 401
    assert c.post(f"/v1/grants/{grant['id']}/revoke").status_code == 404
    actions = db_rows(
        c, "select actor, action from mcpcore_auditentry where object = ?", "Listed (app of alice)"
    )
    assert ("alice", "grant.allow") in actions and ("tests", "grant.revoke") in actions


def test_it_never_keeps_or_shows_a_token_in_clear(c, web):
    verifier, challenge = pkce()
    reg = register(c, client_name="Secretive", token_endpoint_auth_method="client_secret_post").json()
    client_id, secret = reg["client_id"], reg["client_secret"]
    code = allowed_code(c, web, client_id, challenge)["code"]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "client_secret": secret,
        "code_verifier": verifier,
    }
    tokens = httpx2.post(c.url + "/token", data=form).json()
    refreshed = httpx2.post(
        c.url + "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": client_id,
            "client_secret": secret,
        },
    ).json()
    assert mcp_status(c, refreshed["access_token"]) == 200
    issued = [secret, code, tokens["access_token"], tokens["refresh_token"]]
    issued += [refreshed["access_token"], refreshed["refresh_token"]]
    seen = b"".join(p.read_bytes() for p in c.data.glob("db.sqlite3*"))
    seen += c.log_text().encode()
    seen += web.get("/tokens/").content + web.get("/audit/").content
    seen += c.get("/v1/grants").content + c.get("/v1/audit").content
    for value in issued:
        assert value.encode() not in seen


def test_it_answers_the_21st_registration_of_an_hour_with_429(module_console):
    fresh = module_console(None)
    for i in range(20):
        assert register(fresh, client_name=f"reg {i}").status_code == 201
    before = count(fresh, "appclient")
    r = register(fresh, client_name="one too many")
    assert r.status_code == 429
    assert r.json() == {"error": "too_many_registrations"}
    assert count(fresh, "appclient") == before


def test_it_preselects_a_views_resource_and_limits_the_app_to_the_views_chosen(c, web):
    assert c.post("/v1/views", {"name": "echoes", "include": ["mcp__echo__echo"]}).status_code == 200
    metadata = httpx2.get(c.url + "/.well-known/oauth-protected-resource/mcp/v/echoes").json()
    assert metadata["resource"] == c.url + "/mcp/v/echoes"
    verifier, challenge = pkce()
    client_id = register(c, client_name="Viewer").json()["client_id"]
    params = authorize_params(client_id, challenge, resource=c.url + "/mcp/v/echoes")
    r = web.get("/authorize", params=params, follow_redirects=False)
    page = web.get(r.headers["location"])
    assert '<option value="echoes" selected>' in page.text
    assert f"{c.url}/mcp/v/echoes" in page.text
    location = consent_over_http(web, views=("echoes",))(str(r.url))
    code = parse_qs(urlsplit(location).query)["code"][0]
    access = exchange(c, client_id, code, verifier).json()["access_token"]
    grant = next(g for g in c.get("/v1/grants").json()["grants"] if g["client_id"] == client_id)
    assert grant["views"] == ["echoes"] and grant["resource"] == "/mcp/v/echoes"
    assert mcp_status(c, access, "/mcp/v/echoes") == 200
    assert mcp_status(c, access, "/mcp") == 401  # its resource is the view's endpoint only


def test_it_takes_http_basic_client_auth_without_client_id_in_the_form(c, web):
    import base64

    verifier, challenge = pkce()
    reg = register(c, client_name="Basic", token_endpoint_auth_method="client_secret_basic").json()
    code = allowed_code(c, web, reg["client_id"], challenge)["code"]
    basic = base64.b64encode(f"{reg['client_id']}:{reg['client_secret']}".encode()).decode()
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "code_verifier": verifier,
    }
    r = httpx2.post(c.url + "/token", data=form, headers={"Authorization": f"Basic {basic}"})
    assert r.status_code == 200, r.text
    wrong = base64.b64encode(f"{reg['client_id']}:nope".encode()).decode()
    r = httpx2.post(
        c.url + "/token",
        data={"grant_type": "refresh_token", "refresh_token": r.json()["refresh_token"]},
        headers={"Authorization": f"Basic {wrong}"},
    )
    assert r.status_code == 401 and r.json()["error"] == "invalid_client"


def test_it_refuses_a_token_request_for_another_resource(c, web):
    verifier, challenge = pkce()
    client_id = register(c, client_name="Resourceful").json()["client_id"]
    code = allowed_code(c, web, client_id, challenge, resource=c.url + "/mcp/echo")["code"]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
        "resource": c.url + "/mcp",
    }
    r = httpx2.post(c.url + "/token", data=form)
    assert r.status_code == 400 and r.json()["error"] == "invalid_target"
    # The refusal spent nothing: the right resource (as Claude Code sends it, with a trailing /)
    # still gets the tokens.
    form["resource"] = c.url + "/mcp/echo/"
    r = httpx2.post(c.url + "/token", data=form)
    assert r.status_code == 200, r.text
