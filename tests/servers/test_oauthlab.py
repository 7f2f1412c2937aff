"""The OAuth lab (tests/servers/oauthlab/) on its own, driven by the SDK's client side with no console:
the authorization-code flow through the consent page, the tool seeing the client's token,
refresh-token rotation, client credentials, and the test switches the console's tests rely on."""

import json
import time
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from tests.live import wait_until
from tests.servers.oauthlab.app import fingerprint
from tests.servers.oauthlab.run import Lab

REDIRECT = "http://127.0.0.1:1/oauth/callback"  # never fetched: the test reads the redirect itself
MACHINE = ("machine", "machine-secret-123")


class Memory:
    """The SDK's `TokenStorage` protocol in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Person:
    """The browser's part: follow the authorization URL to the consent page, press a button,
    and hand the redirect back to the SDK as its callback."""

    def __init__(self, decision: str = "approve") -> None:
        self.decision = decision
        self.consent_page = ""
        self.back: dict[str, str] = {}
        self.authorize_url = ""

    async def redirect(self, url: str) -> None:
        self.authorize_url = url
        async with httpx2.AsyncClient(timeout=10) as web:
            r = await web.get(url)
            assert r.status_code == 302, r.text
            consent = r.headers["location"]
            page = await web.get(consent)
            assert page.status_code == 200
            self.consent_page = page.text
            request_id = parse_qs(urlsplit(consent).query)["request"][0]
            r = await web.post(consent.split("?")[0], data={"request": request_id, "decision": self.decision})
            assert r.status_code == 302
            location = r.headers["location"]
            assert location.startswith(REDIRECT)
            self.back = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}

    async def callback(self) -> AuthorizationCodeResult:
        if "error" in self.back:
            raise RuntimeError(f"authorization failed: {self.back['error']}")
        return AuthorizationCodeResult(
            code=self.back["code"], state=self.back.get("state"), iss=self.back.get("iss")
        )


def person_provider(lab: Lab, storage: Memory, person: Person) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=lab.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="lab test",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
        ),
        storage=storage,
        redirect_handler=person.redirect,
        callback_handler=person.callback,
    )


async def call(lab: Lab, auth: httpx2.Auth, tool: str, arguments: dict | None = None):
    """One SDK `Client` session on the lab's MCP server: its tool names and one call's answer."""
    with anyio.fail_after(30):
        async with httpx2.AsyncClient(auth=auth, timeout=20) as http:
            async with Client(streamable_http_client(lab.mcp_url, http_client=http)) as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                result = await client.call_tool(tool, arguments or {})
                return names, result


def answer(result) -> dict:
    """whoami's answer (JSON text, as a console relays it)."""
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def refresh_with(lab: Lab, client: OAuthClientInformationFull, refresh_token: str) -> httpx2.Response:
    return httpx2.post(
        lab.url + "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": client.client_id,
            "client_secret": client.client_secret,
        },
        timeout=10,
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("oauthlab"), clients=dict([MACHINE])).start()
    yield lab
    lab.close()


def test_it_refuses_the_mcp_server_without_a_token(lab):
    before = lab.stats()["mcp_unauthorized"]
    r = httpx2.post(lab.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer ")
    assert (
        f'resource_metadata="{lab.url}/.well-known/oauth-protected-resource/mcp"'
        in r.headers["www-authenticate"]
    )
    metadata = httpx2.get(f"{lab.url}/.well-known/oauth-protected-resource/mcp", timeout=10).json()
    assert metadata["resource"] == lab.mcp_url and metadata["authorization_servers"] == [lab.url]
    r = httpx2.post(lab.mcp_url, json={}, headers={"Authorization": "Bearer lab_at_made-up"}, timeout=10)
    assert r.status_code == 401
    assert lab.stats()["mcp_unauthorized"] == before + 2


@pytest.mark.asyncio
async def test_it_counts_an_expired_access_token_sent_to_the_mcp_server(lab):
    storage = Memory()
    await call(lab, person_provider(lab, storage, Person()), "echo", {"text": "x"})
    before = lab.stats()
    assert lab.expire_access()["expired"] >= 1
    bearer = {"Authorization": f"Bearer {storage.tokens.access_token}"}
    r = httpx2.post(
        lab.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=bearer, timeout=10
    )
    assert r.status_code == 401
    after = lab.stats()
    assert after["mcp_expired_token"] == before["mcp_expired_token"] + 1
    assert after["mcp_unauthorized"] == before["mcp_unauthorized"] + 1


@pytest.mark.asyncio
async def test_it_authorizes_through_the_consent_page_and_the_tool_sees_the_token(lab):
    before = await anyio.to_thread.run_sync(lab.stats)
    storage, person = Memory(), Person()
    names, result = await call(lab, person_provider(lab, storage, person), "whoami")

    assert names == ["echo", "whoami"]
    assert "Approve" in person.consent_page and "Deny" in person.consent_page
    assert person.back["state"] and person.back["iss"] == lab.url
    me = answer(result)
    assert me["client_id"] == storage.client.client_id and me["subject"] == "lab-user"
    assert me["token_fingerprint"] == fingerprint(storage.tokens.access_token)
    assert storage.tokens.refresh_token and storage.tokens.access_token.startswith("lab_at_")

    sent = (await anyio.to_thread.run_sync(lab.authorize_requests))[-1]
    assert sent["resource"] == lab.mcp_url and sent["code_challenge_method"] == "S256"
    assert sent["state"] == person.back["state"] and sent["code_challenge"]
    after = await anyio.to_thread.run_sync(lab.stats)
    for stat in ("registrations", "authorizations", "consents_approved", "code_exchanges"):
        assert after[stat] == before[stat] + 1, stat
    issued = await anyio.to_thread.run_sync(lab.tokens)
    assert (
        storage.tokens.access_token in issued["access"]
        and storage.client.client_secret in issued["client_secrets"]
    )


@pytest.mark.asyncio
async def test_it_redirects_a_denial_back_with_access_denied(lab):
    before = await anyio.to_thread.run_sync(lab.stats)
    storage, person = Memory(), Person("deny")
    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the callback's error its own way
        await call(lab, person_provider(lab, storage, person), "whoami")
    assert person.back["error"] == "access_denied" and person.back["state"]
    assert storage.tokens is None
    after = await anyio.to_thread.run_sync(lab.stats)
    assert after["refusals"].get("access_denied", 0) == before["refusals"].get("access_denied", 0) + 1
    assert after["code_exchanges"] == before["code_exchanges"]


@pytest.mark.asyncio
async def test_it_rotates_refresh_tokens_and_refuses_a_used_one(tmp_path):
    lab = Lab(tmp_path, access_ttl=2).start()
    try:
        storage = Memory()
        # One provider for both sessions: the SDK knows a token's expiry only from the answer
        # that brought it (a new provider would send the stale token and authorize again).
        auth = person_provider(lab, storage, Person())
        await call(lab, auth, "echo", {"text": "one"})
        first = storage.tokens
        # The SDK renews before a request once the access token has expired: wait for that time.
        wait_until(lambda: time.time() > lab_expiry(lab), 10, what="token expired")
        _, result = await call(lab, auth, "whoami")

        assert storage.tokens.refresh_token != first.refresh_token
        assert answer(result)["token_fingerprint"] == fingerprint(storage.tokens.access_token)
        stats = lab.stats()
        assert stats["refreshes"] == 1 and stats["authorizations"] == 1 and stats["mcp_expired_token"] == 0

        old = refresh_with(lab, storage.client, first.refresh_token)
        assert old.status_code == 400 and old.json()["error"] == "invalid_grant"
        assert lab.stats()["refresh_reused"] == 1 and lab.stats()["refusals"]["invalid_grant"] == 1
        current = refresh_with(lab, storage.client, storage.tokens.refresh_token)
        assert current.status_code == 200 and current.json()["refresh_token"] != storage.tokens.refresh_token
    finally:
        lab.close()


def lab_expiry(lab: Lab) -> float:
    """When the lab's first access token expires (from its events: issued at + ttl)."""
    issued_at = next(e["at"] for e in lab.events() if e["kind"] == "code_exchanges")
    return issued_at + lab.access_ttl + 0.5


@pytest.mark.asyncio
async def test_it_issues_client_credentials_tokens(lab):
    before = await anyio.to_thread.run_sync(lab.stats)
    storage = Memory()
    auth = ClientCredentialsOAuthProvider(
        server_url=lab.mcp_url,
        storage=storage,
        client_id=MACHINE[0],
        client_secret=MACHINE[1],
        issuer=lab.url,
    )
    names, result = await call(lab, auth, "whoami")
    assert names == ["echo", "whoami"]
    assert answer(result)["client_id"] == "machine" and answer(result)["subject"] == "machine"
    assert storage.tokens.refresh_token is None
    after = await anyio.to_thread.run_sync(lab.stats)
    assert after["client_credentials"] == before["client_credentials"] + 1
    assert after["authorizations"] == before["authorizations"]

    wrong = httpx2.post(
        lab.url + "/token",
        data={"grant_type": "client_credentials", "client_id": "machine"},
        auth=("machine", "not-the-secret"),
        timeout=10,
    )
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    refused = lab.stats()["refusals"]
    assert refused["invalid_client"] == before["refusals"].get("invalid_client", 0) + 1


@pytest.mark.asyncio
async def test_it_fails_refreshes_and_answers_garbage_when_switched(lab):
    storage = Memory()
    await call(lab, person_provider(lab, storage, Person()), "echo", {"text": "x"})
    lab.fail_refresh(1)
    failed = refresh_with(lab, storage.client, storage.tokens.refresh_token)
    assert failed.status_code == 400 and failed.json()["error"] == "invalid_grant"
    # The refused grant is gone, as at a real server that revoked it.
    again = refresh_with(lab, storage.client, storage.tokens.refresh_token)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"

    lab.token_garbage("html", count=1)
    page = refresh_with(lab, storage.client, "anything")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    lab.token_garbage("500", count=1)
    assert refresh_with(lab, storage.client, "anything").status_code == 500
    assert refresh_with(lab, storage.client, "anything").json()["error"] == "invalid_grant"  # switches spent


@pytest.mark.asyncio
async def test_it_keeps_clients_and_tokens_across_a_restart(tmp_path):
    lab = Lab(tmp_path).start()
    try:
        storage = Memory()
        await call(lab, person_provider(lab, storage, Person()), "echo", {"text": "x"})
        port = lab.port
        lab.stop()
        lab.start()
        assert lab.port == port
        _, result = await call(lab, person_provider(lab, storage, Person()), "whoami")
        assert answer(result)["token_fingerprint"] == fingerprint(storage.tokens.access_token)
        assert lab.stats()["authorizations"] == 1
        assert refresh_with(lab, storage.client, storage.tokens.refresh_token).status_code == 200
    finally:
        lab.close()
