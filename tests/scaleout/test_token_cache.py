"""Issue 11 across processes: a token kept in the memory of both web processes is refused by
either on its very next request once it is revoked through the other (PostgreSQL triggers
raise the cache generation in the revoking transaction)."""

import pytest

from tests.live import wait_until
from tests.scaleout.cluster import all_connected, signed_in_browser

pytestmark = pytest.mark.scaleout


def _echo(client, text: str):
    return client.post(
        "/v1/mcp/call", json={"name": "mcp__s1__echo", "arguments": {"text": text}, "mode": "auto"}
    )


def test_it_refuses_a_token_revoked_on_one_web_process_at_once_on_the_other(cluster):
    import httpx2

    wait_until(lambda: all_connected(cluster), 30, 0.2)
    token = cluster.manage("create_token", "leaving", "--role", "agent").strip()
    pk = cluster.manage(
        "shell", "-c", "from mcpcore.models import ApiToken; print(ApiToken.objects.get(name='leaving').pk)"
    ).split()[-1]
    headers = {"Authorization": f"Bearer {token}"}
    clients = [httpx2.Client(base_url=url, timeout=60, headers=headers) for url in cluster.webs]
    try:
        for i in range(10):  # warm: both processes serve the token from memory
            for web, client in enumerate(clients):
                assert _echo(client, f"{web}-{i}").json()["result"] == f"{web}-{i}"
        browser = signed_in_browser(cluster, 0)
        r = browser.post(
            f"/tokens/{pk}/revoke/",
            data={"csrfmiddlewaretoken": browser.cookies["csrftoken"]},
            headers={"Referer": cluster.webs[0] + "/tokens/"},
        )
        assert r.status_code == 200 and "Revoked token leaving" in r.text, r.text[:500]
        for client in reversed(clients):  # the other process first
            r = _echo(client, "after")
            assert r.status_code == 401 and r.json() == {"error": "authentication required"}
    finally:
        for client in clients:
            client.close()
