"""SPEC 23.1 across web processes: a role changed on web 1 holds on web 2 at the next request,
and deactivating a person ends their sessions on both (sessions and roles are in the database
every process reads; nothing of them is kept in one process's memory)."""

import re
from contextlib import closing

import httpx2
import pytest

pytestmark = pytest.mark.scaleout

PASSWORD = "people-pass-2301"


def post(b: httpx2.Client, path: str, data: dict) -> httpx2.Response:
    """A form posted as the page's browser does (the CSRF cookie's token in the form)."""
    return b.post(path, data={**data, "csrfmiddlewaretoken": b.cookies["csrftoken"]})


def browser(base: str, user: str) -> httpx2.Client:
    b = httpx2.Client(base_url=base, timeout=30)
    b.get("/login/")
    r = post(b, "/login/", {"username": user, "password": PASSWORD})
    assert r.status_code == 302, r.text[:500]
    return b


def test_it_holds_a_role_changed_on_one_web_process_on_the_other_and_ends_sessions_on_both(cluster):
    web1, web2 = cluster.webs
    cluster.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from mcpcore.models import Person; "
        f"User.objects.create_user('boss', password={PASSWORD!r}); "
        f"Person.objects.create(user=User.objects.create_user('ann', password={PASSWORD!r}), role='approver')",
    )
    with (
        closing(browser(web1, "boss")) as boss,
        closing(browser(web1, "ann")) as ann1,
        closing(browser(web2, "ann")) as ann2,
    ):
        assert ann2.get("/pending/").status_code == 200
        refused = ann2.get("/tokens/")
        assert refused.status_code == 403 and "Your role (approver) may not manage tokens." in refused.text
        pk = re.search(
            r'action="/people/(\d+)/edit/"[^>]*>(?:(?!</tr>).)*Role of ann', boss.get("/people/").text, re.S
        )
        assert pk, "no form for ann"
        ann_pk = pk.group(1)

        assert post(boss, f"/people/{ann_pk}/edit/", {"role": "admin", "groups": ""}).status_code == 302
        assert ann2.get("/tokens/").status_code == 200  # web 2, next request: an admin
        assert post(boss, f"/people/{ann_pk}/edit/", {"role": "viewer", "groups": ""}).status_code == 302
        refused = ann2.get("/rules/")
        assert refused.status_code == 200 and 'id="rules-editor"' not in refused.text
        assert "Your role (viewer) may not change rules." in post(ann2, "/rules/", {"rules": "deny *"}).text

        assert post(boss, f"/people/{ann_pk}/active/", {"active": "0"}).status_code == 302
        for theirs in (ann1, ann2):
            r = theirs.get("/pending/")
            assert r.status_code == 302 and r.headers["Location"].startswith("/login/")
        # Signing in again is refused too while deactivated.
        again = httpx2.Client(base_url=web2, timeout=30)
        again.get("/login/")
        r = post(again, "/login/", {"username": "ann", "password": PASSWORD})
        assert r.headers.get("Location") == "/accounts/inactive/", (r.status_code, r.headers.get("Location"))
        assert again.get("/pending/").status_code == 302
        again.close()
