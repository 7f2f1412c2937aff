"""SPEC 15 / issue 14 with the Django test client: a confirmation's own page, the Notifications
page, the feed behind browser notifications, htmx history restore and `Vary: HX-Request`."""

import json
import os
import re
import subprocess
import sys

import pytest
from django.contrib.auth.models import User

from mcpcore.models import AuditEntry, Delivery, NotificationTarget, ToolCall
from tests.live import ROOT
from tests.rows import add_tools, make_call, write_servers

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def signed_in(client, db):
    client.force_login(User.objects.create_user("op"))
    return client


@pytest.fixture
def every(agenvoy_home):
    write_servers(agenvoy_home, {"every": {"command": "node", "args": ["index.js", "stdio"]}})
    return add_tools("every", ["echo", "get-sum"])


# --- a confirmation's own page ----------------------------------------------------------------


def test_it_shows_a_pending_confirmation_on_its_own_page_with_the_inbox_buttons(signed_in, every):
    call = make_call()
    r = signed_in.get(f"/pending/{call.confirm_id}/")
    assert r.status_code == 200
    html = r.content.decode()
    for label in ("Approve", "Approve and remember", "Approve for session", "Deny"):
        assert re.search(rf">\s*{label}\s*</button>", html), label
    assert f'for="reason-{call.confirm_id}">Reason</label>' in html
    assert f'action="/pending/{call.confirm_id}/reply/"' in html
    assert f'name="next" value="/pending/{call.confirm_id}/"' in html


def test_it_comes_back_to_the_confirmation_page_after_a_reply_and_says_how_it_ended(signed_in, every):
    call = make_call()
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/",
        {
            "session_id": call.session_id,
            "action": "deny",
            "reason": "not now",
            "next": f"/pending/{call.confirm_id}/",
        },
    )
    assert r.status_code == 302 and r["Location"] == f"/pending/{call.confirm_id}/"
    html = signed_in.get(r["Location"]).content.decode()
    assert "Denied by op at " in html and "Reason: not now" in html
    assert ">Approve</button>" not in html
    assert f'href="/history/{call.id}/"' in html


@pytest.mark.parametrize(
    "fields,said",
    [
        ({"status": "done", "decision": "approve", "decided_by": "ann"}, "Approved by ann"),
        (
            {"status": "running", "decision": "remember", "decided_by": "ann"},
            "Approved and remembered by ann",
        ),
        (
            {"status": "done", "decision": "session", "decided_by": "ann"},
            "Approved for session sess-1 by ann",
        ),
        ({"status": "expired", "decision": "expired", "decided_by": "timeout"}, "Expired"),
        ({"status": "aborted", "decision": "abort", "decided_by": "ann"}, "Stopped by ann"),
        ({"status": "cancelled"}, "Ended (cancelled)"),
    ],
)
def test_it_says_how_an_ended_confirmation_ended(signed_in, every, fields, said):
    call = make_call()
    ToolCall.objects.filter(id=call.id).update(**fields)
    assert said in signed_in.get(f"/pending/{call.confirm_id}/").content.decode()


def test_it_answers_404_for_an_unknown_confirmation_and_sends_strangers_to_sign_in(client, signed_in, every):
    assert signed_in.get("/pending/00000000-0000-0000-0000-000000000000/").status_code == 404
    call = make_call()
    signed_in.logout()
    r = client.get(f"/pending/{call.confirm_id}/")
    assert r.status_code == 302 and r["Location"].startswith("/login/")


def test_it_links_each_inbox_item_to_its_page(signed_in, every):
    call = make_call()
    assert f'href="/pending/{call.confirm_id}/"' in signed_in.get("/pending/").content.decode()


def test_it_feeds_the_browser_what_waits(signed_in, every):
    call = make_call(tool="get-sum")
    make_call(status="done")
    body = signed_in.get("/pending/feed/").json()
    assert body == {
        "pending": [
            {
                "id": str(call.confirm_id),
                "tool": "get-sum",
                "server": "every",
                "url": f"/pending/{call.confirm_id}/",
            }
        ]
    }


@pytest.mark.parametrize("value", ["ftp://example.com", "console.example", "https://"])
def test_it_stops_start_up_on_a_public_url_that_is_not_http(tmp_path, value):
    env = {**os.environ, "AGENVOY_DATA_DIR": str(tmp_path), "AGENVOY_PUBLIC_URL": value}
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode != 0 and "AGENVOY_PUBLIC_URL must be an http:// or https:// address" in out.stderr


def test_it_reads_the_public_url_without_a_trailing_slash(tmp_path):
    env = {**os.environ, "AGENVOY_DATA_DIR": str(tmp_path), "AGENVOY_PUBLIC_URL": "https://approve.example/"}
    code = "from django.conf import settings; print(settings.AGENVOY_PUBLIC_URL)"
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "https://approve.example", out.stderr


# --- the Notifications page -------------------------------------------------------------------


def test_it_has_a_notifications_link_and_a_notify_me_button_on_signed_in_pages(signed_in, every):
    html = signed_in.get("/").content.decode()
    assert '<a href="/notifications/">Notifications</a>' in html
    assert 'id="notify-me"' in html and ">Notify me</button>" in html


def test_it_adds_a_webhook_and_shows_its_secret_once(signed_in):
    r = signed_in.post("/notifications/", {"kind": "webhook", "url": "https://hooks.example/agenvoy"})
    assert r.status_code == 200 and r["Cache-Control"] == "no-store"
    target = NotificationTarget.objects.get()
    assert (target.kind, target.url, target.created_by) == ("webhook", "https://hooks.example/agenvoy", "op")
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/=]{40,}", target.secret)
    assert target.secret in r.content.decode()
    again = signed_in.get("/notifications/").content.decode()
    assert target.secret not in again and "https://hooks.example/agenvoy" in again


def test_it_adds_an_ntfy_topic_without_a_secret(signed_in):
    r = signed_in.post("/notifications/", {"kind": "ntfy", "url": "https://ntfy.sh/agenvoy-ops"})
    assert r.status_code == 200
    assert NotificationTarget.objects.get().secret == ""
    assert "whsec_" not in r.content.decode()


WARNING = "Anyone who can read this topic can approve from it."


def test_it_warns_that_anyone_who_reads_an_ntfy_topic_without_a_token_can_approve(signed_in):
    signed_in.post("/notifications/", {"kind": "ntfy", "url": "https://ntfy.sh/agenvoy-open"})
    signed_in.post("/notifications/", {"kind": "webhook", "url": "https://hooks.example/a"})
    open_topic, hook = NotificationTarget.objects.order_by("pk")
    html = signed_in.get("/notifications/").content.decode()
    assert WARNING in card(html, open_topic) and WARNING not in card(html, hook)


def test_it_keeps_an_ntfy_access_token_and_never_shows_it_again(signed_in):
    token = "tk_AgvSecret0123456789"
    r = signed_in.post("/notifications/", {"kind": "ntfy", "url": "https://ntfy.example/ops", "token": token})
    assert r.status_code == 200 and token not in r.content.decode()
    target = NotificationTarget.objects.get()
    assert (target.kind, target.secret) == ("ntfy", token)
    html = signed_in.get("/notifications/").content.decode()
    assert token not in html and WARNING not in card(html, target) and "********" in card(html, target)
    added = AuditEntry.objects.get(action="notify.add")
    assert added.after == {"kind": "ntfy", "url": "https://ntfy.example/ops", "access_token": "********"}
    signed_in.post(f"/notifications/{target.pk}/remove/")
    removed = AuditEntry.objects.get(action="notify.remove")
    assert removed.before["access_token"] == "********"
    assert token not in json.dumps(list(AuditEntry.objects.values()), default=str)
    assert token not in signed_in.get("/audit/").content.decode()


def card(html: str, target: NotificationTarget) -> str:
    """One target's card on the Notifications page."""
    start = html.index(f'id="target-{target.pk}"')
    end = html.find("</section>", start)
    return html[start:end]


@pytest.mark.parametrize(
    "data,error",
    [
        (
            {"kind": "webhook", "url": "https://x.example/", "token": "tk_1"},
            "Only ntfy targets take an access token.",
        ),
        ({"kind": "ntfy", "url": "https://x.example/", "token": "tk 1"}, "An access token has no spaces"),
        ({"kind": "ntfy", "url": "https://x.example/", "token": "t" * 201}, "That access token is too long"),
        ({"kind": "email", "url": "https://x.example/"}, "Choose a kind"),
        ({"kind": "webhook", "url": "ftp://x.example/"}, "Enter an http:// or https:// URL."),
        ({"kind": "webhook", "url": ""}, "Enter an http:// or https:// URL."),
    ],
)
def test_it_refuses_a_bad_target(signed_in, data, error):
    r = signed_in.post("/notifications/", data)
    assert r.status_code == 400 and error in r.content.decode()
    assert not NotificationTarget.objects.exists()


def test_it_queues_a_test_and_lists_deliveries_then_removes_the_target(signed_in):
    signed_in.post("/notifications/", {"kind": "webhook", "url": "https://hooks.example/a"})
    target = NotificationTarget.objects.get()
    r = signed_in.post(f"/notifications/{target.pk}/test/", follow=True)
    delivery = Delivery.objects.get()
    assert (delivery.target, delivery.event_type, delivery.status) == (target, "test", "pending")
    html = r.content.decode()
    assert "Test queued" in html and f'id="delivery-{delivery.pk}"' in html
    Delivery.objects.filter(pk=delivery.pk).update(status="sent", last_status_code=204)
    fragment = signed_in.get("/notifications/", **HTMX).content.decode()
    assert fragment.lstrip().startswith('<div id="notification-targets"') and ">204<" in fragment
    assert "Send a test" in fragment
    r = signed_in.post(f"/notifications/{target.pk}/remove/", follow=True)
    assert "Removed webhook target https://hooks.example/a" in r.content.decode()
    assert not NotificationTarget.objects.exists() and not Delivery.objects.exists()


def test_it_keeps_the_notifications_page_for_signed_in_people(client):
    assert client.get("/notifications/").status_code == 302
    assert client.post("/notifications/", {"kind": "ntfy", "url": "https://ntfy.sh/x"}).status_code == 302
    assert not NotificationTarget.objects.exists()


# --- htmx history restore ---------------------------------------------------------------------

RESTORE = {"HTTP_HX_REQUEST": "true", "HTTP_HX_HISTORY_RESTORE_REQUEST": "true"}


def test_it_answers_a_history_restore_with_the_whole_page(signed_in, every):
    make_call(status="done", result="ok")
    fragment = signed_in.get("/history/", **HTMX)
    assert fragment.content.decode().lstrip().startswith('<div id="call-table">')
    assert "HX-Request" in fragment["Vary"]
    whole = signed_in.get("/history/", **RESTORE)
    html = whole.content.decode()
    assert (
        html.startswith("<!doctype html>") and '<nav aria-label="Main">' in html and 'id="call-table"' in html
    )
    assert "HX-Request" in whole["Vary"]
    assert "HX-Request" in signed_in.get("/history/")["Vary"]


@pytest.mark.parametrize("url", ["/", "/pending/", "/tokens/", "/servers/every/", "/notifications/"])
def test_it_varies_on_hx_request_and_restores_every_page_whole(signed_in, every, url):
    for headers in ({}, HTMX, RESTORE):
        r = signed_in.get(url, **headers)
        assert r.status_code == 200 and "HX-Request" in r["Vary"], (url, headers)
    assert signed_in.get(url, **RESTORE).content.decode().startswith("<!doctype html>")
    assert not signed_in.get(url, **HTMX).content.decode().startswith("<!doctype html>")


def test_it_varies_on_hx_request_for_action_fragments(signed_in, every):
    call = make_call()
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/", {"session_id": call.session_id, "action": "approve"}, **HTMX
    )
    assert r.status_code == 200 and "HX-Request" in r["Vary"]
