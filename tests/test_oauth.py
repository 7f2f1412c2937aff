"""Servers that need OAuth (SPEC 16), against the real authorization server and protected MCP
server of tests/oauthlab/ and a live console: detection and `needs_authorization`, the
authorization-code flow through the consent page and `/oauth/callback`, the failures of the
flow, client credentials, renewal (before expiry, after a restart, refused) and forgetting."""

import sqlite3
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from tests.live import db_rows, signed_in, wait_until
from tests.oauthlab.run import Lab

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


def consent(url: str, decision: str = "approve") -> str:
    """The person at the authorization server: its consent page, a button; returns where the
    browser is sent back to (the console's /oauth/callback)."""
    with httpx2.Client(timeout=20) as browser:
        r = browser.get(url)
        assert r.status_code == 302, r.text
        page = r.headers["location"]
        assert browser.get(page).status_code == 200
        request_id = parse_qs(urlsplit(page).query)["request"][0]
        r = browser.post(page.split("?")[0], data={"request": request_id, "decision": decision})
        assert r.status_code == 302, r.text
        return r.headers["location"]


def authorize(c, web, decision: str = "approve") -> httpx2.Response:
    """`POST /v1/mcp/authorize`, the consent, and the browser's return to the callback."""
    r = c.post("/v1/mcp/authorize", {"name": "lab"})
    assert r.status_code == 200, r.text
    back = consent(r.json()["url"], decision)
    assert back.startswith(f"{c.url}/oauth/callback?"), back
    return web.get(back.removeprefix(c.url))


@pytest.mark.live
def test_it_detects_a_server_that_asks_for_oauth_and_connects_it_after_a_person_authorizes(console, lab):
    c = start_console(console, {"lab": {"url": lab.mcp_url}})
    st = wait_state(c, "needs_authorization")
    assert st["Connected"] is False and st["Error"] == "needs authorization"
    assert st["oauth"] == {
        "grant": "authorization_code",
        "authorized": False,
        "authorized_by": None,
        "authorized_at": None,
        "scopes": None,
        "expires_at": None,
    }
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
