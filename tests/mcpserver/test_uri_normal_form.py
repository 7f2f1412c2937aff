"""A read's URI in normal form only (SPEC 20.3), through a live console with the SDK's
`Client` in both eras, against tests/servers/files.py under the contract's example rule
`deny resource:fs(uri:file:///home/*/.ssh/*)`: every other spelling of a denied file is
refused before any rule or server, with its normal form; the normal one is denied."""

import pytest

from tests.live import our_server
from tests.mcpserver.test_rest_of_mcp import on, refusal, rules

pytestmark = pytest.mark.live

ERAS = ["legacy", "auto"]
DENY = "deny resource:fs(uri:file:///home/*/.ssh/*)"
SECRET = "file:///home/u/.ssh/id_rsa"
SPELLINGS = [
    "file:///home/u/%2essh/id_rsa",
    "file:////home/u/.ssh/id_rsa",
    "file://localhost/home/u/.ssh/id_rsa",
    "FILE:///home/u/.ssh/id_rsa",
    "file:///home/x/../u/.ssh/id_rsa",
]


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"fs": our_server("files.py")}, {}, allow=["mcp__fs__*"])
    console.wait_connected("fs")
    return console


@pytest.mark.parametrize("mode", ERAS)
def test_it_refuses_every_other_spelling_of_a_denied_file_with_its_normal_form(c, mode):
    with rules(c, DENY):
        for spelled in SPELLINGS:
            got = on(c, "/mcp", mode, lambda client, uri=spelled: refusal(client.read_resource(uri)))
            assert got == (-32602, f"resource URI is not in normal form: {SECRET}"), spelled
        got = on(c, "/mcp", mode, lambda client: refusal(client.read_resource(SECRET)))
        assert got == (-32001, f"Denied by rule: {DENY}")
        # In normal form (RFC 3986 keeps %2F), but the server's template decodes it into a path.
        climbing = "file:///home/x/..%2Fu%2F.ssh/id_rsa"
        got = on(c, "/mcp", mode, lambda client: refusal(client.read_resource(climbing)))
        assert got == (-32001, f"Denied by rule: {DENY}")
        # A file the rule does not name is read as ever.
        read = on(c, "/mcp", mode, lambda client: client.read_resource("file:///home/u/docs/notes.txt"))
        assert read.contents[0].text == "contents of /home/u/docs/notes.txt"
