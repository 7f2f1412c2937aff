"""The People page (SPEC 23.1, 23.3): who may sign in and how, their roles and groups changed,
deactivating (their sessions end at once) and reactivating, a person added with a one-time
set-password link, the last active admin kept, groups with their members and escalation, and
the audit rows of each change."""

import re
from pathlib import Path

import httpx2
import pytest
from allauth.mfa.models import Authenticator
from allauth.usersessions.models import UserSession
from django.contrib.auth.models import User
from django.test import Client

from mcpcore.models import AuditEntry, Group, Person
from tests.live import signed_in

pytestmark = pytest.mark.django_db

LAST_ADMIN = "The console needs an active admin."
LINK = re.compile(r'<pre class="token" id="set-password-link">(http[^<]+)</pre>')


@pytest.fixture
def boss(client) -> User:
    """The one admin, signed in."""
    user = User.objects.create_user("boss", email="boss@example.invalid")
    client.force_login(user)
    return user


@pytest.fixture
def ann(db) -> User:
    user = User.objects.create_user("ann", email="ann@example.invalid")
    Person.objects.create(user=user, role="approver")
    return user


def _row(html: str, username: str) -> str:
    return re.search(rf'<tr id="person-{username}".*?</tr>', html, re.S).group(0)


def _cells(row: str) -> list[str]:
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", c)).strip() for c in cells]


def test_it_lists_each_person_with_how_they_sign_in(client, boss, ann):
    Authenticator.objects.create(user=ann, type=Authenticator.Type.TOTP, data={})
    Group.objects.create(name="ops").people.add(ann)
    sso = User.objects.create_user("sam")
    Person.objects.create(user=sso, role="viewer", from_sso=True)
    Group.objects.get(name="ops").people.add(sso)
    html = client.get("/people/").content.decode()
    assert '<a href="/people/" aria-current="page">People</a>' in html
    cells = _cells(_row(html, "ann"))
    assert cells[0:2] == ["ann", "ann@example.invalid"]
    assert cells[3:] == ["password", "yes", "never", "yes Deactivate"]
    assert 'option value="approver" selected' in _row(html, "ann") and 'value="ops"' in _row(html, "ann")
    assert _cells(_row(html, "boss"))[3:5] == ["password", "no"]
    # Role and groups the provider sets are shown, not offered for editing.
    sam = _row(html, "sam")
    assert _cells(sam)[2] == "viewer : ops from SSO" and "person-edit" not in sam and "/edit/" not in sam


def test_it_changes_a_role_and_groups_and_audits_before_and_after(client, boss, ann):
    r = client.post(f"/people/{ann.pk}/edit/", {"role": "viewer", "groups": "ops, oncall"})
    assert r.status_code == 302
    assert Person.objects.get(user=ann).role == "viewer"
    assert sorted(Group.objects.filter(people=ann).values_list("name", flat=True)) == ["oncall", "ops"]
    row = AuditEntry.objects.get(action="person.edit", object="ann")
    assert (row.actor, row.before, row.after) == (
        "boss",
        {"role": "approver", "groups": []},
        {"role": "viewer", "groups": ["oncall", "ops"]},
    )
    assert AuditEntry.objects.filter(action="group.add").count() == 2


def test_it_refuses_to_edit_role_and_groups_the_provider_sets(client, boss):
    sam = User.objects.create_user("sam")
    Person.objects.create(user=sam, role="viewer", from_sso=True)
    r = client.post(f"/people/{sam.pk}/edit/", {"role": "admin", "groups": "ops"})
    assert r.status_code == 400 and "sam&#x27;s role and groups come from SSO" in r.content.decode()
    assert Person.objects.get(user=sam).role == "viewer" and not Group.objects.exists()


def test_it_keeps_the_last_active_admin(client, boss, ann):
    for path, data in (
        (f"/people/{boss.pk}/edit/", {"role": "approver", "groups": ""}),
        (f"/people/{boss.pk}/active/", {"active": "0"}),
    ):
        r = client.post(path, data)
        assert r.status_code == 400 and LAST_ADMIN in r.content.decode()
    boss.refresh_from_db()
    assert boss.is_active and not Person.objects.filter(user=boss).exists()
    assert not AuditEntry.objects.filter(action="person.edit").exists()
    # With a second active admin, the first may step down.
    client.post(f"/people/{ann.pk}/edit/", {"role": "admin", "groups": ""})
    assert client.post(f"/people/{boss.pk}/edit/", {"role": "viewer", "groups": ""}).status_code == 302
    # ... and is a viewer at once.
    assert client.get("/people/").status_code == 403


def test_it_ends_a_deactivated_persons_sessions_at_once_and_lets_them_back_when_reactivated(
    client, boss, ann
):
    theirs = Client()
    theirs.force_login(ann)
    assert theirs.get("/pending/").status_code == 200  # their session is listed (allauth's UserSession)
    assert UserSession.objects.filter(user=ann).exists()
    assert client.post(f"/people/{ann.pk}/active/", {"active": "0"}).status_code == 302
    assert not UserSession.objects.filter(user=ann).exists()
    r = theirs.get("/pending/")
    assert r.status_code == 302 and r["Location"].startswith("/login/")
    row = AuditEntry.objects.get(action="person.edit", object="ann")
    assert (row.before, row.after) == ({"active": True}, {"active": False})
    assert client.post(f"/people/{ann.pk}/active/", {"active": "1"}).status_code == 302
    ann.refresh_from_db()
    assert ann.is_active
    theirs.force_login(ann)
    assert theirs.get("/pending/").status_code == 200


def test_it_adds_a_person_with_a_link_that_sets_a_password_once(client, boss):
    r = client.post(
        "/people/add/",
        {"username": "new", "email": "new@example.invalid", "role": "approver", "groups": "ops"},
    )
    assert r.status_code == 200 and r["Cache-Control"] == "no-store"
    link = LINK.search(r.content.decode()).group(1)
    assert "set-password" not in client.get("/people/").content.decode()  # shown once
    new = User.objects.get(username="new")
    assert (new.email, Person.objects.get(user=new).role, new.has_usable_password()) == (
        "new@example.invalid",
        "approver",
        False,
    )
    assert list(Group.objects.filter(people=new).values_list("name", flat=True)) == ["ops"]
    added = AuditEntry.objects.get(action="person.add")
    assert (added.object, added.actor, added.after) == (
        "new",
        "boss",
        {"email": "new@example.invalid", "role": "approver", "groups": ["ops"], "active": True},
    )
    path = link.removeprefix("http://testserver")
    them = Client()
    form = them.get(path, follow=True)
    assert form.status_code == 200 and 'id="set-password"' in form.content.decode()
    r = them.post(
        form.redirect_chain[-1][0],
        {"new_password1": "a-long-passphrase-42", "new_password2": "a-long-passphrase-42"},
    )
    assert r.status_code == 302 and r["Location"] == "/login/"
    assert them.post("/login/", {"username": "new", "password": "a-long-passphrase-42"}).status_code == 302
    # Used once: the link is spent.
    again = Client().get(path, follow=True)
    assert again.status_code == 410 and "This link is no longer valid" in again.content.decode()


@pytest.mark.parametrize(
    "data, message",
    [
        ({"username": "", "role": "viewer"}, "Enter a username."),
        ({"username": "boss", "role": "viewer"}, "boss already exists"),
        ({"username": "x y", "role": "viewer"}, "Enter a valid username."),
        ({"username": "x", "role": "root"}, "unknown role: root"),
        ({"username": "x", "role": "viewer", "groups": "Ops!"}, "invalid group name: Ops!"),
    ],
)
def test_it_refuses_a_bad_new_person_and_adds_nothing(client, boss, data, message):
    r = client.post("/people/add/", data)
    assert r.status_code == 400 and message in r.content.decode()
    assert list(User.objects.values_list("username", flat=True)) == ["boss"] and not Group.objects.exists()


def test_it_adds_changes_and_removes_groups(client, boss, ann, agenvoy_home):
    assert client.post("/people/groups/add/", {"name": "oncall"}).status_code == 302
    r = client.post(
        "/people/groups/add/",
        {"name": "ops", "people": "ann, boss", "escalate_to": "oncall", "escalate_after_minutes": "10"},
    )
    assert r.status_code == 302
    ops = Group.objects.get(name="ops")
    assert sorted(ops.people.values_list("username", flat=True)) == ["ann", "boss"]
    assert (ops.escalate_to.name, ops.escalate_after_minutes) == ("oncall", 10)
    html = client.get("/people/").content.decode()
    assert 'id="group-ops"' in html and 'value="ann, boss"' in html and 'value="10"' in html
    r = client.post(
        "/people/groups/ops/edit/", {"people": "ann", "escalate_to": "", "escalate_after_minutes": ""}
    )
    assert r.status_code == 302
    ops.refresh_from_db()
    assert list(ops.people.values_list("username", flat=True)) == ["ann"] and ops.escalate_to is None
    for data, message in (
        ({"name": "ops"}, "group ops already exists"),
        ({"name": "Bad"}, "invalid group name"),
        ({"name": "x", "people": "zed"}, "unknown person: zed"),
        (
            {"name": "x", "escalate_after_minutes": "0"},
            "escalate_after_minutes must be a whole number from 1",
        ),
    ):
        r = client.post("/people/groups/add/", data)
        assert r.status_code == 400 and message in r.content.decode(), data
    assert client.post("/people/groups/nope/edit/", {"people": ""}).status_code == 404
    assert client.post("/people/groups/nope/remove/").status_code == 404
    (agenvoy_home / "rules").write_text("ask[ops] mcp__every__*\n")
    r = client.post("/people/groups/ops/remove/")
    assert r.status_code == 400 and "group ops is used by rules" in r.content.decode()
    (agenvoy_home / "rules").write_text("")
    assert client.post("/people/groups/ops/remove/").status_code == 302
    assert list(Group.objects.values_list("name", flat=True)) == ["oncall"]
    actions = list(AuditEntry.objects.filter(object="ops").order_by("pk").values_list("action", flat=True))
    assert actions == ["group.add", "group.edit", "group.remove"]


# --- the one-time link 24 hours on, on a real serve whose clock moves (libfaketime) --------------

LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), Path("/nonexistent"))


@pytest.mark.live
@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="needs libfaketime")
def test_it_refuses_the_set_password_link_once_24_hours_have_passed(console):
    """The link is made by serve on the real clock; serve then runs again 23 and 25 hours later
    (libfaketime moves its whole process clock from start, as the retention test does)."""
    con = console({})
    web = signed_in(con, "boss")
    try:
        r = web.post(
            "/people/add/",
            data={"username": "late", "role": "viewer", "csrfmiddlewaretoken": web.cookies["csrftoken"]},
            headers={"Referer": con.url + "/people/"},
        )
        assert r.status_code == 200, r.text
        link = LINK.search(r.text).group(1)
    finally:
        web.close()
    with httpx2.Client(timeout=60) as them:
        for offset, opened in (("+23h", 302), ("+25h", 410)):
            con.stop()
            con.env.update(LD_PRELOAD=str(LIBFAKETIME), FAKETIME=offset)
            console.start(con)
            r = them.get(link, follow_redirects=opened == 410)
            assert r.status_code == opened, (offset, r.status_code)
        assert "This link is no longer valid" in r.text
