"""Who an app is (SPEC 21.2): a client registered through `POST /register` (RFC 7591), or one
whose `client_id` is an `https` URL naming its Client ID Metadata Document, fetched here with
the limits of SPEC 21.2 (5 s, 16 KiB, one redirect to `https`, public addresses only, checked
on the socket's own connection so a name can't resolve one way when checked and another when
used).

Sync: the database functions run in a database job (`mcpcore.db`); `fetch_document` does
network I/O and runs on the fetches' own threads (`start_fetch`, never in a database job)."""

import collections
import datetime
import functools
import http.client
import ipaddress
import json
import os
import socket
import ssl
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urljoin, urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import AnyUrl

from ..models import AppClient
from . import upstream

NAME_MOST = 200
UNALLOWED_KEEP = datetime.timedelta(hours=24)
UNALLOWED_MOST = 100
IN_USE = datetime.timedelta(minutes=10)  # the life of a request on the `Allow an app` page
REGISTRATIONS_PER_HOUR = 20
DOCUMENT_SECONDS = 5.0
DOCUMENT_MOST = 16 * 1024
DOCUMENT_KEEP = datetime.timedelta(minutes=5)
FAILURE_KEEP = 60.0
DOCUMENTS_MOST = 1000  # unallowed documents kept (fetched within 24 hours), the oldest dropped first
FETCH_THREADS = 8  # the fetches' own threads, and the most in flight at once
FETCHES_PER_ADDRESS = 2  # in flight for the requests of one client address
LOOPBACK_HOSTS = ("127.0.0.1", "[::1]", "localhost")
AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")


class ClientError(Exception):
    """A registration or a document refused: `error` is the OAuth error code."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


class Busy(ClientError):
    """No fetch started: too many in flight. Says nothing about the document (not kept as its
    failure)."""


# --- redirect URIs -------------------------------------------------------------------------------


def redirect_problem(uri: str) -> str | None:
    """Why a redirect URI may not be registered (SPEC 21.2), or None: `https`, `http` on a
    loopback host, or a private-use scheme with a dot in it; never a fragment."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname
    except ValueError:
        return f"{uri!r} is not a URL"
    if "#" in uri:
        return f"{uri!r} has a fragment"
    try:
        AnyUrl(uri)  # what the SDK's handlers will parse it with
    except ValueError:
        return f"{uri!r} is not a URL"
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and _loopback(parts.netloc):
        return None
    # A private-use scheme (RFC 8252 7.1) with a dot in it: reverse-DNS (`com.example.app:/cb`)
    # or a domain after it (`cursor://anysphere.cursor-mcp/oauth/callback`).
    if parts.scheme in STANDARD_SCHEMES or not parts.scheme:
        return f"{uri!r} must be https, http on a loopback host, or a private-use scheme with a dot in it"
    if "." in parts.scheme or (host and "." in host and not _is_address(host)):
        return None
    return f"{uri!r} must be https, http on a loopback host, or a private-use scheme with a dot in it"


# Schemes with a meaning of their own: never a private-use scheme (RFC 8252 7.1).
STANDARD_SCHEMES = ("http", "https", "ftp", "file", "ws", "wss", "data", "javascript", "mailto", "blob")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _loopback(netloc: str) -> bool:
    host = netloc.rpartition("@")[2]
    if host.startswith("["):
        host = host[: host.find("]") + 1]
    else:
        host = host.partition(":")[0]
    return host.lower() in LOOPBACK_HOSTS


def _without_port(uri: str) -> tuple:
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2]
    host = host[: host.find("]") + 1] if host.startswith("[") else host.partition(":")[0]
    return (parts.scheme, host.lower(), parts.path, parts.query)


def redirect_matches(registered: str, asked: str) -> bool:
    """Loopback redirect URIs match with any port (RFC 8252 7.3); every other one exactly."""
    if registered == asked:
        return True
    try:
        loop = urlsplit(registered).scheme == "http" and _loopback(urlsplit(registered).netloc)
        return loop and urlsplit(asked).scheme == "http" and _without_port(registered) == _without_port(asked)
    except ValueError:
        return False


def registered_redirect(client: AppClient, asked: str | None) -> str | None:
    """The redirect URI to use for `asked` (None: the client's only one), or None when it is
    not one the client registered."""
    if asked is None:
        return client.redirect_uris[0] if len(client.redirect_uris) == 1 else None
    return asked if any(redirect_matches(r, asked) for r in client.redirect_uris) else None


# --- dynamic registration ----------------------------------------------------------------------


def register(metadata: dict, secret: str | None, address: str) -> tuple[AppClient, str | None]:
    """Keep a client registered through `POST /register` with `client_id` from `metadata`;
    returns the row and its secret. A public registration equal to one no person allowed yet
    (same name and redirect URIs) returns that client instead; a confidential one is always
    new (a secret is never handed out twice). Refuses the 21st new client of `address` in an
    hour (`too_many_registrations`). Drops clients nobody allowed within 24 hours and keeps at
    most 100 of them, the oldest going first (never one a person has on the `Allow an app`
    page)."""
    uris = [str(u) for u in metadata.get("redirect_uris") or []]
    if not uris:
        raise ClientError("invalid_redirect_uri", "redirect_uris must name at least one URI")
    for uri in uris:
        problem = redirect_problem(uri)
        if problem:
            raise ClientError("invalid_redirect_uri", problem)
    name = (metadata.get("client_name") or "")[:NAME_MOST]
    method = metadata.get("token_endpoint_auth_method") or "client_secret_post"
    now = timezone.now()
    with transaction.atomic():
        AppClient.objects.filter(
            document=False, allowed_at__isnull=True, created_at__lt=now - UNALLOWED_KEEP
        ).delete()
        if method == "none":
            same = (
                AppClient.objects.filter(
                    document=False, allowed_at__isnull=True, name=name, auth_method="none", redirect_uris=uris
                )
                .order_by("created_at")
                .first()
            )
            if same is not None:
                return same, None
        # Counted in the transaction that writes: registrations sent at once from one address
        # cannot all pass a count read before any of them was kept.
        if not registrations_left(address):
            raise ClientError("too_many_registrations", "at most 20 registrations an hour per client address")
        row = AppClient.objects.create(
            client_id=metadata["client_id"],
            name=name,
            redirect_uris=uris,
            auth_method=method,
            secret=upstream.seal(secret) if secret else "",
            address=address[:64],
        )
        unallowed = AppClient.objects.filter(document=False, allowed_at__isnull=True)
        stale = list(unallowed.order_by("-created_at", "-pk").values_list("pk", flat=True)[UNALLOWED_MOST:])
        if stale:
            # Never one a person has on the `Allow an app` page: strangers' registrations must
            # not make a real app's sign-in fail halfway (for a while there may be more).
            in_use = unallowed.filter(used_at__gte=now - IN_USE)
            AppClient.objects.filter(pk__in=stale).exclude(pk__in=in_use.values("pk")).delete()
    return row, secret


def note_use(client: AppClient) -> None:
    """A person has this client, nobody allowed yet, on the `Allow an app` page: it is not
    dropped for strangers' registrations while the page's request lasts."""
    if client.allowed_at is None and not client.document:
        AppClient.objects.filter(pk=client.pk).update(used_at=timezone.now())


def registrations_left(address: str) -> bool:
    """Whether `address` may register one more client this hour (SPEC 21.2: 20 an hour)."""
    since = timezone.now() - datetime.timedelta(hours=1)
    return AppClient.objects.filter(address=address, created_at__gte=since).count() < REGISTRATIONS_PER_HOUR


def secret_of(client: AppClient) -> str | None:
    return upstream.unseal(client.secret) if client.secret else None


# --- Client ID Metadata Documents --------------------------------------------------------------


def is_document_id(client_id: str) -> bool:
    try:
        parts = urlsplit(client_id)
    except ValueError:
        return False
    return parts.scheme == "https" and bool(parts.hostname) and parts.path not in ("", "/")


def known(client_id: str) -> tuple[AppClient | None, bool]:
    """The client row and whether it must be fetched (again): a document older than 5 minutes
    or never fetched."""
    row = AppClient.objects.filter(client_id=client_id).first()
    if not is_document_id(client_id):
        return row, False
    stale = row is None or row.fetched_at is None or timezone.now() - row.fetched_at > DOCUMENT_KEEP
    return row, stale


def keep_document(client_id: str, document: dict) -> AppClient:
    """Store (or refresh) the client a fetched, checked document describes. Drops the documents
    nobody allowed that were not used (fetched) within 24 hours, and keeps at most 1000 of
    them: anyone can make the console fetch one."""
    now = timezone.now()
    unallowed = AppClient.objects.filter(document=True, allowed_at__isnull=True)
    unallowed.filter(fetched_at__lt=now - UNALLOWED_KEEP).delete()
    stale = list(
        unallowed.exclude(client_id=client_id)
        .order_by("-fetched_at")
        .values_list("pk", flat=True)[DOCUMENTS_MOST - 1 :]
    )
    if stale:
        AppClient.objects.filter(pk__in=stale).delete()
    row, _ = AppClient.objects.update_or_create(
        client_id=client_id,
        defaults={
            "name": str(document.get("client_name") or "")[:NAME_MOST],
            "redirect_uris": [str(u) for u in document.get("redirect_uris") or []],
            "auth_method": "none",
            "secret": "",
            "document": True,
            "fetched_at": now,
        },
    )
    return row


_failures: dict[str, tuple[float, str]] = {}
_failures_lock = threading.Lock()


def failed_recently(client_id: str) -> str | None:
    """Why fetching this document failed within the last minute (failures are kept 1 minute)."""
    with _failures_lock:
        hit = _failures.get(client_id)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        _failures.pop(client_id, None)
    return None


def note_failure(client_id: str, why: str) -> None:
    with _failures_lock:
        if len(_failures) > 10_000:
            _failures.clear()
        _failures[client_id] = (time.monotonic() + FAILURE_KEEP, why)


# Fetches run on threads of their own, never the event loop's default pool (which the loop's
# name lookups share), and never queue: a request that would wait behind slow hosts is refused
# at once. A client address may hold only a few of them, so one stranger's slow hosts cannot
# take every thread; the same document asked for twice is fetched once.
_pool: ThreadPoolExecutor | None = None
_in_flight: dict[str, Future] = {}
_by_address: collections.Counter[str] = collections.Counter()
_fetch_lock = threading.Lock()


def start_fetch(client_id: str, address: str) -> Future:
    """`fetch_document(client_id)` on the fetches' own threads, for a request from `address`:
    the fetch already in flight for it, else a new one; `Busy` when FETCH_THREADS are in flight
    or FETCHES_PER_ADDRESS for `address`."""
    global _pool
    with _fetch_lock:
        running = _in_flight.get(client_id)
        if running is not None:
            return running
        if len(_in_flight) >= FETCH_THREADS or _by_address[address] >= FETCHES_PER_ADDRESS:
            raise Busy("invalid_client", "too many client metadata documents are being fetched; try again")
        if _pool is None:
            _pool = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="agenvoy-cimd")
        future = _pool.submit(fetch_document, client_id)
        _in_flight[client_id] = future
        _by_address[address] += 1
    future.add_done_callback(functools.partial(_fetched, client_id, address))
    return future


def _fetched(client_id: str, address: str, future: Future) -> None:
    with _fetch_lock:
        if _in_flight.get(client_id) is future:
            del _in_flight[client_id]
        _by_address[address] -= 1
        if _by_address[address] <= 0:
            del _by_address[address]


def check_document(client_id: str, document: object) -> dict:
    """A document's content checked (SPEC 21.2): a JSON object naming itself, listing redirect
    URIs that a registration could list, public (auth method `none`), with no secret and no
    private key."""
    if not isinstance(document, dict):
        raise ClientError("invalid_client", "the client metadata document is not a JSON object")
    if document.get("client_id") != client_id:
        raise ClientError("invalid_client", "the client metadata document names another client_id")
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise ClientError("invalid_client", "the client metadata document carries a secret")
    keys = (document.get("jwks") or {}).get("keys") if isinstance(document.get("jwks"), dict) else None
    if isinstance(keys, list) and any(isinstance(k, dict) and "d" in k for k in keys):
        raise ClientError("invalid_client", "the client metadata document carries a private key")
    if document.get("token_endpoint_auth_method", "none") != "none":
        raise ClientError(
            "invalid_client", "a client metadata document may only use token_endpoint_auth_method none"
        )
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        raise ClientError("invalid_client", "the client metadata document lists no redirect_uris")
    for uri in uris:  # the rules of a registration's (SPEC 21.2)
        problem = redirect_problem(uri)
        if problem:
            raise ClientError("invalid_client", f"the client metadata document's redirect_uris: {problem}")
    return document


def fetch_document(client_id: str) -> dict:
    """GET the document at `client_id` within 5 seconds and 16 KiB, following at most one
    redirect (to `https`), connecting only to public addresses unless
    AGENVOY_OAUTH_ALLOW_PRIVATE; the content checked (`check_document`)."""
    deadline = time.monotonic() + DOCUMENT_SECONDS
    url = client_id
    for hop in range(2):
        status, location, body = _get(url, deadline)
        if status in (301, 302, 303, 307, 308):
            if hop == 1 or not location:
                raise ClientError("invalid_client", "the client metadata document redirects more than once")
            url = urljoin(url, location)
            if urlsplit(url).scheme != "https":
                raise ClientError(
                    "invalid_client", "the client metadata document redirects to a non-https address"
                )
            continue
        if status != 200:
            raise ClientError("invalid_client", f"the client metadata document answered HTTP {status}")
        try:
            document = json.loads(body)
        except ValueError:
            raise ClientError("invalid_client", "the client metadata document is not JSON") from None
        return check_document(client_id, document)
    raise ClientError("invalid_client", "the client metadata document redirects more than once")


def _context() -> ssl.SSLContext:
    """The system's certificate store, and the file SSL_CERT_FILE names as well."""
    context = ssl.create_default_context()
    paths = ssl.get_default_verify_paths()
    for cafile in (paths.openssl_cafile, os.environ.get("SSL_CERT_FILE")):
        if cafile and os.path.isfile(cafile):
            context.load_verify_locations(cafile=cafile)
    return context


def public_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _resolve(host: str, port: int, timeout: float) -> list[tuple]:
    """Every address `host` resolves to, each checked public (unless allowed private)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise ClientError("invalid_client", f"{host} does not resolve")
    if not settings.AGENVOY_OAUTH_ALLOW_PRIVATE:
        for info in infos:
            if not public_address(str(info[4][0])):
                raise ClientError("invalid_client", f"{host} resolves to a private address")
    return infos


class _CheckedConnection(http.client.HTTPSConnection):
    """An HTTPS connection whose socket goes only to addresses checked when it connects."""

    def connect(self) -> None:
        failure: OSError | None = None
        for family, kind, proto, _name, address in _resolve(
            self.host, self.port, self.timeout or DOCUMENT_SECONDS
        ):
            sock = socket.socket(family, kind, proto)
            sock.settimeout(self.timeout)
            try:
                sock.connect(address)
            except OSError as exc:
                sock.close()
                failure = exc
                continue
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]
            return
        raise failure or OSError(f"cannot connect to {self.host}")


def _get(url: str, deadline: float) -> tuple[int, str | None, bytes]:
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise ClientError("invalid_client", "a client metadata document must be fetched over https")
    left = deadline - time.monotonic()
    conn = _CheckedConnection(parts.hostname, parts.port or 443, timeout=max(left, 0.01), context=_context())
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # A server that sends its headers a byte at a time never times one read out: at the
    # deadline the socket is shut, whatever is being read.
    late = threading.Event()
    watchdog = threading.Timer(max(left, 0.01), _cut, (conn, late))
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request("GET", path, headers={"Accept": "application/json", "User-Agent": "agenvoy-console"})
        response = conn.getresponse()
        chunks, size = [], 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientError("invalid_client", "the client metadata document took longer than 5 seconds")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = response.read1(4096) if response.status == 200 else b""
            if not chunk:
                break
            size += len(chunk)
            if size > DOCUMENT_MOST:
                raise ClientError("invalid_client", "the client metadata document is larger than 16 KiB")
            chunks.append(chunk)
        return response.status, response.getheader("Location"), b"".join(chunks)
    except TimeoutError:
        raise ClientError(
            "invalid_client", "the client metadata document took longer than 5 seconds"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        if late.is_set():
            raise ClientError(
                "invalid_client", "the client metadata document took longer than 5 seconds"
            ) from None
        raise ClientError(
            "invalid_client", f"the client metadata document could not be fetched: {exc}"
        ) from None
    finally:
        watchdog.cancel()
        conn.close()


def _cut(conn: http.client.HTTPSConnection, late: threading.Event) -> None:
    late.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
