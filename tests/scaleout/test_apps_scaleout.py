"""Issue 33 across processes (SPEC 21.4): every web process answers the authorization server; a
code made on web 1 is exchanged on web 2, and a grant revoked on web 1 is refused by web 2 on
its very next request (the app tokens' rows are in the token cache's watched tables)."""

from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from tests.live import wait_until
from tests.oauthapps import pkce
from tests.scaleout.cluster import all_connected, signed_in_browser

pytestmark = pytest.mark.scaleout

REDIRECT = "http://127.0.0.1:9/callback"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def mcp_status(base: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    return httpx2.post(base + "/mcp", json=INIT, headers=headers, timeout=30).status_code


def test_it_exchanges_on_one_process_what_another_authorized_and_revokes_everywhere_at_once(cluster):
    wait_until(lambda: all_connected(cluster), 30, 0.2)
    web1, web2 = cluster.webs
    reg = httpx2.post(
        web1 + "/register",
        json={"redirect_uris": [REDIRECT], "client_name": "Scaled app", "token_endpoint_auth_method": "none"},
    )
    assert reg.status_code == 201, reg.text
    client_id = reg.json()["client_id"]
    verifier, challenge = pkce()
    browser = signed_in_browser(cluster, 0)
    try:
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "s",
        }
        r = browser.get("/authorize", params=params, follow_redirects=False)
        assert r.status_code == 302, r.text
        page = urlsplit(r.headers["location"])  # on the public URL: this cluster names none
        request = parse_qs(page.query)["request"][0]
        assert "Allow an app" in browser.get(f"{page.path}?{page.query}").text
        r = browser.post(
            "/apps/allow/",
            data={
                "request": request,
                "decision": "allow",
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
            headers={"Referer": web1 + "/apps/allow/"},
            follow_redirects=False,
        )
        assert r.status_code == 302, r.text
        code = parse_qs(urlsplit(r.headers["location"]).query)["code"][0]
    finally:
        browser.close()
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
    }
    tokens = httpx2.post(web2 + "/token", data=form)
    assert tokens.status_code == 200, tokens.text
    refreshed = httpx2.post(
        web1 + "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens.json()["refresh_token"],
            "client_id": client_id,
        },
    )
    assert refreshed.status_code == 200, refreshed.text
    access = refreshed.json()["access_token"]
    for _ in range(5):  # warm: both processes keep the token in memory
        assert mcp_status(web1, access) == 200 and mcp_status(web2, access) == 200
    with cluster.api(0) as api:
        grant = next(g for g in api.get("/v1/grants").json()["grants"] if g["client_id"] == client_id)
        assert api.post(f"/v1/grants/{grant['id']}/revoke").status_code == 200
    assert mcp_status(web2, access) == 401  # the other process first, at once
    assert mcp_status(web1, access) == 401
