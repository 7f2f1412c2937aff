"""Settings for the Agenvoy MCP console: every knob is an environment variable (SPEC 11).

Each variable has a default that works on a fresh machine; a bad value stops start-up with
ImproperlyConfigured naming the variable.
"""

import datetime
import ipaddress
import logging
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from mcpcore.choices import PersonRole
from mcpcore.rules import rate

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("AGENVOY_DATA_DIR", BASE_DIR / "data"))
if not DATA_DIR.is_dir():
    # It holds the database and the secret key: owner only (SPEC 12.3).
    try:
        DATA_DIR.parent.mkdir(parents=True, exist_ok=True)
        DATA_DIR.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"AGENVOY_DATA_DIR must be a folder the console can create, got {str(DATA_DIR)!r}: {exc.strerror}"
        ) from None


def _private_file(path: Path) -> Path:
    """Create `path` empty and 0600 if it is missing, so what fills it later (SQLite, and
    SQLite's -wal/-shm files, which copy the database's mode) is owner-only too."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    return path


def _number(name: str, default, parse, what: str, ok, bound: str):
    """The variable `name` read with `parse` (else `default` when unset or blank); a value that
    does not parse stops start-up saying it must be `what`, one that fails `ok`, `bound`."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, got {raw!r}") from None
    if not ok(value):
        raise ImproperlyConfigured(f"{name} must be {bound}, got {raw!r}")
    return value


def _seconds(name: str, default: float) -> float:
    finite = lambda v: v >= 1 and v != float("inf")
    return _number(name, float(default), float, "a number of seconds", finite, "at least 1 second")


def _positive_int(name: str, default: int) -> int:
    return _number(name, default, int, "a whole number", lambda v: v >= 1, "at least 1")


def _days(name: str, default: int) -> int:
    """A number of days, a whole number from 0 (0: keep everything)."""
    return _number(
        name, default, int, "a whole number of days", lambda v: v >= 0, "0 (keep everything) or more days"
    )


def _networks(name: str) -> tuple:
    """Comma-separated CIDRs (a bare address is a network of one) as ip_network objects."""
    raw = os.environ.get(name, "")
    out = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must be comma-separated CIDRs like 10.0.0.0/8, got {part!r}"
            ) from None
    return tuple(out)


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def _secret_key() -> str:
    """DJANGO_SECRET_KEY, or one generated on first run and kept in the data folder."""
    key = os.environ.get("DJANGO_SECRET_KEY")
    if key:
        return key
    path = DATA_DIR / "secret_key"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(secrets.token_urlsafe(50))
        os.replace(tmp, path)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = _bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [
    h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h.strip()
]
for _host in ALLOWED_HOSTS:
    # A URL here (`https://console.example/`) would match no request: say so at start-up.
    if "/" in _host or any(c.isspace() for c in _host):
        raise ImproperlyConfigured(
            f"DJANGO_ALLOWED_HOSTS entries must be host names like console.example, got {_host!r}"
        )

# --- behind a TLS proxy (docs/deploy.md) -------------------------------------------------------
# The console's address as people reach it (SPEC 15); https there means secure cookies.
AGENVOY_PUBLIC_URL = os.environ.get("AGENVOY_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")


def _public_origin(url: str) -> tuple[str, str]:
    """(origin, host) of AGENVOY_PUBLIC_URL; anything but an http(s) address stops start-up."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(f"AGENVOY_PUBLIC_URL must be an http:// or https:// address, got {url!r}")
    return f"{parts.scheme}://{parts.netloc}", parts.hostname


def _proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto` (meaning `X-Forwarded-Proto: https`) or `Header: value` into
    Django's (META key, value). Set it only when a proxy in front always sets that header."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    header, _, value = raw.replace("=", ":", 1).partition(":")
    header, value = header.strip(), value.strip() or "https"
    if not header or not all(c.isalnum() or c == "-" for c in header):
        raise ImproperlyConfigured(f"{name} must be a header name like X-Forwarded-Proto, got {raw!r}")
    return "HTTP_" + header.upper().replace("-", "_"), value


PUBLIC_ORIGIN, _PUBLIC_HOST = _public_origin(AGENVOY_PUBLIC_URL)
if _PUBLIC_HOST not in ALLOWED_HOSTS and "*" not in ALLOWED_HOSTS:
    ALLOWED_HOSTS.append(_PUBLIC_HOST)
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", PUBLIC_ORIGIN).split(",") if o.strip()
]
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise ImproperlyConfigured(
            f"DJANGO_CSRF_TRUSTED_ORIGINS entries must start with http:// or https://, got {_origin!r}"
        )
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = AGENVOY_PUBLIC_URL.startswith("https://")
# SPEC 22.3. HSTS for an https public URL on every page, also when the TLS proxy does not say
# the request came over https (mcpcore.web.headers); no subdomains, no preload: the console
# does not own its domain's other hosts.
SECURE_HSTS_SECONDS = 31536000 if SESSION_COOKIE_SECURE else 0
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Pages load only the console's own scripts, styles and images (`static/`): no inline script,
# style block or event-handler attribute in any template (tests/web/test_headers.py), and htmx
# is told not to eval (base.html). `data:` images for the QR codes of second factors. No
# `form-action`: Chromium applies it to a form's redirect, and `Authorize` posts and is then
# sent to the server's authorization server.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

AGENVOY_HOME = Path(os.path.expanduser(os.environ.get("AGENVOY_HOME", "~/.config/agenvoy"))).resolve()
if AGENVOY_HOME.exists() and not AGENVOY_HOME.is_dir():
    raise ImproperlyConfigured(f"AGENVOY_HOME must be a folder, got the file {str(AGENVOY_HOME)!r}")
AGENVOY_POLL_SECONDS = _seconds("AGENVOY_POLL_SECONDS", 60)
AGENVOY_LIST_TIMEOUT = _seconds("AGENVOY_LIST_TIMEOUT", 30)
AGENVOY_CONNECT_TIMEOUT = _seconds("AGENVOY_CONNECT_TIMEOUT", 30)
AGENVOY_CALL_TIMEOUT = _seconds("AGENVOY_CALL_TIMEOUT", 60)
AGENVOY_CALL_MAX_SECONDS = _seconds("AGENVOY_CALL_MAX_SECONDS", 600)
AGENVOY_CONFIRM_TIMEOUT = _seconds("AGENVOY_CONFIRM_TIMEOUT", 300)
AGENVOY_RESULT_CAP = _positive_int("AGENVOY_RESULT_CAP", 1_048_576)
AGENVOY_HISTORY_MAX_BYTES = _positive_int("AGENVOY_HISTORY_MAX_BYTES", 8 * 1_048_576)
AGENVOY_LEASE_SECONDS = _seconds("AGENVOY_LEASE_SECONDS", 10)
AGENVOY_PING_SECONDS = _seconds("AGENVOY_PING_SECONDS", 10)
# Pending confirmations one token may have at once (SPEC 12.2): one more answers 429.
AGENVOY_MAX_PENDING = _positive_int("AGENVOY_MAX_PENDING", 100)
# Retention (SPEC 18.1): ended calls older than this many days are deleted, results older than
# AGENVOY_RESULT_DAYS cut to their head; 0 keeps everything.
AGENVOY_HISTORY_DAYS = _days("AGENVOY_HISTORY_DAYS", 90)
AGENVOY_RESULT_DAYS = _days("AGENVOY_RESULT_DAYS", 30)
# The audit trail (SPEC 22.2) is kept this many days, pruned like the calls; 0 keeps everything.
AGENVOY_AUDIT_DAYS = _days("AGENVOY_AUDIT_DAYS", 400)
# Client addresses that may read /metrics without a token (SPEC 18.3).
AGENVOY_METRICS_ALLOW = _networks("AGENVOY_METRICS_ALLOW")
# Apps that sign in (SPEC 21): their access tokens' lifetime, 60 s to a day; and whether a
# Client ID Metadata Document may be fetched from a private address (tests on loopback).
AGENVOY_OAUTH_ACCESS_SECONDS = _number(
    "AGENVOY_OAUTH_ACCESS_SECONDS",
    3600,
    int,
    "a whole number of seconds",
    lambda v: 60 <= v <= 86400,
    "from 60 to 86400 seconds",
)
AGENVOY_OAUTH_ALLOW_PRIVATE = _bool("AGENVOY_OAUTH_ALLOW_PRIVATE", False)
# Dynamic client registration (`POST /register`); off, Client ID Metadata Documents remain.
AGENVOY_OAUTH_REGISTRATION = _bool("AGENVOY_OAUTH_REGISTRATION", True)
# SPEC 25.2: an identical call (same tool and arguments) of one token past `<n>` within the
# window (`<n>/<unit>` or `<n>/<k><unit>`) waits for a person; `0` turns it off. `limits` holds
# the counts (mcpcore.calls.guards).
AGENVOY_REPEAT_LIMIT = os.environ.get("AGENVOY_REPEAT_LIMIT", "").strip() or "10/5m"
if AGENVOY_REPEAT_LIMIT == "0":
    AGENVOY_REPEAT_LIMIT = ""
elif rate(AGENVOY_REPEAT_LIMIT, multiples=True) is None:
    raise ImproperlyConfigured(
        "AGENVOY_REPEAT_LIMIT must be <n>/<window> like 10/5m (n from 1; window s, m, h or d, "
        f"optionally after a number) or 0 for off, got {AGENVOY_REPEAT_LIMIT!r}"
    )
# SPEC 26: `all` runs every stdio server under bubblewrap unless its entry says "sandbox": false.
AGENVOY_SANDBOX = os.environ.get("AGENVOY_SANDBOX", "").strip().lower()
if AGENVOY_SANDBOX not in ("", "all"):
    raise ImproperlyConfigured(f"AGENVOY_SANDBOX must be all or left unset, got {AGENVOY_SANDBOX!r}")
if AGENVOY_CALL_MAX_SECONDS < AGENVOY_CALL_TIMEOUT:
    raise ImproperlyConfigured("AGENVOY_CALL_MAX_SECONDS must not be below AGENVOY_CALL_TIMEOUT")


def _scale(name: str) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else 1.0
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if not 0 < value <= 1:
        raise ImproperlyConfigured(f"{name} must be above 0 and at most 1, got {raw!r}")
    return value


# Test-only: shrinks the webhook retry schedule (5 s, 30 s, 2 min, 10 min, 1 h) by this factor.
AGENVOY_WEBHOOK_RETRY_SCALE = _scale("AGENVOY_WEBHOOK_RETRY_SCALE")

INSTALLED_APPS = [
    # First, so its `runserver` (Daphne plus the supervisor) wins over daphne's.
    "mcpcore",
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",  # allauth's passkey list
    "channels",
    "django_htmx",
    # Sign-in (SPEC 22.1): failed attempts limited by axes; allauth's sign-in with its second
    # factors (TOTP, passkeys, recovery codes) and each person's sessions.
    "axes",
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "allauth.usersessions",
    # Single sign-on (SPEC 23.2): one OpenID Connect app, id `sso`.
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "mcpcore.web.headers.StrictTransport",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "allauth.usersessions.middleware.UserSessionsMiddleware",
    "mcpcore.web.signin.RequireSecondFactor",
    # After the hold above (a held person is sent to Account, which every role may use).
    "mcpcore.web.roles.RoleCheck",
    # Last, as its documentation asks: it turns a lockout into the sign-in page's 429.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "agenvoy_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "mcpcore.web.context_processors.pending_badge",
                "mcpcore.web.context_processors.sign_on",
            ],
        },
    },
]
WSGI_APPLICATION = None
ASGI_APPLICATION = "agenvoy_site.asgi.application"


# WAL alone still gives "database is locked" with several writers; IMMEDIATE transactions plus
# a busy timeout do not (STACK.md). They apply however the SQLite database is named.
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL", "").strip()
    config: dict[str, Any]
    if not url:
        config = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _private_file(DATA_DIR / "db.sqlite3"),
            "TEST": {"NAME": DATA_DIR / "test_db.sqlite3"},
        }
    else:
        try:
            config = dict(dj_database_url.parse(url, conn_max_age=0))
        except Exception as exc:
            raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None
        if not config.get("NAME"):
            raise ImproperlyConfigured("DATABASE_URL names no database (e.g. postgres://user@host/agenvoy)")
    if config["ENGINE"].endswith("sqlite3"):
        config["OPTIONS"] = {**SQLITE_OPTIONS, **config.get("OPTIONS", {})}
        name = str(config.get("NAME") or "")
        if name and name != ":memory:" and not name.startswith("file:") and Path(name).parent.is_dir():
            _private_file(Path(name))  # owner-only, however it is named (SPEC 12.3, 18.1)
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "").strip()
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(
        f"REDIS_URL must be a redis://, rediss:// or unix:// address, got {REDIS_URL!r}"
    )
if REDIS_URL:
    # redis-py 8 defaults to a 5 s socket timeout, equal to channels-redis's blocking read,
    # which kills idle workers: give the socket more room (STACK.md).
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "mcpcore.channellayer.InMemoryChannelLayer"}}

# One cache shared by every process (web processes, `serve`), in the database they already
# share: allauth keeps there the authenticator-app codes already used (each signs in once, on
# whichever process) and its rate limits. Its table is made by migration 0023.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "mcpcore_cache",
        "OPTIONS": {"MAX_ENTRIES": 100_000},  # culling early would forget a used code
    }
}

# The one-time link where a person added on the People page sets a password (SPEC 23.1), and
# a mailed password reset: Django's token, good for 24 hours and spent once a password is set.
PASSWORD_RESET_TIMEOUT = 24 * 3600
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "servers"
LOGOUT_REDIRECT_URL = "login"

# --- signing in (SPEC 22.1; mcpcore.web.signin) ------------------------------------------------
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: a locked pair never reaches a password check
    "allauth.account.auth_backends.AuthenticationBackend",
]
AGENVOY_SIGNIN_ATTEMPTS = _positive_int("AGENVOY_SIGNIN_ATTEMPTS", 5)
AGENVOY_SIGNIN_LOCK_MINUTES = _positive_int("AGENVOY_SIGNIN_LOCK_MINUTES", 15)
# Proxies whose X-Forwarded-For names the client (CIDRs; default none: the peer is the client).
AGENVOY_TRUSTED_PROXIES = _networks("AGENVOY_TRUSTED_PROXIES")
AGENVOY_REQUIRE_2FA = _bool("AGENVOY_REQUIRE_2FA", False)
# 0: people sign in through the identity provider only (SPEC 23.2): no password form, and a
# password posted is refused with 403.
AGENVOY_PASSWORD_SIGNIN = _bool("AGENVOY_PASSWORD_SIGNIN", True)
AXES_FAILURE_LIMIT = AGENVOY_SIGNIN_ATTEMPTS
AXES_COOLOFF_TIME = datetime.timedelta(minutes=AGENVOY_SIGNIN_LOCK_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_CALLABLE = "mcpcore.web.signin.locked_out"
AXES_CLIENT_IP_CALLABLE = "mcpcore.web.signin.client_address"
AXES_USERNAME_CALLABLE = "mcpcore.web.signin.username_of"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
ACCOUNT_ADAPTER = "mcpcore.web.signin.AccountAdapter"
ACCOUNT_FORMS = {"login": "mcpcore.web.signin.LoginForm"}
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["username*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_SESSION_REMEMBER = True
ACCOUNT_LOGOUT_REDIRECT_URL = "login"
ACCOUNT_REAUTHENTICATION_REQUIRED = False
# allauth's own limits, but not on signing in: axes is the one limit on failed sign-ins
# (above). A password reset mails a person: at most 3 an hour to one mailbox, 20 from one address.
ACCOUNT_RATE_LIMITS = {"login": None, "login_failed": None, "reset_password": "20/h/ip,3/h/key"}
MFA_SUPPORTED_TYPES = ["totp", "webauthn", "recovery_codes"]
MFA_FORMS = {"authenticate": "mcpcore.web.signin.AuthenticateForm"}
MFA_ADAPTER = "mcpcore.web.signin.MFAAdapter"
# With AGENVOY_PASSWORD_SIGNIN=0 people sign in through the provider only (SPEC 23.2): a passkey
# alone would get round it, so passkey sign-in goes with the password (a second factor stays).
MFA_PASSKEY_LOGIN_ENABLED = AGENVOY_PASSWORD_SIGNIN
# Showing the recovery codes, adding or removing a factor: allauth's reauthentication first (the
# password or a factor again, good for ACCOUNT_REAUTHENTICATION_TIMEOUT, 5 minutes), so a
# session left open or taken cannot read the codes or swap the factors.
MFA_REAUTHENTICATION_REQUIRED = True
MFA_TOTP_ISSUER = "Agenvoy MCP console"
MFA_RECOVERY_CODE_COUNT = 10
# WebAuthn over plain http only where browsers allow it at all (localhost, for `make run`).
MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN = not SESSION_COOKIE_SECURE
USERSESSIONS_TRACK_ACTIVITY = True
USERSESSIONS_ADAPTER = "mcpcore.web.signin.UserSessionsAdapter"

# --- single sign-on (SPEC 23.2; mcpcore.web.sso) ------------------------------------------------
# allauth's `openid_connect` provider, one app whose id is `sso`: discovery, the code flow with
# PKCE and state, and the ID token's checks are allauth's. Its discovery is tried at sign-in,
# not here: an identity provider down at start-up is no bad setting.
AGENVOY_OIDC_ISSUER = os.environ.get("AGENVOY_OIDC_ISSUER", "").strip().rstrip("/")
AGENVOY_OIDC_CLIENT_ID = os.environ.get("AGENVOY_OIDC_CLIENT_ID", "").strip()
AGENVOY_OIDC_NAME = os.environ.get("AGENVOY_OIDC_NAME", "").strip() or "SSO"
AGENVOY_OIDC_GROUPS_CLAIM = os.environ.get("AGENVOY_OIDC_GROUPS_CLAIM", "").strip() or "groups"
AGENVOY_OIDC_SCOPES = (os.environ.get("AGENVOY_OIDC_SCOPES", "").strip() or "openid email profile").split()
AGENVOY_OIDC_REDIRECT_URI = f"{AGENVOY_PUBLIC_URL}/accounts/oidc/sso/login/callback/"


def _issuer(name: str, url: str) -> str:
    """An `https` issuer, or `http` on a loopback address (a provider on the same machine)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        parts = None
    host = (parts.hostname or "") if parts else ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts is None or not host or not (parts.scheme == "https" or (parts.scheme == "http" and loopback)):
        raise ImproperlyConfigured(
            f"{name} must be an https:// address (http:// only on loopback), got {url!r}"
        )
    if parts.query or parts.fragment:
        raise ImproperlyConfigured(f"{name} must be the issuer's address without ? or #, got {url!r}")
    return url


def _oidc_roles(name: str) -> list[tuple[str, frozenset[str]]]:
    """`admin:platform;approver:ops,oncall;viewer:*` as [(role, its groups)], highest role first
    (the order a sign-in tries them in); `*` is anyone the provider signs in. Empty: unset."""
    raw = os.environ.get(name, "").strip()
    found: dict[str, frozenset[str]] = {}
    for entry in (e.strip() for e in raw.split(";")):
        if not entry:
            continue
        role, colon, groups = (p.strip() for p in entry.partition(":"))
        names = frozenset(g.strip() for g in groups.split(",") if g.strip())
        if not colon or role not in PersonRole.values or not names or role in found:
            raise ImproperlyConfigured(
                f"{name} must be role:group,group;... with each role (admin, approver, viewer) once, "
                f"e.g. admin:platform;approver:ops,oncall;viewer:*, got {raw!r}"
            )
        found[role] = names
    return [(role, found[role]) for role in PersonRole.values if role in found]


AGENVOY_OIDC_ROLES = _oidc_roles("AGENVOY_OIDC_ROLES")
if AGENVOY_OIDC_ISSUER:
    _issuer("AGENVOY_OIDC_ISSUER", AGENVOY_OIDC_ISSUER)
    if not AGENVOY_OIDC_CLIENT_ID:
        raise ImproperlyConfigured("AGENVOY_OIDC_CLIENT_ID must be set with AGENVOY_OIDC_ISSUER")
elif AGENVOY_OIDC_CLIENT_ID:
    raise ImproperlyConfigured("AGENVOY_OIDC_ISSUER must be set with AGENVOY_OIDC_CLIENT_ID")
if "openid" not in AGENVOY_OIDC_SCOPES:
    raise ImproperlyConfigured(
        f"AGENVOY_OIDC_SCOPES must include openid, got {' '.join(AGENVOY_OIDC_SCOPES)!r}"
    )
if not AGENVOY_PASSWORD_SIGNIN and not AGENVOY_OIDC_ISSUER:
    # Nobody could sign in at all.
    raise ImproperlyConfigured(
        "AGENVOY_PASSWORD_SIGNIN=0 needs AGENVOY_OIDC_ISSUER (else nobody can sign in)"
    )
# allauth builds the redirect URI from the request's host; behind a TLS proxy the request itself
# may say http: the public address's scheme is the one registered at the provider.
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "https" if SESSION_COOKIE_SECURE else "http"
SOCIALACCOUNT_ADAPTER = "mcpcore.web.sso.SocialAccountAdapter"
SOCIALACCOUNT_PROVIDERS: dict = {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": []}}
if AGENVOY_OIDC_ISSUER:
    SOCIALACCOUNT_PROVIDERS["openid_connect"]["APPS"] = [
        {
            "provider_id": "sso",
            "name": AGENVOY_OIDC_NAME,
            "client_id": AGENVOY_OIDC_CLIENT_ID,
            # Empty: a public client (PKCE alone); the secret is read here only, never shown.
            "secret": os.environ.get("AGENVOY_OIDC_CLIENT_SECRET", "").strip(),
            "settings": {
                "server_url": AGENVOY_OIDC_ISSUER,
                "oauth_pkce_enabled": True,
                "scope": AGENVOY_OIDC_SCOPES,
            },
        }
    ]
# Every sign-in through the provider makes or finds the one person of its `sub`: no sign-up
# form, never an existing person found by email (SPEC 23.2), so two people may share an email.
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_QUERY_EMAIL = False
SOCIALACCOUNT_STORE_TOKENS = False
SOCIALACCOUNT_LOGIN_ON_GET = False
ACCOUNT_UNIQUE_EMAIL = False


def _smtp(name: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, user, password) from `smtp://[user:password@]host[:port]`
    (`smtp+tls://`: STARTTLS, `smtps://`: TLS from the start)."""
    bad = ImproperlyConfigured(
        f"{name} must be smtp://, smtp+tls:// or smtps:// [user:password@]host[:port]"
    )  # the value is not repeated: it may hold the password
    try:
        url = urlsplit(os.environ[name].strip())
        port = url.port
    except ValueError:
        raise bad from None
    if url.scheme not in ("smtp", "smtp+tls", "smtps") or not url.hostname or url.path not in ("", "/"):
        raise bad
    port = port or {"smtp": 25, "smtp+tls": 587, "smtps": 465}[url.scheme]
    return url.scheme, url.hostname, port, unquote(url.username or ""), unquote(url.password or "")


# Mail, for allauth's password reset only: without a server the reset pages are not routed
# and nothing offers them (agenvoy_site/urls.py); with one, ACCOUNT_RATE_LIMITS caps them.
# Only whether there is one is a setting: the URL may hold the password, and a setting whose
# name Django does not read as secret is shown in clear by `diffsettings` and debug pages.
AGENVOY_MAIL = bool(os.environ.get("AGENVOY_SMTP_URL", "").strip())
# Without a server the default mailer drops what it is given (nothing is given: the pages that
# mail are not routed); Django's check wants a default.
MAILERS: dict = {"default": {"BACKEND": "django.core.mail.backends.dummy.EmailBackend"}}
if AGENVOY_MAIL:
    _scheme, _host, _port, _user, _password = _smtp("AGENVOY_SMTP_URL")
    _options = {"host": _host, "port": _port, "username": _user, "password": _password}
    _options |= {"use_tls": _scheme == "smtp+tls", "use_ssl": _scheme == "smtps", "timeout": 20}
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend", "OPTIONS": _options}}
DEFAULT_FROM_EMAIL = (
    os.environ.get("AGENVOY_EMAIL_FROM", "").strip() or f"Agenvoy MCP console <agenvoy@{_PUBLIC_HOST}>"
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"


def _log_level(name: str, default: str) -> str:
    """A level name `logging` knows (DEBUG, INFO, WARNING, ERROR, CRITICAL), in any case."""
    raw = os.environ.get(name, "").strip() or default
    if raw.upper() not in logging.getLevelNamesMapping():
        raise ImproperlyConfigured(f"{name} must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {raw!r}")
    return raw.upper()


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "mcpcore": {"handlers": ["console"], "level": _log_level("AGENVOY_LOG_LEVEL", "INFO")},
    },
}
