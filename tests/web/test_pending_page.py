"""The Pending page: confirmations with their arguments and time left, the replies, and session allowances.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import datetime
import re
import uuid

import pytest
from django.utils import timezone

from mcpcore import calls
from mcpcore.models import SessionAllowance, ToolCall
from tests.rows import make_call
from tests.web.pages import allow_lines

pytestmark = pytest.mark.django_db


def test_it_lists_pending_calls_with_arguments_time_left_and_the_four_buttons(signed_in, every):
    call = make_call(arguments={"message": "hi", "n": 2})
    html = signed_in.get("/pending/").content.decode()
    item = re.search(
        rf'<article class="card pending" id="pending-{call.confirm_id}".*?</article>', html, re.S
    ).group(0)
    assert "echo" in item and "every" in item and "sess-1" in item
    assert "&quot;message&quot;: &quot;hi&quot;,\n  &quot;n&quot;: 2" in item
    assert re.search(r'data-expires="[^"]+"[^>]*>4:5\d</time> left', item)
    for button in ("Approve", "Approve and remember", "Approve for session", "Deny"):
        assert f">{button}</button>" in item
    assert re.search(r'<label for="reason-[^"]+">Reason</label>', item)
    assert re.search(r'id="pending-badge"[^>]*>1</span>', html)


@pytest.mark.parametrize("action", ["approve", "remember", "session", "deny"])
def test_it_applies_a_reply_to_a_pending_call(signed_in, every, agenvoy_home, action):
    status = "skipped" if action == "deny" else "running"
    call = make_call()
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/",
        {"session_id": "sess-1", "action": action, "reason": "not today"},
    )
    assert r.status_code == 302 and r["Location"] == "/pending/"
    call.refresh_from_db()
    assert (call.status, call.decision, call.decided_by) == (status, action, "op")
    if action == "deny":
        assert call.result == "Skipped by user. Reason: not today" and call.reason == "not today"
    if action == "remember":
        assert allow_lines(agenvoy_home) == ["mcp__every__echo"]
    if action == "session":
        assert SessionAllowance.objects.filter(session_id="sess-1", revoked_at__isnull=True).exists()


def test_it_denies_without_a_reason(signed_in, every):
    call = make_call()
    signed_in.post(f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "deny"})
    call.refresh_from_db()
    assert call.status == "skipped" and call.result == "Skipped by user"


def test_it_says_so_when_a_confirmation_is_already_decided_or_unknown(signed_in, every):
    call = make_call()
    signed_in.post(f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "approve"})
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "deny"}, follow=True
    )
    assert r.status_code == 200 and "confirmation already resolved or expired" in r.content.decode()
    r = signed_in.post(
        f"/pending/{uuid.uuid4()}/reply/", {"session_id": "sess-1", "action": "approve"}, follow=True
    )
    assert "confirmation not found" in r.content.decode()
    r = signed_in.post("/pending/not-a-uuid/reply/", {"session_id": "x", "action": "approve"}, follow=True)
    assert r.status_code == 200 and "confirmation not found" in r.content.decode()
    r = signed_in.post(f"/pending/{call.confirm_id}/reply/", {"action": "maybe"}, follow=True)
    assert r.status_code == 200 and "not understood" in r.content.decode()


def test_it_says_so_when_a_confirmation_has_expired(signed_in, every):
    call = make_call(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "approve"}, follow=True
    )
    assert "already resolved or expired" in r.content.decode()
    call.refresh_from_db()
    assert call.status == "expired"


def test_it_answers_an_htmx_reply_with_the_list_badge_and_message(signed_in, every):
    first, second = make_call(), make_call(session_id="sess-2")
    r = signed_in.post(
        f"/pending/{first.confirm_id}/reply/",
        {"session_id": "sess-1", "action": "approve"},
        headers={"HX-Request": "true"},
    )
    html = r.content.decode()
    assert html.lstrip().startswith('<div id="pending-list"')
    assert f"pending-{second.confirm_id}" in html and f"pending-{first.confirm_id}" not in html
    assert re.search(r'id="pending-badge"[^>]*hx-swap-oob="true">1</span>', html)
    assert 'id="messages"' in html and "Approved: mcp__every__echo." in html
    assert 'id="allowances"' in html


def test_it_revokes_a_session_allowance(signed_in, every):
    row = SessionAllowance.objects.create(session_id="sess-9", granted_by="op")
    assert "sess-9" in signed_in.get("/pending/").content.decode()
    r = signed_in.post(f"/pending/allowances/{row.pk}/revoke/", headers={"HX-Request": "true"})
    row.refresh_from_db()
    assert row.revoked_at is not None and "sess-9" not in r.content.decode().split('id="messages"')[0]
    assert not calls.session_allowed(None, "sess-9")


# --- prompts and resources (SPEC 20.3) ------------------------------------------------------------

URI = "file:///srv/docs/" + "q" * 760 + ".md"


def pending_prompt_and_resource():
    prompt = make_call(
        kind="prompt", tool="review", arguments={"style": "terse"}, rule="ask prompt:mcp__every__*"
    )
    resource = make_call(
        kind="resource", tool="", tool_name=URI[:700], arguments={"uri": URI}, rule="ask resource:*(uri:*)"
    )
    return prompt, resource


def card(html: str, call) -> str:
    return re.search(
        rf'<article class="card pending[^"]*" id="pending-{call.confirm_id}".*?</article>', html, re.S
    ).group(0)


def test_it_says_get_prompt_and_read_uri_and_offers_approve_once_or_deny(signed_in, every):
    prompt, resource = pending_prompt_and_resource()
    html = signed_in.get("/pending/").content.decode()
    item = card(html, prompt)
    assert (
        ">Get prompt mcp__every__review</a></h2>" in item and "&quot;style&quot;: &quot;terse&quot;" in item
    )
    assert "<dt>Prompt</dt>" in item and 'data-kind="prompt"' in item
    item = card(html, resource)
    assert (
        f">Read {URI} from every</a></h2>" in item
        and f'<dt>URI</dt><dd class="break"><code>{URI}</code>' in item
    )
    for item in (card(html, prompt), card(html, resource)):
        assert ">Approve</button>" in item and ">Deny</button>" in item
        for hidden in ("Approve and remember", "Approve for session", "Approve for 1 hour"):
            assert hidden not in item
    detail = signed_in.get(f"/pending/{resource.confirm_id}/").content.decode()
    assert f'<h1 class="break">Read {URI} from every</h1>' in detail and "Approve for session" not in detail


@pytest.mark.parametrize("action", ["remember", "session", "hour"])
def test_it_refuses_to_remember_a_prompt_or_resource_approval(signed_in, every, agenvoy_home, action):
    prompt, resource = pending_prompt_and_resource()
    for call in (prompt, resource):
        signed_in.post(f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": action})
        call.refresh_from_db()
        assert call.status == "pending"
    assert not SessionAllowance.objects.exists() and allow_lines(agenvoy_home) == []
    signed_in.post(f"/pending/{prompt.confirm_id}/reply/", {"session_id": "sess-1", "action": "approve"})
    prompt.refresh_from_db()
    assert (prompt.status, prompt.decision) == ("running", "approve")


def test_it_answers_400_to_remember_session_or_a_grant_for_a_prompt_or_resource_over_the_api(api, every):
    prompt, resource = pending_prompt_and_resource()
    for call in (prompt, resource):
        for body in (
            {"approve": True, "remember": True},
            {"approve": True, "allow_turn": True},
            {"approve": True, "remember_for": 3600},
        ):
            r = api.post(f"/v1/session/sess-1/confirm/{call.confirm_id}", body)
            assert r.status_code == 400, r.content
            assert r.json() == {
                "error": f"a {call.kind} call is approved once or denied: remember, allow_turn and remember_for do not apply"
            }
    r = api.post(f"/v1/session/sess-1/confirm/{resource.confirm_id}", {"approve": False, "reason": "no"})
    assert r.status_code == 200 and ToolCall.objects.get(id=resource.id).status == "skipped"


def test_it_lists_prompt_and_resource_confirmations_with_their_kind_and_uri(api, every):
    prompt, resource = pending_prompt_and_resource()
    items = {i["call_id"]: i for i in api.get("/v1/pending").json()["pending"]}
    assert items[str(prompt.id)]["kind"] == "prompt" and "uri" not in items[str(prompt.id)]
    assert items[str(prompt.id)]["tool_name"] == "mcp__every__review"
    item = items[str(resource.id)]
    assert (item["kind"], item["uri"], item["tool_name"]) == ("resource", URI, URI[:700])


def test_it_shows_a_prompt_or_resource_on_the_one_tap_page(client, every, settings):
    from mcpcore import onetap
    from mcpcore.calls import notify

    prompt, resource = pending_prompt_and_resource()
    target, _ = notify.add_target("ntfy", "http://127.0.0.1:9/t")
    for call, heading in ((prompt, "Get prompt mcp__every__review"), (resource, f"Read {URI} from every")):
        link = onetap.url("", settings.SECRET_KEY, call.confirm_id, onetap.APPROVE, target.pk)
        html = client.get(link).content.decode()
        assert f'<h1 class="break">{heading}</h1>' in html and ">Approve</button>" in html


# --- Extend (SPEC 24.4) ---------------------------------------------------------------------------


def test_it_offers_extend_in_the_inbox_and_on_the_confirmations_page(signed_in, every, settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 900
    call = make_call(expires_at=timezone.now() + datetime.timedelta(seconds=30))
    extend_form = rf'<form class="extend" method="post" action="/pending/{call.confirm_id}/extend/"'
    for page in ("/pending/", f"/pending/{call.confirm_id}/"):
        item = card(signed_in.get(page).content.decode(), call)
        assert re.search(extend_form, item) and ">Extend</button>" in item, page
    r = signed_in.post(f"/pending/{call.confirm_id}/extend/", headers={"HX-Request": "true"})
    call.refresh_from_db()
    assert 895 < (call.expires_at - timezone.now()).total_seconds() <= 900
    html = r.content.decode()
    assert html.lstrip().startswith('<div id="pending-list"') and "Extended: mcp__every__echo" in html
    # The list re-renders with the new time (its signature changed with the expiry).
    assert re.search(r">1[45]:\d\d</time> left", card(html, call))
    r = signed_in.post(f"/pending/{call.confirm_id}/extend/", {"next": f"/pending/{call.confirm_id}/"})
    assert r.status_code == 302 and r["Location"] == f"/pending/{call.confirm_id}/"


def test_it_says_so_when_an_extension_would_pass_24_hours_or_the_call_has_ended(signed_in, every):
    call = make_call(created_at=timezone.now() - datetime.timedelta(hours=23, minutes=58))
    before = call.expires_at
    r = signed_in.post(f"/pending/{call.confirm_id}/extend/", follow=True)
    assert "Not extended: cannot extend past 24 hours." in r.content.decode()
    call.refresh_from_db()
    assert call.expires_at == before
    done = make_call(status="skipped", confirm_id=uuid.uuid4())
    r = signed_in.post(f"/pending/{done.confirm_id}/extend/", follow=True)
    assert "Not extended: confirmation already resolved or expired." in r.content.decode()


# --- Edit and approve (SPEC 24.5) -----------------------------------------------------------------


def test_it_offers_edit_and_approve_on_a_tool_calls_page_with_its_arguments_and_schema(signed_in, every):
    call = make_call(arguments={"message": "hi", "count": 2})
    html = signed_in.get(f"/pending/{call.confirm_id}/").content.decode()
    form = re.search(r'<form class="edit".*?</form>', html, re.S).group(0)
    assert f'action="/pending/{call.confirm_id}/edit/"' in form and ">Edit and approve</button>" in form
    assert re.search(
        r"<textarea[^>]*name=\"arguments\"[^>]*>\n?\{\n  &quot;message&quot;: &quot;hi&quot;,\n  &quot;count&quot;: 2\n\}</textarea>",
        form,
    )
    assert re.search(r'<label for="edit-[^"]+">Arguments</label>', form)
    assert "&quot;required&quot;: [\n    &quot;message&quot;\n  ]" in html  # the tool's input schema, shown
    # Not in the inbox's card, and not for a prompt (only a tool call's arguments change).
    assert 'class="edit"' not in signed_in.get("/pending/").content.decode()
    prompt = make_call(kind="prompt", tool="review", arguments={"style": "terse"})
    assert 'class="edit"' not in signed_in.get(f"/pending/{prompt.confirm_id}/").content.decode()


def test_it_runs_the_changed_arguments_and_history_shows_both(signed_in, every):
    call = make_call(arguments={"message": "hi"})
    r = signed_in.post(f"/pending/{call.confirm_id}/edit/", {"arguments": '{"message": "bye", "loud": true}'})
    assert r.status_code == 302 and r["Location"] == f"/pending/{call.confirm_id}/"
    call.refresh_from_db()
    assert call.status == "running" and call.arguments == {"message": "bye", "loud": True}
    assert (
        call.requested_arguments == {"message": "hi"} and call.edited_by == "op" and call.decided_by == "op"
    )
    history = signed_in.get("/history/").content.decode()
    row = re.search(
        rf'<tr[^>]*>(?:(?!</tr>).)*href="/history/{call.id}/"(?:(?!</tr>).)*</tr>', history, re.S
    ).group(0)
    assert "Changed by op" in row and "&quot;bye&quot;" in row and "&quot;hi&quot;" in row
    page = signed_in.get(f"/history/{call.id}/").content.decode()
    assert "Arguments as asked" in page and "Arguments as run" in page and "Changed by</dt><dd>op" in page
    assert "&quot;message&quot;: &quot;hi&quot;" in page and "&quot;message&quot;: &quot;bye&quot;" in page


@pytest.mark.parametrize(
    "typed, said",
    [
        (
            '{"message": 7}',
            "arguments do not match the tool&#x27;s schema: message: 7 is not of type &#x27;string&#x27;",
        ),
        ("{not json", "arguments must be a JSON object"),
        ('["a"]', "arguments must be a JSON object"),
    ],
)
def test_it_says_what_is_wrong_with_changed_arguments_and_keeps_them_in_the_form(
    signed_in, every, typed, said
):
    call = make_call()
    r = signed_in.post(f"/pending/{call.confirm_id}/edit/", {"arguments": typed})
    html = r.content.decode()
    assert r.status_code == 400 and said in html
    form = re.search(r'<form class="edit".*?</form>', html, re.S).group(0)
    assert said in form and typed.replace('"', "&quot;") in form and 'aria-invalid="true"' in form
    call.refresh_from_db()
    assert call.status == "pending" and call.arguments == {"message": "hi"}


def test_it_says_a_deny_rule_now_matches_changed_arguments(signed_in, every, agenvoy_home):
    (agenvoy_home / "rules").write_text("deny mcp__every__echo(message:rm *)\n")
    call = make_call()
    r = signed_in.post(f"/pending/{call.confirm_id}/edit/", {"arguments": '{"message": "rm -rf /"}'})
    assert (
        r.status_code == 400 and "Denied by rule: deny mcp__every__echo(message:rm *)" in r.content.decode()
    )
    call.refresh_from_db()
    assert call.status == "pending"


# --- Many at once (SPEC 24.6) ---------------------------------------------------------------------


def test_it_offers_a_checkbox_per_confirmation_and_approve_or_deny_selected(signed_in, every):
    first, second = make_call(), make_call(arguments={"message": "other"})
    html = signed_in.get("/pending/").content.decode()
    batch = re.search(r'<form id="pending-batch".*?</form>', html, re.S).group(0)
    assert 'action="/pending/decide/"' in batch
    assert ">Approve selected</button>" in batch and ">Deny selected</button>" in batch
    assert re.search(r'<label for="batch-reason">Reason</label>', batch)
    for call in (first, second):
        box = re.search(
            rf'<input type="checkbox"[^>]*value="{call.confirm_id}"[^>]*>', card(html, call)
        ).group(0)
        assert 'name="ids"' in box and 'form="pending-batch"' in box


def test_it_denies_the_selected_confirmations_with_one_reason(signed_in, every):
    first, second, kept = (
        make_call(),
        make_call(arguments={"message": "b"}),
        make_call(arguments={"message": "c"}),
    )
    r = signed_in.post(
        "/pending/decide/",
        {"ids": [str(first.confirm_id), str(second.confirm_id)], "action": "deny", "reason": "not now"},
        follow=True,
    )
    assert "Denied 2 of 2." in r.content.decode()
    for call in (first, second):
        call.refresh_from_db()
        assert (call.status, call.result, call.decided_by) == (
            "skipped",
            "Skipped by user. Reason: not now",
            "op",
        )
    kept.refresh_from_db()
    assert kept.status == "pending"


def test_it_shows_identical_calls_of_one_token_as_one_row_whose_buttons_decide_them_all(signed_in, every):
    from mcpcore.models import ApiToken

    token, _ = ApiToken.issue("bot")
    same = [make_call(token=token, session_id=f"s-{i}") for i in range(3)]
    other_args = make_call(token=token, arguments={"message": "else"})
    other_token = make_call(token=ApiToken.issue("bot-2")[0])
    html = signed_in.get("/pending/").content.decode()
    row = card(html, same[0])
    assert re.search(r'<span class="pill count"[^>]*>×3</span>', row)
    assert f"pending-{same[1].confirm_id}" not in html and f"pending-{same[2].confirm_id}" not in html
    assert card(html, other_args) and card(html, other_token)
    box = re.search(r'<input type="checkbox"[^>]*name="ids"[^>]*>', row).group(0)
    assert ",".join(str(c.confirm_id) for c in same) in box
    r = signed_in.post(
        "/pending/decide/",
        {"ids": [",".join(str(c.confirm_id) for c in same)], "action": "approve"},
        headers={"HX-Request": "true"},
    )
    assert "Approved 3 of 3." in r.content.decode()
    assert all(c.status == "running" for c in ToolCall.objects.filter(id__in=[c.id for c in same]))
    assert ToolCall.objects.get(id=other_args.id).status == "pending"
    # The row's own Approve and Deny post all of its ids.
    forms = re.findall(r'<form class="(?:approve|deny)"[^>]*action="/pending/decide/".*?</form>', row, re.S)
    assert len(forms) == 2 and all(f.count('name="ids"') == 3 for f in forms)
