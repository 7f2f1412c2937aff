"""Import: a preview of pasted or uploaded configuration, then the import on confirm.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import json
import re

import pytest

pytestmark = pytest.mark.django_db


def test_it_previews_an_import_then_imports_on_confirm(signed_in, every, agenvoy_home):
    doc = {
        "mcpServers": {
            "gh": {"command": "npx", "args": ["-y", "gh"], "env": {"GH_TOKEN": "ghp_secret"}},
            "every": {"type": "http", "url": "https://h/mcp"},
        }
    }
    r = signed_in.post("/import-servers/", {"text": json.dumps(doc)})
    html = r.content.decode()
    assert r.status_code == 200 and "npx -y gh" in html and "GH_TOKEN" in html
    assert "replaces the existing one" in html and "Import 2 servers" in html
    assert "gh" not in json.loads((agenvoy_home / "mcp.json").read_text())["servers"]
    payload = re.search(r'name="payload" value="([^"]+)"', html).group(1)
    import html as htmllib

    r = signed_in.post("/import-servers/", {"confirm": "1", "payload": htmllib.unescape(payload)})
    assert r.status_code == 302
    servers = json.loads((agenvoy_home / "mcp.json").read_text())["servers"]
    assert servers["gh"]["env"] == {"GH_TOKEN": "ghp_secret"}
    assert servers["every"] == {"type": "streamable-http", "url": "https://h/mcp"}


def test_it_imports_an_uploaded_file(signed_in, agenvoy_home):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("mcp.json", json.dumps({"servers": {"u": {"command": "x"}}}).encode())
    r = signed_in.post("/import-servers/", {"file": upload})
    assert r.status_code == 200 and "Import 1 server" in r.content.decode()


@pytest.mark.parametrize(
    "text,message",
    [
        ("{nope", "not valid JSON"),
        ('{"other": {}}', "no &quot;servers&quot; or &quot;mcpServers&quot;"),
        ('{"servers": {"a__b": {"command": "x"}}}', "invalid server name"),
        ('{"servers": {"a": {"command": "x", "args": "not a list"}}}', "server.args must be a list"),
    ],
)
def test_it_explains_an_import_it_cannot_use(signed_in, agenvoy_home, text, message):
    r = signed_in.post("/import-servers/", {"text": text})
    assert r.status_code == 400 and message in r.content.decode()
