"""Tokens, tools, pins, server names, views (and the listings built from them, with prompts
and resources) as every call reads them, kept in memory until any of them changes.

Every change to those tables, made by any process through any door (pages, `/v1`, the
supervisor, a management command, the admin, plain SQL), raises the one `CacheGeneration`
row, by a database trigger in the changing transaction. A lookup reads that row (one integer
by primary key, in the database trip it is part of) and uses what it kept only when it was
kept at that same generation. So a revoked token's very next request, in any process, is
refused; what changes rarely costs one tiny read instead of a query per table.

Why triggers and a row rather than a channel-layer broadcast: a broadcast arrives some time
after the commit, so another process could still answer from the old entry; and signals miss
queryset updates. Token `last_used_at` is not watched (it changes once a minute while a token
is used), nor are the servers' lease and bookkeeping columns.

Sync: call these in a database job (`mcpcore.db`); the generation read goes through `db.sql`,
so on a hit no ORM is involved and the job can run on the event loop's own connection. Only the
servers use the cache (`enable()`, called by the process wiring, `mcpcore.runtime`); elsewhere,
in tests that roll back, every lookup queries.
"""

import time

from django.db import connections

from .. import db
from ..models import ApiToken, AppToken, Server, Tool, ToolPin, View
from ..toolviews import Scope

_kept: dict[tuple[str, str], tuple[int, object]] = {}
_MAX = 10_000  # entries; past that everything is dropped and read again
_enabled = False
TABLE = "mcpcore_cachegeneration"


def enable() -> None:
    global _enabled
    _enabled = True


def generation() -> int | None:
    """The current generation; None when the row is missing (then nothing is kept)."""
    _, row = db.sql(f"SELECT n FROM {TABLE} WHERE id = 1")
    return row[0] if row else None


def _through(kind: str, key: str, load):
    if not _enabled:
        return load()
    gen = generation()  # read before the rows: an entry is never older than its tag
    hit = _kept.get((kind, key))
    if hit is not None and gen is not None and hit[0] == gen:
        return hit[1]
    value = load()
    if gen is not None and value is not None:
        if len(_kept) >= _MAX:
            _kept.clear()
        _kept[(kind, key)] = (gen, value)
    return value


def token(token_hash: str):
    """The live (not revoked) ApiToken with this hash, or None."""
    return _through(
        "token",
        token_hash,
        lambda: ApiToken.objects.filter(token_hash=token_hash, revoked_at__isnull=True).first(),
    )


def app_token(token_hash: str):
    """The AppToken (an app's access token, SPEC 21.4) with this hash, its grant, client and
    ApiToken loaded, while it, its grant and its ApiToken are not revoked; None otherwise.
    Its expiry is the caller's to check (time passes without a change of generation)."""
    return _through(
        "app",
        token_hash,
        lambda: (
            AppToken.objects.select_related("grant", "grant__client", "grant__token")
            .filter(
                token_hash=token_hash,
                kind=AppToken.ACCESS,
                revoked_at__isnull=True,
                grant__revoked_at__isnull=True,
                grant__token__revoked_at__isnull=True,
            )
            .first()
        ),
    )


def tool(registered_name: str):
    """The Tool with this registered name, its server loaded, or None."""
    return _through(
        "tool",
        registered_name,
        lambda: Tool.objects.select_related("server").filter(registered_name=registered_name).first(),
    )


def pin(registered_name: str) -> str:
    """The pinned digest of a tool, `""` when it has none (SPEC 14.1)."""
    return _through(
        "pin",
        registered_name,
        lambda: (
            ToolPin.objects.filter(registered_name=registered_name).values_list("digest", flat=True).first()
            or ""
        ),
    )


def toolview(name: str):
    """The View of this name, or None."""
    return _through("view", name, lambda: View.objects.filter(name=name).first())


def scope(token):
    """What a token limited to views may see (`toolviews.Scope`); None for an unlimited one
    (or no token: a person in the browser), with no query."""
    if token is None or not token.view_limited:
        return None

    def load():
        rows = View.objects.filter(tokens=token.pk).order_by("name")
        return Scope({v.name: v.selection() for v in rows})

    return _through("scope", str(token.pk), load)


def listing(key: str, load):
    """What `load()` builds for `key` (an MCP endpoint's listings for one audience), kept
    until any watched table changes: lists served from memory, not from rows per request."""
    return _through("listing", key, load)


def server(name: str):
    """The Server of this name, or None (what a prompt get or resource read checks)."""
    return _through("server-row", name, lambda: Server.objects.filter(name=name).first())


def server_exists(name: str) -> bool:
    """Whether a server of this name is configured (`/mcp/<server>` asks on every request)."""
    return _through("server", name, lambda: Server.objects.filter(name=name).exists())


# --- the triggers -------------------------------------------------------------------------------

# table -> the columns whose change matters (None: any change)
WATCHED = {
    "mcpcore_apitoken": ("name", "role", "token_hash", "may_auto", "revoked_at", "view_limited"),
    "mcpcore_view": None,
    "mcpcore_apitoken_views": None,
    "mcpcore_server": ("name", "enabled", "state", "last_error"),
    "mcpcore_tool": None,
    "mcpcore_toolpin": None,
    "mcpcore_prompt": None,
    "mcpcore_resource": None,
    "mcpcore_resourcetemplate": None,
    # Apps' access tokens (SPEC 21.4): revoking one, or its grant, holds at once everywhere.
    "mcpcore_apptoken": ("revoked_at",),
    "mcpcore_appgrant": ("revoked_at",),
}
BUMP = f"UPDATE {TABLE} SET n = n + 1 WHERE id = 1"


def _statements(vendor: str) -> list[str]:
    out = []
    if vendor == "postgresql":
        out.append(
            "CREATE OR REPLACE FUNCTION mcpcore_bump_generation() RETURNS trigger LANGUAGE plpgsql "
            f"AS $$ BEGIN {BUMP}; RETURN NULL; END $$"
        )
    for table, columns in WATCHED.items():
        update = f"UPDATE OF {', '.join(columns)}" if columns else "UPDATE"
        for op, event in (("ins", "INSERT"), ("upd", update), ("del", "DELETE")):
            name = f"{table}_gen_{op}"
            if vendor == "postgresql":
                out.append(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                out.append(
                    f"CREATE TRIGGER {name} AFTER {event} ON {table} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION mcpcore_bump_generation()"
                )
            else:
                out.append(f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {table} BEGIN {BUMP}; END")
    return out


def install_triggers(sender=None, using: str = "default", **_kwargs) -> None:
    """Create the generation row and the triggers (idempotent; run after every migrate, so a
    table a later migration rebuilds, as SQLite's ALTER does, gets them back). A re-created
    row starts from the clock, never from a number an old entry may carry."""
    conn = connections[using]
    if TABLE not in conn.introspection.table_names():
        return
    start = time.time_ns() // 1000
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(f"INSERT INTO {TABLE} (id, n) VALUES (1, %s) ON CONFLICT (id) DO NOTHING", [start])
        else:
            cursor.execute(f"INSERT OR IGNORE INTO {TABLE} (id, n) VALUES (1, %s)", [start])
        for sql in _statements(conn.vendor):
            cursor.execute(sql)
