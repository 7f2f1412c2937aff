"""The Tokens page: a new token shown once, auto mode, refusals, revoking, connect an agent.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import hashlib
import json
import re

import pytest

from mcpcore.models import ApiToken

pytestmark = pytest.mark.django_db


def test_it_shows_connect_an_agent_on_the_tokens_page(signed_in, db):
    ApiToken.issue("t")
    html = signed_in.get("/tokens/").content.decode()
    panel = re.search(r'<section class="card connect-agent".*?</section>', html, re.S).group(0)
    assert len(re.findall(r"<li>", panel)) == 3 and 'href="#new-token-form"' in panel
    assert 'id="new-token-form"' in html


def test_it_shows_a_new_token_once_and_stores_only_its_hash(signed_in, db):
    r = signed_in.post("/tokens/create/", {"name": "agent-1"})
    html = r.content.decode()
    token = re.search(r'<pre class="token" id="new-token">(agv_[^<]+)</pre>', html).group(1)
    row = ApiToken.objects.get(name="agent-1")
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest() and not row.may_auto
    assert token not in json.dumps([str(v) for v in ApiToken.objects.values().get().values()])
    assert r["Cache-Control"] == "no-store"
    again = signed_in.get("/tokens/").content.decode()
    assert token not in again and "agent-1" in again and token[:8] in again


def test_it_creates_a_token_that_may_use_auto_when_ticked(signed_in, db):
    signed_in.post("/tokens/create/", {"name": "a", "may_auto": "on"})
    assert ApiToken.objects.get(name="a").may_auto


def test_it_explains_a_token_it_cannot_create(signed_in, db):
    r = signed_in.post("/tokens/create/", {"name": ""})
    assert r.status_code == 400 and not ApiToken.objects.exists()


def test_it_revokes_a_token(signed_in, db):
    row, _ = ApiToken.issue("old")
    r = signed_in.post(f"/tokens/{row.pk}/revoke/", headers={"HX-Request": "true"})
    row.refresh_from_db()
    assert row.revoked_at is not None and "revoked" in r.content.decode()
    assert r.content.decode().lstrip().startswith('<div id="token-list"')
