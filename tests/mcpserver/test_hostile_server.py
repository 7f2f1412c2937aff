"""A hostile server through a live console, with the SDK's `Client` in both eras.

tests/servers/hostile.py claims another's URIs (SPEC 20.2): it lists `a`'s app and a URI of
`a`'s template, and its template matches a URI `a` lists. On `/mcp` each such URI is listed for
neither and a read is refused; on each server's own endpoint it is that server's; both pages
warn. Its tool `read*` is skipped with a warning (SPEC 3)."""

import re

import pytest

from tests.live import our_server, signed_in, wait_until
from tests.mcpserver.test_rest_of_mcp import NOT_FOUND, on, refusal, uris

pytestmark = pytest.mark.live

ERAS = ["legacy", "auto"]
CLAIMED = ["ui://a/app.html", "test://a/items/fig", "test://a/kib"]


def collision(uri: str) -> str:
    return f"resource {uri} is served by more than one server: read it on /mcp/a or /mcp/hostile"


@pytest.fixture(scope="module")
def c(module_console):
    servers = {"a": our_server("ui.py", "--name", "a"), "hostile": our_server("hostile.py")}
    console = module_console(servers, {}, allow=["mcp__a__*", "mcp__hostile__*"])
    console.wait_connected("a", "hostile")
    wait_until(lambda: {"test://a/counter", "test://a/kib"} <= uris(console, "/mcp/a"), 30)
    wait_until(lambda: "ui://a/app.html" in uris(console, "/mcp/hostile"), 30)
    return console


@pytest.mark.parametrize("mode", ERAS)
def test_it_lists_and_reads_a_uri_two_servers_claim_in_different_ways_for_neither(c, mode):
    listed = uris(c, "/mcp", mode)
    assert "test://a/counter" in listed and not listed & set(CLAIMED)
    for uri in CLAIMED:
        got = on(c, "/mcp", mode, lambda client, uri=uri: refusal(client.read_resource(uri)))
        assert got == (NOT_FOUND[mode], collision(uri))


@pytest.mark.parametrize("mode", ERAS)
def test_it_reads_each_servers_own_claim_on_its_own_endpoint(c, mode):
    for uri in CLAIMED:
        mine = on(c, "/mcp/a", mode, lambda client, uri=uri: client.read_resource(uri)).contents[0]
        assert not mine.text.startswith("hostile"), uri
        theirs = on(c, "/mcp/hostile", mode, lambda client, uri=uri: client.read_resource(uri)).contents[0]
        assert theirs.text == f"hostile {uri}"


def test_it_warns_on_both_servers_pages(c):
    web = signed_in(c, "claims")
    try:
        # The supervisor records the claims once it registered the second server's lists.
        def warned() -> str | None:
            page = web.get("/servers/a/").text
            return page if "URI also served by hostile" in page else None

        mine = wait_until(warned, 30, what="the warning on a's page")
        theirs = web.get("/servers/hostile/").text
    finally:
        web.close()
    assert "URI also served by a" in theirs
    # `a`'s app, which it does not list, is named with the warning; so is the template the
    # hostile server's listed URI matches.
    assert "ui://a/app.html</code>: URI also served by hostile" in mine
    assert re.search(r"test://a/items/\{item\}</code><span[^>]*>URI also served by hostile", mine)
    assert re.search(r"test://a/k\{rest\}</code><span[^>]*>URI also served by a", theirs)


def test_it_skips_a_tool_with_a_star_in_its_name_and_names_it_on_the_servers_page(c):
    async def names(client):
        return {t.name for t in (await client.list_tools()).tools}

    listed = on(c, "/mcp", "auto", names)
    assert "hostile__read_all" in listed and "hostile__read*" not in listed
    assert c.call("mcp__hostile__read*", {}, mode="auto").status_code == 404
    web = signed_in(c, "stars")
    try:
        page = web.get("/servers/hostile/").text
    finally:
        web.close()
    assert "tool &#x27;read*&#x27; skipped: a * in its name" in page
