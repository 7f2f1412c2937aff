"""Apps that sign in to a live console (SPEC 21), as the tests drive them: the MCP SDK's own
client side (`OAuthClientProvider`) with an in-memory `TokenStorage`, and a person who allows
the app on the `Allow an app` page, through a signed-in HTTP session (tests/mcpserver/) or
Chromium (tests/e2e/)."""

import base64
import hashlib
import secrets
from collections.abc import Callable
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

LOOPBACK_REDIRECT = "http://127.0.0.1:8976/callback"


class MemoryStorage:
    """The SDK's `TokenStorage` in memory; `issued` keeps every token it was given."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None
        self.issued: list[str] = []

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.issued += [t for t in (tokens.access_token, tokens.refresh_token) if t]

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def consent_over_http(web: httpx2.Client, decision: str = "allow", views: tuple[str, ...] = ()):
    """A person's answer on the `Allow an app` page, through a signed-in session: follows the
    authorization URL to the page, posts `decision`, and returns the redirect to the app."""

    def answer(authorization_url: str) -> str:
        r = web.get(authorization_url, follow_redirects=False)
        assert r.status_code == 302, r.text
        page_url = r.headers["location"]
        page = web.get(page_url)
        assert page.status_code == 200, page.text
        assert "Allow an app" in page.text
        request = parse_qs(urlsplit(page_url).query)["request"][0]
        data = {"request": request, "decision": decision, "csrfmiddlewaretoken": web.cookies["csrftoken"]}
        if views:
            data["views"] = list(views)  # type: ignore[assignment]
        r = web.post("/apps/allow/", data=data, headers={"Referer": page_url}, follow_redirects=False)
        assert r.status_code == 302, r.text
        return r.headers["location"]

    return answer


def provider_for(
    url: str,
    storage: MemoryStorage,
    answer: Callable[[str], str],
    *,
    name: str = "Test app",
    redirect_uri: str = LOOPBACK_REDIRECT,
    client_metadata_url: str | None = None,
    answered: list | None = None,
) -> OAuthClientProvider:
    """The SDK's `OAuthClientProvider` for the MCP endpoint at `url`; `answer` (run in a thread)
    is the person's side: it gets the authorization URL and returns the redirect back."""
    import anyio

    box: dict = {}

    async def redirect(authorization_url: str) -> None:
        box["location"] = await anyio.to_thread.run_sync(answer, authorization_url)
        if answered is not None:
            answered.append(box["location"])

    async def callback() -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(box["location"]).query)
        assert "code" in query, box["location"]
        return AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )

    metadata = OAuthClientMetadata(
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        client_name=name,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        url,
        metadata,
        storage,
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=client_metadata_url,
    )


@asynccontextmanager
async def app_client(url: str, provider: OAuthClientProvider):
    """An SDK `Client` on the MCP endpoint at `url`, signing in through `provider`."""
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge
