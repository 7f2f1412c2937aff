"""Running the lab from a test: `Lab(folder, ...).start()` starts `python -m tests.servers.oauthlab` on a
free port and waits (bounded) for its ready line; `stop()` ends it, `start()` again restarts it on
the same port with the same state file (clients and tokens kept). The `/_lab/` controls as methods.

    lab = Lab(tmp_path, access_ttl=5, clients={"machine": "machine-secret"}).start()
    lab.mcp_url            # the protected MCP server, for mcp.json
    lab.stats()["refreshes"], lab.issued_secrets(), lab.fail_refresh(1), lab.token_garbage("html")
    lab.close()

`consent(url)` and `authorize(api, web, name)` play a person's part of the flow without a browser.
"""

import os
import signal
import subprocess
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx2

from tests.live import PYTHON, ROOT, stop_process, wait_until

READY = "oauthlab ready "
# The `oauth` item of GET /v1/mcp/status for an authorization-code server before its first
# tokens (SPEC 16.1).
NOT_AUTHORIZED = {
    "grant": "authorization_code",
    "authorized": False,
    "authorized_by": None,
    "authorized_at": None,
    "scopes": None,
    "expires_at": None,
}


class Lab:
    """One lab process (an authorization server and its protected MCP server)."""

    def __init__(
        self,
        folder: Path,
        access_ttl: int = 3600,
        clients: dict[str, str] | None = None,
        keep_state: bool = True,
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.access_ttl = access_ttl
        self.clients = dict(clients or {})  # id -> secret; "secret:post" for a form-secret client
        self.state = folder / "oauthlab-state.json" if keep_state else None
        self.port = 0  # chosen by the first start, kept by the next ones
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self.log_path = folder / "oauthlab.log"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def start(self, timeout: float = 30) -> "Lab":
        args = [
            PYTHON,
            "-m",
            "tests.servers.oauthlab",
            "--port",
            str(self.port),
            "--access-ttl",
            str(self.access_ttl),
        ]
        for client_id, secret in self.clients.items():
            args += ["--client", f"{client_id}:{secret}"]
        if self.state is not None:
            args += ["--state", str(self.state)]
        start_at = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                args,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        finally:
            log.close()
        line = wait_until(lambda: self._ready_line(start_at), timeout, what="oauthlab ready")
        self.url = line.removeprefix(READY).strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def _ready_line(self, start_at: int) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"oauthlab exited with {self.proc.returncode}: {self.log()[-3000:]}")
        with open(self.log_path, "rb") as f:
            f.seek(start_at)
            for line in f.read().decode(errors="replace").splitlines():
                if line.startswith(READY):
                    return line
        return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
        stop_process(self.proc, sig, timeout)

    def close(self) -> None:
        self.stop()

    # --- /_lab/ ----------------------------------------------------------------------------------

    def _get(self, path: str):
        r = httpx2.get(self.url + path, timeout=10)
        r.raise_for_status()
        return r.json()

    def _post(self, path: str, body: dict) -> dict:
        r = httpx2.post(self.url + path, json=body, timeout=10)
        r.raise_for_status()
        return r.json()

    def stats(self) -> dict:
        """Counts: authorizations, consents_approved, code_exchanges, refreshes,
        client_credentials, registrations, refresh_reused, mcp_unauthorized, mcp_expired_token,
        tool_calls, garbage_answers, and `refusals` by OAuth error code."""
        return self._get("/_lab/stats")

    def tokens(self) -> dict[str, list[str]]:
        """Every string the lab issued: `access`, `refresh`, `client_secrets`, `codes`."""
        return self._get("/_lab/tokens")

    def issued_secrets(self) -> list[str]:
        """The access and refresh tokens and client secrets issued (what must never show in clear)."""
        issued = self.tokens()
        return [*issued["access"], *issued["refresh"], *issued["client_secrets"]]

    def events(self) -> list[dict]:
        return self._get("/_lab/events")

    def authorize_requests(self) -> list[dict]:
        """The query of every /authorize request, as sent (a test checks `resource`, PKCE, ...)."""
        return self._get("/_lab/authorize-requests")

    def fail_refresh(self, count: int = 1) -> dict:
        """The next `count` refreshes fail `invalid_grant` (-1: every one until `fail_refresh(0)`)."""
        return self._post("/_lab/fail-refresh", {"count": count})

    def token_garbage(self, mode: str = "html", count: int = -1) -> dict:
        """The token endpoint answers an HTML page (`html`) or a 500 (`500`), `count` times
        (-1: until `token_garbage("off")`)."""
        return self._post("/_lab/token-garbage", {"mode": mode, "count": count})

    def expire_access(self) -> dict:
        """Every access token issued so far is expired from now on."""
        return self._post("/_lab/expire-access", {})


# --- a person's part of the flow, without a browser ----------------------------------------------


def consent(authorize_url: str, decision: str = "approve") -> str:
    """What a browser does with an authorization URL of this lab: follow it to the consent page,
    press `Approve` (or `Deny`), and return where the lab sends the browser back (the client's
    redirect URI with `code`, `state` and `iss`, or with `error=access_denied`)."""
    with httpx2.Client(timeout=20) as browser:
        r = browser.get(authorize_url)
        assert r.status_code == 302, f"authorize answered {r.status_code}: {r.text[:500]}"
        page = r.headers["location"]
        assert "/consent?request=" in page, page
        shown = browser.get(page)
        assert shown.status_code == 200 and "Approve" in shown.text, shown.text[:500]
        request_id = page.split("request=", 1)[1]
        r = browser.post(page.split("?")[0], data={"request": request_id, "decision": decision})
        assert r.status_code == 302, r.text[:500]
        return r.headers["location"]


def path_of(url: str) -> str:
    """`/oauth/callback?...` of an absolute URL, to send to whichever web process a test picks."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def authorize(
    api: httpx2.Client, web: httpx2.Client, name: str, decision: str = "approve"
) -> httpx2.Response:
    """The whole authorization-code flow of SPEC 16.2 for server `name`: started with `api` (an
    admin token: POST /v1/mcp/authorize), consented at the lab, finished by `web` (a signed-in
    person's session, on any web process) at the console's callback. The callback's answer."""
    r = api.post("/v1/mcp/authorize", json={"name": name})
    assert r.status_code == 200, r.text
    back = consent(r.json()["url"], decision)
    return web.get(path_of(back))


def leaks(secrets: list[str], places: dict[str, bytes]) -> list[str]:
    """Where any of `secrets` shows in clear (also URL-encoded, since a token could travel in a
    query string): `"<place>: <first 10 characters>..."` for each find; [] when none."""
    found = []
    for where, blob in places.items():
        for secret in secrets:
            if secret.encode() in blob or quote(secret, safe="").encode() in blob:
                found.append(f"{where}: {secret[:10]}...")
    return found
