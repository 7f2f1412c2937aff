"""SPEC 21 against a real `manage.py serve`: the console as its own OAuth authorization server,
signed in to by the MCP SDK's own client side (`OAuthClientProvider`, dynamic registration)."""

import anyio
import httpx2
import pytest

from tests.live import db_rows, our_server, signed_in
from tests.mcpclients import in_thread, wait_pending
from tests.oauthapps import MemoryStorage, app_client, consent_over_http, provider_for

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"echo": our_server("echo.py")}, start=False)
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
