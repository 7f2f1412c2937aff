"""SPEC 11: the management commands create_token, import_config and bootstrap_admin."""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from mcpcore.models import ApiToken, Server

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# --- create_token -----------------------------------------------------------------------------


def test_it_prints_a_token_that_authenticates_against_v1():
    token = _run("create_token", "ci-bot").strip()
    assert token and "\n" not in token
    r = Client().get("/v1/mcp/status", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 200
    assert r.json()["servers"] == []
    row = ApiToken.objects.get(name="ci-bot")
    assert row.may_auto is True
    assert row.active
    assert row.role == "agent"  # the default (SPEC 12)


@pytest.mark.parametrize("role", ["agent", "approver", "admin"])
def test_it_makes_a_token_of_the_role_asked_for(role):
    token = _run("create_token", f"r-{role}", "--role", role).strip()
    assert ApiToken.objects.get(name=f"r-{role}").role == role
    r = Client().get("/v1/mcp", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == (200 if role == "admin" else 403)


def test_it_refuses_an_unknown_role():
    with pytest.raises(CommandError):
        call_command("create_token", "x", "--role", "root")
    assert not ApiToken.objects.exists()


def test_it_stores_only_the_hash_of_the_token():
    token = _run("create_token", "secret-keeper").strip()
    row = ApiToken.objects.get(name="secret-keeper")
    assert row.token_hash == ApiToken.hash(token) != token
    assert token not in row.token_hash
    # Nowhere in the database: scan every text column of the token table.
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM mcpcore_apitoken")
        for record in cur.fetchall():
            for value in record:
                assert not (isinstance(value, str) and token in value)
    assert len(row.hint) < len(token) // 2  # the hint is a short recognisable start only


def test_it_prints_a_new_token_each_time():
    first = _run("create_token", "same").strip()
    second = _run("create_token", "same").strip()
    assert first != second
    assert ApiToken.objects.filter(name="same").count() == 2


def test_it_bars_a_no_auto_token_from_auto_mode():
    token = _run("create_token", "careful", "--no-auto").strip()
    assert ApiToken.objects.get(name="careful").may_auto is False
    assert Client().get("/v1/mcp/status", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200


def test_it_needs_a_token_name():
    with pytest.raises(CommandError):
        call_command("create_token")
    assert not ApiToken.objects.exists()


# --- import_config ----------------------------------------------------------------------------


def _json_file(tmp_path, data, name="import.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_it_imports_the_mcp_servers_shape(tmp_path, agenvoy_home):
    src = _json_file(
        tmp_path,
        {
            "mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"]},
                "remote": {"url": "https://r/mcp", "headers": {"Authorization": "tok"}},
            }
        },
    )
    out = _run("import_config", src)
    assert "imported 2 servers" in out
    data = json.loads((agenvoy_home / "mcp.json").read_text())
    assert data == {
        "servers": {
            "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"]},
            "remote": {"url": "https://r/mcp", "headers": {"Authorization": "tok"}},
        }
    }
    assert sorted(Server.objects.values_list("name", flat=True)) == ["fs", "remote"]
    assert Server.objects.get(name="remote").transport == "streamable-http"


def test_it_imports_the_servers_shape_and_vs_code_types(tmp_path, agenvoy_home):
    src = _json_file(
        tmp_path,
        {
            "inputs": [],
            "servers": {
                "h": {"type": "http", "url": "https://h/mcp"},
                "s": {"type": "sse", "url": "https://s/sse"},
                "io": {"type": "stdio", "command": "node"},
            },
        },
    )
    out = _run("import_config", src)
    assert "imported 3 servers" in out
    transports = dict(Server.objects.values_list("name", "transport"))
    assert transports == {"h": "streamable-http", "s": "sse", "io": "stdio"}


def test_it_merges_an_import_into_the_existing_servers(tmp_path, agenvoy_home):
    (agenvoy_home / "mcp.json").write_text(
        json.dumps({"x-top": True, "servers": {"keep": {"command": "k"}, "fs": {"command": "old"}}})
    )
    out = _run("import_config", _json_file(tmp_path, {"mcpServers": {"fs": {"command": "new"}}}))
    assert "imported 1 server" in out
    data = json.loads((agenvoy_home / "mcp.json").read_text())
    assert data == {"x-top": True, "servers": {"keep": {"command": "k"}, "fs": {"command": "new"}}}


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        '{"mcpServers": {"a": {"command": "x"}}',  # cut short
        "[]",
        json.dumps({"something": {}}),
        json.dumps({"mcpServers": {}}),
        json.dumps({"mcpServers": {"ok": {"command": "x"}, "a__b": {"command": "y"}}}),
        json.dumps({"mcpServers": {"ok": {"command": "x"}, "bad": {"args": ["y"]}}}),
        json.dumps({"mcpServers": {"bad name": {"command": "x"}}}),
    ],
)
def test_it_refuses_a_file_it_cannot_use_and_imports_nothing(tmp_path, agenvoy_home, content):
    existing = '{"servers": {"keep": {"command": "k"}}}'
    (agenvoy_home / "mcp.json").write_text(existing)
    with pytest.raises(CommandError) as exc:
        _run("import_config", _json_file(tmp_path, content))
    assert str(exc.value)
    assert (agenvoy_home / "mcp.json").read_text() == existing
    assert not Server.objects.exclude(name="keep").exists()


def test_it_names_the_problem_of_a_bad_server_name(tmp_path, agenvoy_home):
    with pytest.raises(CommandError, match="a__b"):
        _run("import_config", _json_file(tmp_path, {"mcpServers": {"a__b": {"command": "x"}}}))
    assert not (agenvoy_home / "mcp.json").exists()


def test_it_refuses_a_missing_file(tmp_path, agenvoy_home):
    with pytest.raises(CommandError):
        _run("import_config", str(tmp_path / "nope.json"))
    assert not (agenvoy_home / "mcp.json").exists()
    assert not Server.objects.exists()


def test_it_exits_non_zero_through_the_command_line(tmp_path, agenvoy_home):
    # CommandError is what makes `manage.py import_config` exit non-zero: check it does.
    from django.core.management import ManagementUtility

    utility = ManagementUtility(["manage.py", "import_config", _json_file(tmp_path, "nope")])
    with pytest.raises(SystemExit) as exc:
        utility.execute()
    assert exc.value.code != 0


# --- bootstrap_admin --------------------------------------------------------------------------


def test_it_creates_the_admin_once_and_prints_its_password():
    User = get_user_model()
    out = _run("bootstrap_admin")
    assert User.objects.count() == 1
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    password = next(
        line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("password:")
    )
    assert admin.check_password(password)
    assert "admin" in out

    again = _run("bootstrap_admin")
    assert again == ""
    assert User.objects.count() == 1
    assert User.objects.get(username="admin").check_password(password)


def test_it_creates_no_admin_when_a_user_exists():
    User = get_user_model()
    User.objects.create_user("someone", password="pw-123456789")
    assert _run("bootstrap_admin") == ""
    assert not User.objects.filter(username="admin").exists()


def test_it_refuses_to_import_into_an_unparsable_mcp_json(tmp_path, agenvoy_home):
    broken = b'{"servers": {"keep": '
    (agenvoy_home / "mcp.json").write_bytes(broken)
    with pytest.raises(CommandError, match="mcp.json"):
        _run("import_config", _json_file(tmp_path, {"mcpServers": {"a": {"command": "x"}}}))
    assert (agenvoy_home / "mcp.json").read_bytes() == broken
    assert not Server.objects.exists()


# --- set_role and create_token --group (SPEC 23.1, 23.3) -------------------------------------------


def _standing(username: str) -> tuple:
    from mcpcore.calls import people

    user = get_user_model().objects.get(username=username)
    return people.role_of(user), people.groups_of(user)


def test_it_sets_a_role_and_exactly_the_groups_given_making_them_as_needed():
    from mcpcore.models import AuditEntry, Group

    get_user_model().objects.create_user("boss")  # the active admin the console keeps
    get_user_model().objects.create_user("ann")
    Group.objects.create(name="old").people.add(get_user_model().objects.get(username="ann"))
    assert _run("set_role", "ann", "approver", "--groups", "ops,oncall").strip() == "ann is now approver"
    assert _standing("ann") == ("approver", ["oncall", "ops"])
    assert _run("set_role", "ann", "viewer").strip() == "ann is now viewer"
    assert _standing("ann") == ("viewer", ["oncall", "ops"])  # no --groups: groups kept
    _run("set_role", "ann", "viewer", "--groups", "")
    assert _standing("ann") == ("viewer", [])
    edit = AuditEntry.objects.filter(action="person.edit", object="ann").order_by("pk").first()
    assert (edit.actor, edit.before, edit.after) == (
        "system",
        {"role": "admin", "groups": ["old"]},
        {"role": "approver", "groups": ["oncall", "ops"]},
    )
    assert set(AuditEntry.objects.filter(action="group.add").values_list("object", flat=True)) >= {
        "ops",
        "oncall",
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (("nobody", "viewer"), "unknown person: nobody"),
        (("ann", "root"), "unknown role: root"),
        (("ann", "viewer", "--groups", "Bad Name"), "invalid group name: Bad Name"),
    ],
)
def test_it_exits_non_zero_naming_an_unknown_person_or_role_and_changes_nothing(args, message):
    get_user_model().objects.create_user("ann")
    get_user_model().objects.create_user("boss")
    with pytest.raises(CommandError) as exc:
        _run("set_role", *args)
    # A CommandError is `manage.py`'s exit status 1 with its message on stderr.
    assert exc.value.returncode == 1 and message in str(exc.value)
    assert _standing("ann") == ("admin", [])
    from mcpcore.models import Group, Person

    assert not Person.objects.exists() and not Group.objects.exists()


def test_it_keeps_one_active_admin_through_set_role():
    get_user_model().objects.create_user("boss")
    with pytest.raises(CommandError, match="The console needs an active admin."):
        _run("set_role", "boss", "viewer")
    assert _standing("boss") == ("admin", [])


def test_it_makes_createsuperuser_and_the_first_admin_admins(client):
    call_command("createsuperuser", "--noinput", "--username", "root", "--email", "r@example.invalid")
    assert _standing("root") == ("admin", [])
    get_user_model().objects.all().delete()
    _run("bootstrap_admin")
    assert _standing("admin") == ("admin", [])
    client.force_login(get_user_model().objects.get(username="admin"))
    assert client.get("/people/").status_code == 200


def test_it_puts_an_approver_token_in_its_groups():
    from mcpcore.models import Group

    token = _run("create_token", "pager", "--role", "approver", "--group", "ops", "--group", "oncall").strip()
    row = ApiToken.objects.get(name="pager")
    assert row.role == "approver" and token.startswith("agv_")
    assert sorted(Group.objects.filter(tokens=row).values_list("name", flat=True)) == ["oncall", "ops"]


@pytest.mark.parametrize("role", ["agent", "admin"])
def test_it_refuses_a_group_for_a_token_other_than_an_approver(role):
    with pytest.raises(
        CommandError, match=f"--group is for approver tokens \\(--role approver\\), not {role}"
    ):
        _run("create_token", "x", "--role", role, "--group", "ops")
    assert not ApiToken.objects.filter(name="x").exists()


def test_it_refuses_a_bad_group_name_and_makes_no_token():
    with pytest.raises(CommandError, match="invalid group name: Ops!"):
        _run("create_token", "x", "--role", "approver", "--group", "Ops!")
    assert not ApiToken.objects.filter(name="x").exists()
