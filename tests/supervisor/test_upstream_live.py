"""SPEC 16 (issue 20) against a real `manage.py serve` and the real OAuth lab (tests/servers/oauthlab/):
a server that asks for OAuth waits for a person, is authorized through the lab's consent step,
keeps working for 30 s on 5 s access tokens (renewed at the lab, never sent expired) across a
restart of serve with no new authorization; a machine account connects by itself; a refused
renewal, a used `state`, an authorization server that answers garbage or is down each end in a
clear message with nothing half-stored; and no token the lab issued shows anywhere in clear.

The tests run in order on one console and one lab, as an operator's day would."""

import json
import re
import time

import httpx2
import pytest

from tests.live import Console, db_rows, signed_in, wait_until
from tests.servers.oauthlab.app import fingerprint
from tests.servers.oauthlab.run import NOT_AUTHORIZED, Lab, authorize, consent, leaks, path_of
from tests.webhooks import Receiver

pytestmark = pytest.mark.live

TTL = 5  # seconds an access token lives at the lab
MACHINE_SECRET = "machine-secret-8c1f2e"
FORM_SECRET = "form-secret-77b1d4"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    # "machine" is registered for HTTP Basic (as the SDK's client sends it), "form-machine" for
    # the secret in the form, which the console falls back to when Basic is refused.
    clients = {"machine": MACHINE_SECRET, "form-machine": f"{FORM_SECRET}:post"}
    lab = Lab(tmp_path_factory.mktemp("lab"), access_ttl=TTL, clients=clients).start()
    yield lab
    lab.close()


@pytest.fixture(scope="module")
def receiver():
    with Receiver() as r:
        yield r


@pytest.fixture(scope="module")
def c(module_console, lab, receiver) -> Console:
    servers = {
        # Nothing but a URL: the console finds out from the 401 that it needs OAuth (16.1).
        "lab": {"url": lab.mcp_url},
        "spare": {"url": lab.mcp_url},  # a second account at the same lab, for the failures
        "machine": {
            "url": lab.mcp_url,
            "oauth": {"grant": "client_credentials", "client_id": "machine", "client_secret": "$LAB_SECRET"},
        },
    }
    c = module_console(servers, start=False, LAB_SECRET=MACHINE_SECRET, AGENVOY_PING_SECONDS=1)
    c.env["AGENVOY_PUBLIC_URL"] = c.url
    (c.home / "allow_tool").write_text("mcp__lab__*\nmcp__machine__*\nmcp__spare__*\n")
    c.manage(
        "shell", "-c", f"from mcpcore.calls import notify; notify.add_target('webhook', {receiver.url!r})"
    )
    return module_console.start(c)


@pytest.fixture(scope="module")
def web(c):
    session = signed_in(c)
    yield session
    session.close()


def state(c: Console, name: str) -> dict:
    return c.status()[name]


def whoami(c: Console, server: str = "lab") -> dict:
    r = c.call(f"mcp__{server}__whoami", mode="auto")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "done", body
    return json.loads(body["result"])


# --- before and during the first authorization -------------------------------------------------


def test_it_waits_for_a_person_on_a_server_that_asks_for_oauth(c, lab):
    def waiting():
        st = c.status()
        if all(st[n]["state"] == "needs_authorization" for n in ("lab", "spare")):
            # A server in this state uses OAuth: its `oauth` item is there from the first answer.
            assert all("oauth" in st[n] for n in ("lab", "spare")), st
            return st["lab"]
        return None

    st = wait_until(waiting, 30, 0.05, what="lab and spare waiting for a person")
    assert st["Connected"] is False and st["Error"] == "needs authorization"
    assert st["oauth"] == NOT_AUTHORIZED
    # (Its tools are not known yet, so a call names an unknown tool; the 503 of a server that
    # needs authorization is seen once a refused renewal sends a connected one back, below.)
    # Not retried with backoff: with a 1 s ping the lab would see a 401 a second otherwise.
    seen = lab.stats()["mcp_unauthorized"]
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert state(c, "lab")["state"] == "needs_authorization"
        time.sleep(0.5)
    assert lab.stats()["mcp_unauthorized"] == seen


def test_it_connects_after_the_person_approves_at_the_authorization_server(c, lab, web):
    before = lab.stats()
    answer = authorize(c.http, web, "lab")
    assert answer.status_code == 302 and answer.headers["location"].endswith("/servers/lab/"), answer.text
    st = c.wait_connected("lab")["lab"]
    assert st["tools"] == 2 and {"mcp__lab__echo", "mcp__lab__whoami"} <= set(c.tools())
    oauth = st["oauth"]
    assert oauth["grant"] == "authorization_code" and oauth["authorized"] is True
    assert oauth["authorized_by"] == "op" and oauth["authorized_at"] and oauth["expires_at"]
    assert oauth["scopes"] == ["lab.read"]
    # The audit trail (SPEC 22.2): the person who came back with the code, from their browser.
    rows = db_rows(
        c, "SELECT actor, address, object, after FROM mcpcore_auditentry WHERE action = 'server.authorize'"
    )
    assert [r[:3] for r in rows] == [("op", "127.0.0.1", "lab")]
    assert json.loads(rows[0][3])["scopes"] == ["lab.read"] and "token" not in rows[0][3]

    sent = lab.authorize_requests()[-1]
    assert sent["resource"] == lab.mcp_url and sent["code_challenge_method"] == "S256"
    assert sent["redirect_uri"] == f"{c.url}/oauth/callback" and sent["state"]
    after = lab.stats()
    assert after["authorizations"] == before["authorizations"] + 1
    assert after["code_exchanges"] == before["code_exchanges"] + 1
    me = whoami(c)
    assert me["subject"] == "lab-user"
    assert me["token_fingerprint"] in {fingerprint(t) for t in lab.tokens()["access"]}


def test_it_refuses_a_used_state_and_stores_nothing(c, lab, web):
    r = c.post("/v1/mcp/authorize", {"name": "spare"})
    assert r.status_code == 200
    back = path_of(consent(r.json()["url"]))
    first = web.get(back)
    assert first.status_code == 302, first.text
    again = web.get(back)
    assert again.status_code == 400
    assert "authorization failed: unknown or expired state" in again.text
    bogus = web.get("/oauth/callback?code=lab_code_made-up&state=made-up")
    assert bogus.status_code == 400 and "authorization failed: unknown or expired state" in bogus.text
    c.wait_connected("spare")


# --- 5 s tokens for 30 s, and a restart -----------------------------------------------------------


def test_it_keeps_calling_for_30s_on_5s_tokens_renewed_at_the_authorization_server(c, lab):
    before = lab.stats()
    used = set()
    started = time.monotonic()
    while time.monotonic() - started < 30:
        used.add(whoami(c)["token_fingerprint"])
        time.sleep(0.5)  # a call every half second: the pace of an agent, not a wait for anything
    after = lab.stats()
    refreshes = after["refreshes"] - before["refreshes"]
    # Two servers hold person's tokens (lab and spare): each renews by 80 % of 5 s, ~7 times in 30 s.
    assert refreshes >= 2 * 5, after
    assert len(used) >= 5, used
    assert after["refresh_reused"] == 0 and after["mcp_expired_token"] == 0, after
    assert after["authorizations"] == before["authorizations"]
    gaps = refresh_gaps(lab)
    assert gaps and max(gaps) <= TTL * 0.8 + 1.5, gaps


def refresh_gaps(lab: Lab) -> list[float]:
    """Seconds between one renewal of a client's token and its next, for the first client that
    registered (the `lab` server's)."""
    events = lab.events()
    client = next(e["client_id"] for e in events if e["kind"] == "registrations")
    times = [e["at"] for e in events if e["kind"] == "refreshes" and e["client_id"] == client]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_it_reuses_the_stored_tokens_after_a_restart_of_serve(c, lab):
    before = lab.stats()
    c.stop()
    # Down past the access token's lifetime: what is stored is expired when serve comes back.
    last = max(e["at"] for e in lab.events() if e["kind"] in ("refreshes", "code_exchanges"))
    wait_until(lambda: time.time() > last + TTL + 0.5, TTL + 5, what="the stored access token expired")
    c.start()
    c.wait_connected("lab", "machine")
    assert whoami(c)["subject"] == "lab-user"
    after = lab.stats()
    assert after["authorizations"] == before["authorizations"], "a new authorization was needed"
    assert after["refreshes"] > before["refreshes"]
    assert after["mcp_expired_token"] == 0 and after["refresh_reused"] == 0, after


# --- machine accounts ---------------------------------------------------------------------------


def test_it_connects_a_machine_account_with_client_credentials(c, lab):
    st = c.wait_connected("machine")["machine"]
    assert st["oauth"]["grant"] == "client_credentials" and st["oauth"]["authorized"] is True
    assert st["oauth"]["authorized_by"] is None
    me = whoami(c, "machine")
    assert me["client_id"] == "machine" and me["subject"] == "machine"


def test_it_shows_a_refused_machine_account_as_an_error(console, lab):
    # A console of its own: its retries (with backoff, as any failed server) would blur the
    # module console's count of what reaches the lab.
    refused = {"grant": "client_credentials", "client_id": "machine", "client_secret": "$WRONG_SECRET"}
    other = console({"refused": {"url": lab.mcp_url, "oauth": refused}}, WRONG_SECRET="not-the-secret")
    before = lab.stats()["refusals"].get("invalid_client", 0)
    st = wait_until(lambda: state(other, "refused")["state"] == "error" and state(other, "refused"), 30, 0.2)
    assert st["Error"] == "authorization server refused the client: invalid_client"
    assert st["oauth"]["authorized"] is False
    assert "not-the-secret" not in other.get("/v1/mcp/status").text + other.get("/v1/mcp").text
    assert "not-the-secret" not in other.log_text()
    assert lab.stats()["refusals"]["invalid_client"] > before
    other.close()


def test_it_connects_a_machine_account_that_sends_its_secret_in_the_form(console, lab):
    oauth = {"grant": "client_credentials", "client_id": "form-machine", "client_secret": "$FORM_SECRET"}
    other = console({"form": {"url": lab.mcp_url, "oauth": oauth}}, start=False, FORM_SECRET=FORM_SECRET)
    (other.home / "allow_tool").write_text("mcp__form__*\n")
    refused = lab.stats()["refusals"].get("invalid_client", 0)
    try:
        console.start(other)
        other.wait_connected("form")
        assert whoami(other, "form")["client_id"] == "form-machine"
        # HTTP Basic first (refused: this client was registered for the form), then the form.
        after_first = lab.stats()
        assert after_first["refusals"]["invalid_client"] >= refused + 1
        other.stop()
        # Down past the token's lifetime, so that serve must ask for a new one when it is back.
        last = max(e["at"] for e in lab.events() if e.get("client_id") == "form-machine")
        wait_until(lambda: time.time() > last + TTL + 0.5, TTL + 5, what="the form-machine token expired")
        other.start()
        other.wait_connected("form")
        assert whoami(other, "form")["client_id"] == "form-machine"
        # The way that worked is kept with the account: no refused attempt after the restart.
        after_restart = lab.stats()
        assert after_restart["refusals"]["invalid_client"] == after_first["refusals"]["invalid_client"]
        assert (
            after_restart["client_credentials"] > after_first["client_credentials"]
        )  # the 5 s token had expired
    finally:
        other.close()


# --- failures -----------------------------------------------------------------------------------


def test_it_needs_authorization_again_when_a_renewal_is_refused(c, lab, receiver):
    lab.fail_refresh(1)
    try:
        failed = wait_until(
            lambda: [n for n in ("lab", "spare") if state(c, n)["state"] == "needs_authorization"],
            TTL * 2 + 10,
            0.2,
            what="a server back to needs_authorization",
        )
    finally:
        lab.fail_refresh(0)
    name = failed[0]
    assert lab.stats()["refresh_failed_by_switch"] >= 1
    st = state(c, name)
    assert st["Error"] == "needs authorization" and st["oauth"]["authorized"] is False
    r = c.call(f"mcp__{name}__whoami", mode="auto")
    assert (
        r.status_code == 503
        and r.json()["error"] == f"server {name} needs authorization: {c.url}/servers/{name}/"
    )

    def notified():
        for req in receiver.requests:
            body = json.loads(req["body"])
            if body["type"] == "server.needs_authorization" and body["data"]["server"] == name:
                return body
        return None

    body = wait_until(notified, 20, what="the server.needs_authorization webhook")
    assert body["data"]["url"] == f"{c.url}/servers/{name}/"


def test_it_fails_cleanly_when_the_token_endpoint_answers_garbage(c, lab, web):
    name = next(n for n in ("lab", "spare") if state(c, n)["state"] == "needs_authorization")
    before = lab.stats()
    lab.token_garbage("html")
    try:
        answer = authorize(c.http, web, name)
    finally:
        lab.token_garbage("off")
    assert lab.stats()["garbage_answers"] > before["garbage_answers"]
    assert answer.status_code < 500, answer.text[:2000]

    def failure_shown():
        text = web.get(f"/servers/{name}/").text
        return text if "authorization failed" in text else None

    page = wait_until(failure_shown, 20, 0.2, what="the failure on the server page")
    message = re.search(r"authorization failed[^<]*", page).group(0)
    # A message a person can read (docs/decisions.md, OAuth upstream): no traceback, none of
    # the HTML the token endpoint answered.
    assert "Traceback" not in page and "temporarily unavailable</h1>" not in page, message
    assert (
        message
        == "authorization failed: the authorization server answered with something that is not a token"
    )
    st = state(c, name)
    assert st["state"] == "needs_authorization" and st["oauth"]["authorized"] is False


def test_it_fails_cleanly_while_the_authorization_server_is_down(c, lab, web):
    name = next(n for n in ("lab", "spare") if state(c, n)["state"] == "needs_authorization")
    lab.stop()
    try:
        r = c.post("/v1/mcp/authorize", {"name": name})
        assert r.status_code == 502, r.text  # docs/decisions.md, OAuth upstream
        assert set(r.json()) == {"error"} and r.json()["error"].startswith("authorization failed: "), r.text
        page = web.post(
            f"/servers/{name}/authorize/",
            data={"csrfmiddlewaretoken": web.cookies["csrftoken"]},
            headers={"Referer": f"{c.url}/servers/{name}/"},
        )
        assert page.status_code < 500 and "Traceback" not in page.text
    finally:
        lab.start()
    st = state(c, name)
    assert st["state"] == "needs_authorization" and st["oauth"]["authorized"] is False
    # And once it is back, a person can finish the flow as ever.
    assert authorize(c.http, web, name).status_code == 302
    c.wait_connected(name)


# --- no token in clear ----------------------------------------------------------------------------


def test_it_shows_no_issued_token_anywhere_in_clear(c, lab, web, receiver):
    secrets = lab.issued_secrets()
    issued = lab.tokens()
    # The console registers itself as a public client (PKCE, no secret): the secrets are the
    # configured machine accounts'.
    assert (
        issued["access"] and issued["refresh"] and issued["client_secrets"] == [MACHINE_SECRET, FORM_SECRET]
    )
    # The search itself finds what it looks for (the lab's own state file holds them in clear).
    assert leaks(secrets[:1], {"lab state": (lab.folder / "oauthlab-state.json").read_bytes()})

    places: dict[str, bytes] = {}
    for path in [*c.data.glob("db.sqlite3*"), c.home / "mcp.json", *c.base.glob("*.log")]:
        places[str(path)] = path.read_bytes()
    calls = [row["call_id"] for row in map(json.loads, c.get("/v1/calls/export").text.splitlines())]
    assert calls
    api = [
        "/v1/mcp",
        "/v1/mcp/status",
        "/v1/mcp/tools",
        "/v1/pending",
        "/v1/allowlist",
        "/v1/calls/export?results=1",
        "/v1/calls/export?results=1&format=csv",
        "/metrics",
        *(f"/v1/mcp/calls/{call}" for call in calls[-20:]),
    ]
    for path in api:
        r = c.http.get(path)
        assert r.status_code == 200, (path, r.status_code)
        places[path] = r.content
    pages = ["/", "/servers/lab/", "/servers/spare/", "/servers/machine/", "/history/"]
    pages += ["/pending/", "/tokens/", "/notifications/", *(f"/history/{call}/" for call in calls[-5:])]
    for path in pages:
        r = web.get(path)
        assert r.status_code == 200, (path, r.status_code)
        places[path] = r.content
    for n, req in enumerate(receiver.requests):
        places[f"webhook payload {n}"] = req["body"] + json.dumps(req["headers"]).encode()
    assert leaks(secrets, places) == []


def test_it_never_answers_a_500_to_a_bad_authorize_request(c):
    assert c.post("/v1/mcp/authorize", {"name": "nope"}).json() == {"error": "server not found"}
    r = c.post("/v1/mcp/authorize", {"name": "machine"})
    assert r.status_code == 400 and r.json() == {"error": "server machine does not use OAuth authorization"}
    with c.client_for("approver") as approver:
        r = approver.post("/v1/mcp/authorize", json={"name": "lab"})
        assert r.status_code == 403 and r.json() == {"error": "this token may not change servers"}
    assert httpx2.post(c.url + "/v1/mcp/authorize", json={"name": "lab"}).status_code == 401
