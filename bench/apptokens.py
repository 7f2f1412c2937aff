"""9. An app's OAuth access token on `/mcp` against a static API token (issue 33, SPEC 21.4).

One console, one allow-listed `echo__echo`; two raw JSON-RPC clients (bench/rawhttp.py, the
2026-07-28 era) on `/mcp`: one with a static agent token, one with an app's access token got
through the console's own OAuth flow (registration, a person's `Allow`, the code exchanged with
PKCE), both as plain HTTP a user could make. Their calls are interleaved in blocks; the figure is
the difference of their p50s (target: under 0.2 ms), with both p50s in the note."""

import asyncio
import base64
import hashlib
import secrets
import time
from urllib.parse import parse_qs, urlsplit

from bench.common import Figure, console, echo_servers, ms, percentile
from bench.rawhttp import MODERN, RawMcp
from tests.live import signed_in

NAME = "apptokens"
CALLS = 1000
BLOCK = 50
WARMUP = 50
TARGET_MS = 0.2
ARGS = {"text": "hello"}
REDIRECT = "http://127.0.0.1:9/callback"


def app_token(con) -> str:
    """An access token through the console's OAuth routes, as an app and a person get one."""
    import httpx2

    reg = httpx2.post(
        con.url + "/register",
        json={"redirect_uris": [REDIRECT], "client_name": "Bench app", "token_endpoint_auth_method": "none"},
    ).json()
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    web = signed_in(con, "bench", "bench-pw-123")
    try:
        params = {
            "response_type": "code",
            "client_id": reg["client_id"],
            "redirect_uri": REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "s",
        }
        page = web.get("/authorize", params=params, follow_redirects=False).headers["location"]
        request = parse_qs(urlsplit(page).query)["request"][0]
        back = web.post(
            "/apps/allow/",
            data={"request": request, "decision": "allow", "csrfmiddlewaretoken": web.cookies["csrftoken"]},
            headers={"Referer": page},
            follow_redirects=False,
        ).headers["location"]
    finally:
        web.close()
    code = parse_qs(urlsplit(back).query)["code"][0]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": reg["client_id"],
        "code_verifier": verifier,
    }
    return httpx2.post(con.url + "/token", data=form).json()["access_token"]


async def measure(con, static: str, app: str) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {"static": [], "app": []}
    clients = {
        "static": RawMcp(con.url + "/mcp", MODERN, static),
        "app": RawMcp(con.url + "/mcp", MODERN, app),
    }
    for client in clients.values():
        await client.__aenter__()
    try:
        for client in clients.values():
            for _ in range(WARMUP):
                await client.call("echo__echo", ARGS)
        for _ in range(CALLS // BLOCK):  # interleaved, so drift hits both alike
            for name, client in clients.items():
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    answer = await client.call("echo__echo", ARGS)
                    rows[name].append(time.perf_counter() - t)
                    if answer.get("isError"):
                        raise RuntimeError(f"{name}: the call failed")
    finally:
        for client in clients.values():
            await client.__aexit__(None, None, None)
    return rows


def run() -> list[Figure]:
    with console(echo_servers(), start=False) as con:
        con.env["AGENVOY_PUBLIC_URL"] = con.url
        (con.home / "allow_tool").write_text("mcp__echo__echo\n")
        static = con._insert_token("bench-static", "agent")
        con.start()
        con.wait_connected("echo")
        app = app_token(con)
        rows = asyncio.run(measure(con, static, app))
    static50, app50 = ms(percentile(rows["static"], 50)), ms(percentile(rows["app"], 50))
    note = f"p50 static token {static50:.3f} ms, app token {app50:.3f} ms ({CALLS} calls each, interleaved)"
    return [
        Figure(
            NAME,
            "/mcp call, app access token: p50 over a static token",
            app50 - static50,
            "ms",
            static50,
            "static token p50",
            f"< {TARGET_MS} ms",
            app50 - static50 < TARGET_MS,
            note,
        )
    ]
