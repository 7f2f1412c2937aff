"""SPEC 21.2's Client ID Metadata Documents against a real `manage.py serve`: the documents are
served over HTTPS by this test (a CA of its own, made with `cryptography`, named to the console
by SSL_CERT_FILE; AGENVOY_OAUTH_ALLOW_PRIVATE=1 since it is on loopback), and fetched by the
console when an app first uses its `client_id`."""

import concurrent.futures
import datetime
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.live import db_rows, signed_in
from tests.oauthapps import (
    LOOPBACK_REDIRECT,
    MemoryStorage,
    app_client,
    consent_over_http,
    pkce,
    provider_for,
)

pytestmark = pytest.mark.live


def _ca_and_server_cert(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for localhost and 127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Agenvoy tests CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


class Documents:
    """An HTTPS server of client metadata documents: `routes[path] = (status, headers, body)`;
    a path in `slow` answers only when `release` is set (or after 10 s), one in `drip` sends its
    headers a byte every quarter second and never ends them. `held`: the slow requests being
    held now; `most_held` the most at once."""

    def __init__(self, folder: Path) -> None:
        self.ca, cert, key = _ca_and_server_cert(folder)
        self.routes: dict[str, tuple[int, dict, bytes]] = {}
        self.slow: set[str] = set()
        self.drip: set[str] = set()
        self.release = threading.Event()
        self.hits: list[str] = []
        self.held = 0
        self.most_held = 0
        self.counted = threading.Condition()
        docs = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                docs.hits.append(self.path)
                if self.path in docs.drip:  # headers a byte at a time, never finished
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    for _ in range(40):
                        if docs.release.wait(0.25):
                            return
                        try:
                            self.wfile.write(b"a")
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                if self.path in docs.slow:
                    with docs.counted:
                        docs.held += 1
                        docs.most_held = max(docs.most_held, docs.held)
                        docs.counted.notify_all()
                    docs.release.wait(10)
                    with docs.counted:
                        docs.held -= 1
                        docs.counted.notify_all()
                status, headers, body = docs.routes.get(self.path, (404, {}, b"{}"))
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.base = f"https://localhost:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def document(self, path: str, **fields) -> str:
        """Serve a good document at `path` (its client_id its own URL), changed by `fields`."""
        client_id = self.base + path
        doc = {
            "client_id": client_id,
            "client_name": "Document app",
            "redirect_uris": [LOOPBACK_REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        doc.update(fields)
        self.routes[path] = (200, {}, json.dumps({k: v for k, v in doc.items() if v is not None}).encode())
        return client_id

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    made = Documents(tmp_path_factory.mktemp("cimd"))
    yield made
    made.close()


@pytest.fixture(scope="module")
def c(module_console, docs):
    console = module_console(None, start=False, SSL_CERT_FILE=docs.ca, AGENVOY_OAUTH_ALLOW_PRIVATE="1")
    console.env["AGENVOY_PUBLIC_URL"] = console.url
    return module_console.start(console)


@pytest.fixture(scope="module")
def web(c):
    session = signed_in(c, "dora", "dora-pw-123")
    yield session
    session.close()


def authorize(web, client_id: str, redirect_uri: str = LOOPBACK_REDIRECT) -> httpx2.Response:
    _, challenge = pkce()
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "s",
    }
    return web.get("/authorize", params=params, follow_redirects=False)


def clients_count(c) -> int:
    return db_rows(c, "select count(*) from mcpcore_appclient")[0][0]


def test_it_signs_in_an_sdk_client_by_its_metadata_document(c, web, docs):
    client_id = docs.document("/good.json", client_name="Doc agent")
    storage = MemoryStorage()
    provider = provider_for(
        c.url + "/mcp", storage, consent_over_http(web), name="Doc agent", client_metadata_url=client_id
    )

    async def main():
        async with app_client(c.url + "/mcp", provider) as client:
            await client.list_tools()

    anyio.run(main)
    assert storage.client is not None and storage.client.client_id == client_id
    grants = c.get("/v1/grants").json()["grants"]
    assert [(g["client_id"], g["name"]) for g in grants] == [(client_id, "Doc agent (app of dora)")]
    assert "/good.json" in docs.hits


def test_it_follows_one_redirect_to_https(c, web, docs):
    target = docs.document("/moved-target.json")
    client_id = docs.base + "/moved.json"
    docs.routes["/moved.json"] = (302, {"Location": target}, b"")
    # The document must name the URL asked for (the client_id), wherever it was served from.
    docs.document("/moved-target.json", client_id=client_id)
    r = authorize(web, client_id)
    assert r.status_code == 302 and r.headers["location"].startswith(c.url + "/apps/allow/"), r.text


@pytest.mark.parametrize(
    "case, why",
    [
        ("big", "larger than 16 KiB"),
        ("twice", "redirects more than once"),
        ("other-id", "names another client_id"),
        ("secret", "carries a secret"),
        ("private-key", "carries a private key"),
        ("not-json", "not JSON"),
        ("missing", "answered HTTP 404"),
        ("http-redirect", "must be https, http on a loopback host"),
        ("javascript-redirect", "must be https, http on a loopback host"),
        ("malformed-redirect", "is not a URL"),
        ("bad-port-redirect", "is not a URL"),
    ],
)
def test_it_refuses_a_bad_document_as_an_unknown_client(c, web, docs, case, why):
    path = f"/{case}.json"
    if case == "big":
        docs.document(path, padding="x" * 17000)
    elif case == "twice":
        docs.routes[path] = (302, {"Location": docs.base + "/twice-2.json"}, b"")
        docs.routes["/twice-2.json"] = (302, {"Location": docs.base + "/good.json"}, b"")
    elif case == "other-id":
        docs.document(path, client_id=docs.base + "/someone-else.json")
    elif case == "secret":
        docs.document(path, client_secret="hunter2")
    elif case == "private-key":
        docs.document(path, jwks={"keys": [{"kty": "EC", "crv": "P-256", "x": "a", "y": "b", "d": "c"}]})
    elif case.endswith("-redirect"):
        bad = {
            "http-redirect": "http://app.example/callback",
            "javascript-redirect": "javascript:alert(1)//",
            "malformed-redirect": "https://[::1/callback",
            "bad-port-redirect": "https://app.example:99999/callback",
        }[case]
        # The redirect URI asked for is a good one: a document listing a bad one is refused whole.
        docs.document(path, redirect_uris=[LOOPBACK_REDIRECT, bad])
    elif case == "not-json":
        docs.routes[path] = (200, {}, b"<html>hello</html>")
    before = clients_count(c)
    r = authorize(web, docs.base + path)
    assert r.status_code == 400, r.text
    assert "authorization failed: " in r.text and why in r.text
    assert clients_count(c) == before


def test_it_refuses_a_redirect_uri_the_document_does_not_list(c, web, docs):
    client_id = docs.document("/listed.json")
    r = authorize(web, client_id, "https://evil.example/cb")
    assert r.status_code == 400
    assert "authorization failed: redirect_uri https://evil.example/cb is not registered" in r.text


def test_it_gives_up_on_a_document_slower_than_5_seconds(c, web, docs):
    docs.document("/slow.json")
    docs.slow.add("/slow.json")
    started = time.monotonic()
    r = authorize(web, docs.base + "/slow.json")
    assert time.monotonic() - started < 9  # 5 s and the rest of the request, not the 10 s it would take
    assert r.status_code == 400
    assert "longer than 5 seconds" in r.text


def test_it_refuses_a_private_address_without_the_flag(module_console, docs):
    strict = module_console(None, start=False, SSL_CERT_FILE=docs.ca)
    strict.env["AGENVOY_PUBLIC_URL"] = strict.url
    module_console.start(strict)
    client_id = docs.document("/private.json")
    session = signed_in(strict, "erin", "erin-pw-123")
    try:
        r = authorize(session, client_id)
    finally:
        session.close()
    assert r.status_code == 400
    assert "resolves to a private address" in r.text
    assert "/private.json" not in docs.hits  # refused before any connection was made


def test_it_marks_a_return_host_that_is_not_the_clients_own(c, web, docs):
    client_id = docs.document("/elsewhere.json", redirect_uris=["https://elsewhere.example/cb"])
    r = authorize(web, client_id, "https://elsewhere.example/cb")
    assert r.status_code == 302, r.text
    page = web.get(r.headers["location"])
    assert "elsewhere.example" in page.text and "not the client's own host" in page.text
    same = docs.document("/same-host.json", redirect_uris=[docs.base + "/cb"])
    page = web.get(authorize(web, same, docs.base + "/cb").headers["location"])
    assert "not the client" not in page.text


def test_it_keeps_a_document_5_minutes_and_a_failure_1_minute(c, web, docs):
    client_id = docs.document("/kept.json")
    assert authorize(web, client_id).status_code == 302
    fetched = docs.hits.count("/kept.json")
    docs.routes["/kept.json"] = (500, {}, b"{}")  # changed at its host: the kept copy still serves
    assert authorize(web, client_id).status_code == 302
    assert docs.hits.count("/kept.json") == fetched
    late = docs.base + "/late.json"
    assert authorize(web, late).status_code == 400  # not there yet
    docs.document("/late.json")
    r = authorize(web, late)  # the failure is kept for a minute: not fetched again
    assert r.status_code == 400 and "answered HTTP 404" in r.text
    assert docs.hits.count("/late.json") == 1


def test_it_drops_documents_nobody_allowed_or_used_within_24_hours(c, web, docs):
    import sqlite3

    old = docs.document("/unused.json")
    assert authorize(web, old).status_code == 302
    rows = "select count(*) from mcpcore_appclient where client_id = ?"
    assert db_rows(c, rows, old) == [(1,)]
    conn = sqlite3.connect(c.data / "db.sqlite3", timeout=20)
    with conn:
        conn.execute(
            "update mcpcore_appclient set fetched_at = '2000-01-01 00:00:00' where client_id = ?", (old,)
        )
    conn.close()
    assert authorize(web, docs.document("/newer.json")).status_code == 302
    assert db_rows(c, rows, old) == [(0,)]


def test_it_gives_up_on_headers_that_never_end_within_5_seconds(c, web, docs):
    docs.drip.add("/drip.json")
    started = time.monotonic()
    r = authorize(web, docs.base + "/drip.json")
    assert time.monotonic() - started < 9
    assert r.status_code == 400
    assert "longer than 5 seconds" in r.text


def test_it_bounds_document_fetches_so_slow_hosts_do_not_delay_other_clients(module_console, tmp_path):
    """Strangers' slow document hosts hold at most two fetches per client address and eight in
    all; the rest are refused at once, and another client's fresh document is fetched at once."""
    docs = Documents(tmp_path)
    console = module_console(
        None,
        start=False,
        SSL_CERT_FILE=docs.ca,
        AGENVOY_OAUTH_ALLOW_PRIVATE="1",
        AGENVOY_TRUSTED_PROXIES="127.0.0.1/32",
    )
    console.env["AGENVOY_PUBLIC_URL"] = console.url
    module_console.start(console)
    _, challenge = pkce()

    def authorize_from(address: str, client_id: str) -> httpx2.Response:
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": LOOPBACK_REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "s",
        }
        return httpx2.get(
            console.url + "/authorize",
            params=params,
            headers={"X-Forwarded-For": address},
            follow_redirects=False,
            timeout=30,
        )

    def hold(count: int, addresses: list[str]) -> list[tuple[str, str]]:
        asked = []
        for i in range(count):
            path = f"/hold-{len(docs.slow)}.json"
            docs.slow.add(path)
            asked.append((addresses[i % len(addresses)], docs.document(path)))
        return asked

    def refused_at_once(futures: list, how_many: int) -> list:
        done = []
        for f in concurrent.futures.as_completed(futures, timeout=4):
            done.append(f)
            if len(done) == how_many:
                break
        for f in done:
            r = f.result()
            assert r.status_code == 400 and "try again" in r.text, r.text
        return done

    def held(n: int) -> None:
        with docs.counted:
            assert docs.counted.wait_for(lambda: docs.held == n, timeout=10), docs.held

    try:
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            # Three strangers ask for four slow documents each: two each are fetched.
            asked = hold(12, ["203.0.113.1", "203.0.113.2", "203.0.113.3"])
            first = [pool.submit(authorize_from, address, client_id) for address, client_id in asked]
            refused = refused_at_once(first, 6)
            held(6)
            # Another client's document, asked for from another address, is fetched at once.
            fresh = docs.document("/fresh.json")
            started = time.monotonic()
            r = authorize_from("198.51.100.7", fresh)
            took = time.monotonic() - started
            assert r.status_code == 302 and r.headers["location"].startswith(console.url + "/apps/allow/")
            assert took < 3, took  # not behind the held fetches (5 s each)
            # Five more strangers, one slow document each: eight fetches in flight at most.
            more = hold(5, [f"203.0.113.{i}" for i in range(10, 15)])
            second = [pool.submit(authorize_from, address, client_id) for address, client_id in more]
            refused += refused_at_once(second, 3)
            held(8)
            assert docs.most_held == 8
            docs.release.set()
            for f in first + second:
                if f not in refused:
                    assert f.result(timeout=15).status_code == 302
    finally:
        docs.close()
