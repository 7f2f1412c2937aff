"""SPEC 22.1 behind docs/deploy.md's proxies: nginx and Caddy, run with the configuration the
doc shows (only the addresses changed to this test's ports), in front of a live console that
trusts 127.0.0.1. A client on another loopback address (its own for each proxy, so the limits
of one run leave the other's alone) forges a new `X-Forwarded-For` on every request: the sign-in
lock holds, the registration limit holds, and the audit rows name the client's real address."""

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.live import ROOT, free_port, stop_process, wait_until

pytestmark = pytest.mark.live

DEPLOY = ROOT / "docs" / "deploy.md"
# The real client of each proxy: loopback, but not the trusted proxy's 127.0.0.1.
CLIENTS = {"nginx": "127.0.0.3", "caddy": "127.0.0.4"}
PASSWORD = "proxy-pw-2201"


def documented(language: str) -> str:
    """The one fenced block of `language` in docs/deploy.md."""
    blocks = re.findall(rf"```{language}\n(.*?)```", DEPLOY.read_text(), re.S)
    assert len(blocks) == 1, f"docs/deploy.md has {len(blocks)} {language} blocks"
    return blocks[0]


def replaced(text: str, changes: dict[str, str]) -> str:
    """`text` with each address of the doc swapped for the test's; each must be there, so the
    test runs the doc's configuration and not one drifted from it."""
    for old, new in changes.items():
        assert old in text, f"docs/deploy.md no longer has {old!r}"
        text = text.replace(old, new)
    return text


def nginx_config(folder: Path, listen: int, console: int) -> str:
    site = replaced(
        documented("nginx"),
        {
            "server 127.0.0.1:8001; server 127.0.0.1:8002;": f"server 127.0.0.1:{console};",
            "listen 443 ssl;": f"listen 127.0.0.1:{listen};",
        },
    )
    # One process (no workers switching user), every file in the test's folder.
    temp = "\n".join(f"    {kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy"))
    temp += "\n" + "\n".join(
        f"    {kind}_temp_path {folder}/{kind};" for kind in ("fastcgi", "uwsgi", "scgi")
    )
    return (
        f"daemon off;\nmaster_process off;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
        f"events {{}}\nhttp {{\n    access_log off;\n{temp}\n{site}}}\n"
    )


def caddy_config(listen: int, console: int) -> str:
    site = replaced(
        documented("caddyfile"),
        {"console.example.com {": f"http://127.0.0.1:{listen} {{", "127.0.0.1:8000": f"127.0.0.1:{console}"},
    )
    return "{\n    admin off\n}\n" + site


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def live(module_console):
    c = module_console(None, {"AGENVOY_TRUSTED_PROXIES": "127.0.0.1"}, start=False)
    c.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        f"for name in ('nginx-user', 'caddy-user'): User.objects.create_user(name, password={PASSWORD!r})",
    )
    return module_console.start(c)


@pytest.fixture(params=["nginx", "caddy"])
def proxy(request, live, tmp_path) -> Iterator[tuple[str, str]]:
    """(the proxy's name, its URL), the proxy running meanwhile."""
    kind, port = request.param, free_port()
    program = shutil.which(kind, path=f"{os.environ.get('PATH', '')}:/usr/sbin")  # nginx: sbin
    if program is None:
        pytest.fail(f"{kind} is not installed: scripts/install-system.sh installs it")
    if kind == "nginx":
        (tmp_path / "nginx.conf").write_text(nginx_config(tmp_path, port, live.port))
        command = [
            program,
            "-p",
            str(tmp_path),
            "-c",
            str(tmp_path / "nginx.conf"),
            "-e",
            str(tmp_path / "error.log"),
        ]
        env = None
    else:
        (tmp_path / "Caddyfile").write_text(caddy_config(port, live.port))
        command = [program, "run", "--config", str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"]
        env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    with open(tmp_path / "proxy.log", "wb") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            wait_until(lambda: proc.poll() is None and listening(port), 20, what=f"{kind} listening")
            yield kind, f"http://127.0.0.1:{port}"
        finally:
            stop_process(proc)


def client(kind: str, url: str) -> httpx2.Client:
    """An HTTP client on the proxy's URL from its own loopback address."""
    transport = httpx2.HTTPTransport(local_address=CLIENTS[kind])
    return httpx2.Client(base_url=url, timeout=30, transport=transport)


def test_it_locks_a_client_that_forges_forwarded_for_through_the_documented_proxy(live, proxy):
    kind, url = proxy
    user = f"{kind}-user"
    with client(kind, url) as web:
        assert web.get("/login/").status_code == 200

        def sign_in(password: str, forged: str) -> httpx2.Response:
            return web.post(
                "/login/",
                data={
                    "username": user,
                    "password": password,
                    "csrfmiddlewaretoken": web.cookies["csrftoken"],
                },
                headers={"X-Forwarded-For": forged},
            )

        tries = [sign_in("wrong", f"203.0.113.{i + 1}").status_code for i in range(5)]
        assert tries == [200] * 4 + [429]  # the fifth failure locks the pair
        r = sign_in(PASSWORD, "198.51.100.77, 127.0.0.1")
        assert r.status_code == 429, r.text[:500]
        assert "Too many failed sign-ins. Try again in 15 minutes." in r.text
    rows = [json.loads(line) for line in live.get("/v1/audit", actor=user).text.splitlines()]
    assert {row["action"] for row in rows} >= {"signin.failed", "signin.locked"}
    assert {row["address"] for row in rows} == {CLIENTS[kind]}


def test_it_limits_registrations_of_a_client_that_forges_forwarded_for(live, proxy):
    kind, url = proxy
    body = {"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"}
    with client(kind, url) as app:
        answers = [
            app.post(
                "/register",
                json={**body, "client_name": f"{kind} app {i}"},
                headers={"X-Forwarded-For": f"203.0.113.{i}"},
            ).status_code
            for i in range(21)
        ]
    assert answers == [201] * 20 + [429]
