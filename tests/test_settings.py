"""SPEC 11: every environment variable has a working default, and a bad value stops start-up
with a message naming the variable. Each case is a real `manage.py check` process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
if not Path(PYTHON).exists():
    PYTHON = sys.executable

BAD = [
    ("AGENVOY_POLL_SECONDS", "abc"),
    ("AGENVOY_CALL_TIMEOUT", "0"),
    ("AGENVOY_CONFIRM_TIMEOUT", "-1"),
    ("AGENVOY_RESULT_CAP", "x"),
    ("DJANGO_DEBUG", "maybe"),
    ("AGENVOY_LIST_TIMEOUT", "nan"),
    ("AGENVOY_CALL_MAX_SECONDS", "inf"),
    ("AGENVOY_POLL_SECONDS", "0.5"),
    ("AGENVOY_RESULT_CAP", "0"),
    ("AGENVOY_RESULT_CAP", "1.5"),
    ("AGENVOY_MAX_PENDING", "0"),
    ("AGENVOY_SIGNIN_ATTEMPTS", "0"),
    ("AGENVOY_SIGNIN_ATTEMPTS", "five"),
    ("AGENVOY_SIGNIN_LOCK_MINUTES", "0.5"),
    ("AGENVOY_TRUSTED_PROXIES", "10.0.0.0/8,proxy.example"),
    ("AGENVOY_REQUIRE_2FA", "maybe"),
    ("AGENVOY_PUBLIC_URL", "ftp://console.example"),
    ("DJANGO_SECURE_PROXY_SSL_HEADER", "X Forwarded"),
    ("DJANGO_CSRF_TRUSTED_ORIGINS", "console.example"),
    ("AGENVOY_LOG_LEVEL", "bogus"),
    ("AGENVOY_LEASE_SECONDS", "soon"),
    ("AGENVOY_PING_SECONDS", "0"),
    ("AGENVOY_HISTORY_MAX_BYTES", "-5"),
    ("AGENVOY_WEBHOOK_RETRY_SCALE", "2"),
    ("DJANGO_ALLOWED_HOSTS", "https://console.example/"),
    ("DATABASE_URL", "nosuchdb://host/name"),
    ("DATABASE_URL", "postgres://"),
    ("REDIS_URL", "http://127.0.0.1:6379"),
    # A file where a folder belongs: `{file}` becomes a plain file in the case's folder.
    ("AGENVOY_DATA_DIR", "{file}"),
    ("AGENVOY_HOME", "{file}"),
    ("AGENVOY_HISTORY_DAYS", "-1"),
    ("AGENVOY_HISTORY_DAYS", "ninety"),
    ("AGENVOY_RESULT_DAYS", "1.5"),
    ("AGENVOY_AUDIT_DAYS", "-3"),
    ("AGENVOY_AUDIT_DAYS", "a year"),
    ("AGENVOY_OAUTH_ACCESS_SECONDS", "59"),
    ("AGENVOY_OAUTH_ACCESS_SECONDS", "86401"),
    ("AGENVOY_OAUTH_ACCESS_SECONDS", "an hour"),
    ("AGENVOY_OAUTH_ALLOW_PRIVATE", "maybe"),
    ("AGENVOY_METRICS_ALLOW", "10.0.0.0/33"),
    ("AGENVOY_METRICS_ALLOW", "127.0.0.1/32,localhost"),
    ("AGENVOY_SMTP_URL", "mail.example"),
    ("AGENVOY_SMTP_URL", "smtp://user:pw@mail.example:port"),
    ("AGENVOY_SANDBOX", "some"),
    # Single sign-on (SPEC 23.2): the roles' shape, the issuer's scheme, what must come together.
    ("AGENVOY_OIDC_ROLES", "boss:platform"),
    ("AGENVOY_OIDC_ROLES", "admin"),
    ("AGENVOY_OIDC_ROLES", "admin:;viewer:*"),
    ("AGENVOY_OIDC_ROLES", "admin:a;admin:b"),
    ("AGENVOY_OIDC_ISSUER", "http://idp.example"),
    ("AGENVOY_OIDC_ISSUER", "idp.example"),
    ("AGENVOY_OIDC_ISSUER", "https://idp.example"),  # without AGENVOY_OIDC_CLIENT_ID
    ("AGENVOY_OIDC_CLIENT_ID", "console"),  # without AGENVOY_OIDC_ISSUER
    ("AGENVOY_PASSWORD_SIGNIN", "maybe"),
    ("AGENVOY_PASSWORD_SIGNIN", "0"),  # without AGENVOY_OIDC_ISSUER: nobody could sign in
    ("AGENVOY_REPEAT_LIMIT", "ten/5m"),
    ("AGENVOY_REPEAT_LIMIT", "0/5m"),
    ("AGENVOY_REPEAT_LIMIT", "10/5w"),
]
GOOD = {
    "AGENVOY_POLL_SECONDS": "1.5",
    "AGENVOY_SANDBOX": "all",
    "AGENVOY_REPEAT_LIMIT": "20/1h",
    "AGENVOY_LIST_TIMEOUT": "30",
    "AGENVOY_CALL_TIMEOUT": "1",
    "AGENVOY_CALL_MAX_SECONDS": "600",
    "AGENVOY_CONFIRM_TIMEOUT": "2.25",
    "AGENVOY_RESULT_CAP": "1048576",
    "DJANGO_DEBUG": "false",
    "AGENVOY_MAX_PENDING": "5",
    "AGENVOY_SIGNIN_ATTEMPTS": "3",
    "AGENVOY_SIGNIN_LOCK_MINUTES": "60",
    "AGENVOY_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7",
    "AGENVOY_REQUIRE_2FA": "1",
    "AGENVOY_PUBLIC_URL": "https://console.example/",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://console.example,https://other.example:8443",
    "AGENVOY_LOG_LEVEL": "debug",
    "AGENVOY_LEASE_SECONDS": "5",
    "AGENVOY_PING_SECONDS": "2.5",
    "AGENVOY_HISTORY_MAX_BYTES": "1000",
    "AGENVOY_WEBHOOK_RETRY_SCALE": "0.5",
    "DJANGO_ALLOWED_HOSTS": "console.example,.example.org,[::1]",
    "AGENVOY_HISTORY_DAYS": "0",
    "AGENVOY_RESULT_DAYS": "7",
    "AGENVOY_AUDIT_DAYS": "0",
    "AGENVOY_OAUTH_ACCESS_SECONDS": "60",
    "AGENVOY_OAUTH_ALLOW_PRIVATE": "1",
    "AGENVOY_METRICS_ALLOW": "127.0.0.1/32, 10.0.0.0/8,::1",
    "AGENVOY_SMTP_URL": "smtp+tls://me%40example.com:pw@mail.example:587",
    # Nothing answers there: a provider that is down is tried at sign-in, not at start-up.
    "AGENVOY_OIDC_ISSUER": "http://127.0.0.1:9/realms/team/",
    "AGENVOY_OIDC_CLIENT_ID": "console",
    "AGENVOY_OIDC_CLIENT_SECRET": "",
    "AGENVOY_OIDC_NAME": "Keycloak",
    "AGENVOY_OIDC_SCOPES": "openid email profile groups",
    "AGENVOY_OIDC_GROUPS_CLAIM": "roles",
    "AGENVOY_OIDC_ROLES": " admin:platform ; approver:ops,oncall;viewer:* ",
    "AGENVOY_PASSWORD_SIGNIN": "0",
}


def _clean_env(tmp: Path) -> dict:
    """This test run's environment without any of the console's variables, plus a temporary
    data folder and $AGENVOY_HOME."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENVOY_", "DJANGO_")) and k not in ("DATABASE_URL", "REDIS_URL")
    }
    env["AGENVOY_DATA_DIR"] = str(tmp / "data")
    env["AGENVOY_HOME"] = str(tmp / "home")
    return env


def _manage(env: dict, timeout: float, *args: str) -> subprocess.CompletedProcess:
    """`manage.py <args>` in `env`, its output captured as text."""
    return subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def _check_processes(tmp_path: Path, cases: dict[str, dict]) -> dict[str, subprocess.CompletedProcess]:
    """Run one `manage.py check` per case, all at once (each start-up takes about a second)."""
    procs = {}
    for key, extra in cases.items():
        folder = tmp_path / key
        folder.mkdir()
        (folder / "a-file").write_text("")
        env = _clean_env(folder) | {k: v.replace("{file}", str(folder / "a-file")) for k, v in extra.items()}
        procs[key] = subprocess.Popen(
            [PYTHON, "manage.py", "check"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    done = {}
    try:
        for key, p in procs.items():
            out, err = p.communicate(timeout=60)
            done[key] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("settings")
    cases = {"defaults": {}, "good": dict(GOOD)}
    cases |= {f"bad{i}": {name: value} for i, (name, value) in enumerate(BAD)}
    return _check_processes(tmp, cases)


def test_it_starts_with_no_variables_set(outcomes):
    r = outcomes["defaults"]
    assert r.returncode == 0, r.stderr
    assert "no issues" in r.stdout


def test_it_starts_with_good_values(outcomes):
    r = outcomes["good"]
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "i, name, value", [(i, n, v) for i, (n, v) in enumerate(BAD)], ids=[f"{n}={v}" for n, v in BAD]
)
def test_it_stops_on_a_bad_value_naming_the_variable(outcomes, i, name, value):
    r = outcomes[f"bad{i}"]
    assert r.returncode != 0
    # The message itself (the last line), not just a traceback line quoting the settings file.
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines, "no message on stderr"
    assert name in lines[-1], r.stderr


PRAGMAS = (
    "from django.db import connection\n"
    "with connection.cursor() as c:\n"
    "    print(c.execute('PRAGMA journal_mode').fetchone()[0], c.execute('PRAGMA busy_timeout').fetchone()[0])\n"
    "print(connection.settings_dict['OPTIONS'].get('transaction_mode'))\n"
)


@pytest.mark.parametrize("named", ["default", "DATABASE_URL"])
def test_it_applies_the_sqlite_options_however_the_database_is_named(tmp_path, named):
    env = _clean_env(tmp_path)
    if named == "DATABASE_URL":
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'elsewhere.sqlite3'}"
    out = _manage(env, 60, "shell", "--no-imports", "-c", PRAGMAS)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["wal", "20000", "IMMEDIATE"]
    if named == "DATABASE_URL":
        assert (tmp_path / "elsewhere.sqlite3").exists()


@pytest.mark.parametrize("named", ["default", "DATABASE_URL"])
def test_it_creates_the_sqlite_database_owner_only_however_it_is_named(tmp_path, named):
    env = _clean_env(tmp_path)
    path = tmp_path / "data" / "db.sqlite3"
    if named == "DATABASE_URL":
        path = tmp_path / "elsewhere.sqlite3"
        env["DATABASE_URL"] = f"sqlite:///{path}"
    out = _manage(env, 120, "migrate", "--noinput", "-v0")
    assert out.returncode == 0, out.stderr
    assert path.stat().st_size > 0  # the console's database, not an empty placeholder
    assert path.stat().st_mode & 0o777 == 0o600


def test_it_keeps_the_mail_servers_password_out_of_the_settings_shown(tmp_path):
    # Django's debug pages show every setting whose name does not read as secret in clear
    # (its SafeExceptionReporterFilter): the SMTP URL, which may hold the password, was one.
    env = _clean_env(tmp_path) | {"AGENVOY_SMTP_URL": "smtps://ops:mail-pw-7f3a9c@mail.example"}
    shown = "from django.views.debug import SafeExceptionReporterFilter as F; print(F().get_safe_settings())"
    r = _manage(env, 60, "shell", "-c", shown)
    assert r.returncode == 0, r.stderr
    assert "'AGENVOY_MAIL': True" in r.stdout
    assert "mail-pw-7f3a9c" not in r.stdout


def test_it_stops_serve_on_a_bad_sign_on_setting_naming_the_variable(tmp_path):
    # `serve` itself, not only `check`: the operator's command refuses to start.
    env = _clean_env(tmp_path) | {"AGENVOY_OIDC_ISSUER": "http://idp.example", "AGENVOY_OIDC_CLIENT_ID": "c"}
    r = _manage(env, 60, "serve", "--port", "0")
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert "AGENVOY_OIDC_ISSUER" in lines[-1], r.stderr
    assert "http://idp.example" in lines[-1]


def test_it_keeps_the_sign_on_client_secret_out_of_the_settings_shown(tmp_path):
    env = _clean_env(tmp_path) | {
        "AGENVOY_OIDC_ISSUER": "https://idp.example",
        "AGENVOY_OIDC_CLIENT_ID": "console",
        "AGENVOY_OIDC_CLIENT_SECRET": "oidc-secret-5be1d0",
    }
    shown = "from django.views.debug import SafeExceptionReporterFilter as F; print(F().get_safe_settings())"
    r = _manage(env, 60, "shell", "-c", shown)
    assert r.returncode == 0, r.stderr
    assert "'client_id': 'console'" in r.stdout
    assert "oidc-secret-5be1d0" not in r.stdout


def test_it_guards_against_repeats_past_10_in_5m_by_default_and_not_with_0(tmp_path):
    show = "from django.conf import settings; print(repr(settings.AGENVOY_REPEAT_LIMIT))"
    default = _manage(_clean_env(tmp_path), 60, "shell", "--no-imports", "-c", show)
    assert default.returncode == 0, default.stderr
    assert default.stdout.strip() == "'10/5m'"
    off = _manage(
        _clean_env(tmp_path) | {"AGENVOY_REPEAT_LIMIT": "0"}, 60, "shell", "--no-imports", "-c", show
    )
    assert off.stdout.strip() == "''"
