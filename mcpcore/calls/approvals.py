"""What lets a call run without asking a person, and permission prompts (SPEC 13.5), decided by
the same gate. `allow_tool` and the argument rules (read from their files, kept until the
file's stat changes), "approve for session" allowances, permission grants (remembered, or for
a time, SPEC 17.3), and a token's revocation, which ends its allowances and grants."""

import datetime
import functools
import json

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .. import allowlist, audit, files, gate, rules, schemas
from ..choices import AuditAction, CallDecision, CallKind, CallStatus, Mode
from ..db import cache
from ..models import AllowEntry, ApiToken, AppGrant, PermissionGrant, SessionAllowance, Tool, ToolCall, iso
from ..oauth import grants
from . import guards
from .record import TOKEN_REVOKED, checked, finish, record

_matcher: dict = {"key": None, "match": None}


def allowed(tool_name: str) -> bool:
    """Whether `allow_tool` (the shared truth) allows the tool. The parsed matcher is kept
    until the file's stat changes; an unreadable file falls back to the mirrored table."""
    key = files.stat_key(files.ALLOW_TOOL)
    if key is None or key != _matcher["key"]:
        try:
            entries = files.read_allow_tool()
        except files.ConfigFileError:
            entries, key = list(AllowEntry.objects.values_list("entry", flat=True)), None
        _matcher["key"], _matcher["match"] = key, allowlist.Matcher(entries)
    return _matcher["match"](tool_name)


def trusted(tool: Tool) -> bool:
    """Whether `allow_tool` trusts the tool now. A tool with a definition digest is trusted only
    with its pin written (SPEC 14.1: pinned at the moment it becomes trusted), so no definition
    can change between trust and pin unseen. An entry another program wrote that the file's
    pick-up has not reached yet is pinned here, by the first call that sees it: the call runs
    at once, as SPEC 2.2 has it, instead of waiting for a person (issue 39.7)."""
    name = tool.registered_name
    if not allowed(name):
        return False
    if not tool.digest or cache.pin(name):
        return True
    files.pin_if_listed(name)
    return bool(cache.pin(name))


_rules: dict = {"key": None, "set": None}


def rules_in_force() -> rules.RuleSet:
    """The argument rules (SPEC 14.2), read like `allowed` reads `allow_tool`: kept until the
    file's stat changes; a file with a bad line gives the last good (mirrored) rules."""
    key = files.stat_key(files.RULES)
    if key is None or key != _rules["key"]:
        found, _ = files.current_rules(mirror=True)
        _rules["key"], _rules["set"] = key, rules.RuleSet(found)
    return _rules["set"]


def ruling(
    tool_name: str, arguments: dict, form: str | None = None, in_force: rules.RuleSet | None = None
) -> gate.Found | None:
    """The rule that decides a call checked under `tool_name`, with who decides an `ask`
    (SPEC 24.1, 24.2), or None; `form` as `RuleSet.check` takes it; `in_force` the rules
    already read for this call (one look at the file per call)."""
    rule = (rules_in_force() if in_force is None else in_force).check(tool_name, arguments, form)
    if rule is None:
        return None
    return gate.Found(rule.decision, rule.text, rule.group or "", rule.approvals)


def rule_for(tool_name: str, arguments: dict, form: str | None = None) -> tuple[str, str] | None:
    """(decision, line) of the rule that decides a call checked under `tool_name`, or None."""
    found = ruling(tool_name, arguments, form)
    return (found.decision, found.line) if found is not None else None


def limited(
    token: ApiToken | None,
    tool_name: str,
    arguments: dict,
    form: str | None = None,
    in_force: rules.RuleSet | None = None,
) -> tuple[str, int] | None:
    """A call checked under `tool_name` counted under the limit lines that match it (SPEC
    25.1, `guards.limited`): the line it goes over and the seconds until one more fits, or None.
    `in_force`: the rules `rule_for` read for the same call (the gate asks both for every
    call; a second read is a second stat of the rules file)."""
    if token is None:
        return None
    return guards.limited(
        token, (rules_in_force() if in_force is None else in_force).limits(tool_name, arguments, form)
    )


def session_allowed(token: ApiToken | None, session_id: str) -> bool:
    """Whether "approve for session" is in force for this token and session id (SPEC 12.2):
    another token sending the same session id gets nothing."""
    return SessionAllowance.objects.filter(
        session_id=session_id, token=token, revoked_at__isnull=True
    ).exists()


def allow_session(call: ToolCall, who: str, by: audit.Actor) -> SessionAllowance:
    """Make "approve for session" of `call` (SPEC 12.2): bound to the token that made the call,
    not to whoever replied; audited as `by`'s."""
    row = SessionAllowance.objects.create(session_id=call.session_id, token_id=call.token_id, granted_by=who)
    audit.record(
        AuditAction.ALLOWANCE_ADD, call.session_id, actor=by, after=allowance_state(row, call.tool_name)
    )
    return row


def granted(token: ApiToken | None, kind: str, tool_name: str) -> bool:
    """Whether a grant of `tool_name` to this token is in force for calls of `kind`."""
    if token is None:
        return False
    return PermissionGrant.in_force().filter(token=token, kind=kind, tool_name=tool_name).exists()


def grant(
    token: ApiToken | None, kind: str, tool_name: str, who: str, seconds: int, by: audit.Actor | None = None
) -> PermissionGrant | None:
    """Grant `tool_name` to the token for `seconds` (SPEC 17.3): later calls of that tool by that
    token, in any session, run at once until then. A grant of the same tool already in force
    lasts to the later of the two ends; one without an end is left as it is."""
    if token is None:
        return None  # the console's own calls (try-it) have no token to grant to
    now = timezone.now()
    until = now + datetime.timedelta(seconds=seconds)
    rows = PermissionGrant.in_force(now).filter(token=token, kind=kind, tool_name=tool_name)
    current = rows.order_by(F("expires_at").desc(nulls_first=True)).first()
    if current is not None and (current.expires_at is None or current.expires_at >= until):
        return current
    by = by or audit.Actor(who)
    with transaction.atomic():
        if current is not None:
            before = permission_grant_state(current)
            PermissionGrant.objects.filter(pk=current.pk).update(expires_at=until, granted_by=who)
            current.expires_at, current.granted_by = until, who
        else:
            before = None
            current = PermissionGrant.objects.create(
                token=token, kind=kind, tool_name=tool_name, granted_by=who, created_at=now, expires_at=until
            )
        audit.record(
            AuditAction.ALLOWANCE_ADD,
            tool_name,
            actor=by,
            before=before,
            after=permission_grant_state(current),
        )
    return current


def remember_permission(
    token: ApiToken | None, tool_name: str, who: str, by: audit.Actor | None = None
) -> PermissionGrant | None:
    """Remember `tool_name` for the token (once: an existing grant in force is kept)."""
    if token is None:
        return None
    found = PermissionGrant.objects.filter(
        token=token, kind=CallKind.PERMISSION_PROMPT, tool_name=tool_name, revoked_at__isnull=True
    ).filter(expires_at__isnull=True)
    kept = found.first()
    if kept is not None:
        return kept
    with transaction.atomic():
        made = PermissionGrant.objects.create(
            token=token, kind=CallKind.PERMISSION_PROMPT, tool_name=tool_name, granted_by=who
        )
        audit.record(
            AuditAction.ALLOWANCE_ADD,
            tool_name,
            actor=by or audit.Actor(who),
            after=permission_grant_state(made),
        )
    return made


def permission_grant_revoke(grant_id: int, by: audit.Actor = audit.BY_SYSTEM) -> PermissionGrant | None:
    """Revoke a permission grant (remembered, or for a time); returns it when this call revoked
    it."""
    return _revoke(PermissionGrant, grant_id, by, lambda g: (g.tool_name, permission_grant_state(g)))


def revoke_allowance(allowance_id: int, by: audit.Actor) -> SessionAllowance | None:
    """End an "approve for session" allowance; returns it when this call ended it."""
    return _revoke(SessionAllowance, allowance_id, by, lambda a: (a.session_id, allowance_state(a)))


def _revoke(model, pk: int, by: audit.Actor, described):
    """Set `revoked_at` on one allowance or grant still in force, with its `allowance.revoke`
    row (`described(row)`: its object and state); the row when this call ended it."""
    row = model.objects.select_related("token").filter(pk=pk).first()
    if row is None:
        return None
    with transaction.atomic():
        changed = model.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if changed:
            object, state = described(row)
            audit.record(AuditAction.ALLOWANCE_REVOKE, object, actor=by, before=state)
    return row if changed else None


def allowance_state(row: SessionAllowance, tool_name: str = "") -> dict:
    """What the audit keeps of an "approve for session": for whom (the token; none for the
    console's own calls), which session, and the call's tool it was given on."""
    state = {
        "allowance": "session",
        "token": row.token.name if row.token else "",
        "session_id": row.session_id,
    }
    return {**state, "approved_on": tool_name} if tool_name else state


def permission_grant_state(row: PermissionGrant) -> dict:
    """What the audit keeps of a grant: what (the tool, of which kind of call), for whom, and
    until when (None: until revoked, "approve and remember")."""
    return {
        "allowance": "remember" if row.expires_at is None else "for a time",
        "token": row.token.name,
        "tool": row.tool_name,
        "kind": row.kind,
        "until": iso(row.expires_at),
    }


# --- permission prompts (SPEC 13.5) -----------------------------------------------------------
# `approval_prompt` on /mcp/_permission asks a person about an agent's own tool (Claude Code's
# `Bash`, `Edit`, ...). The prompt is a ToolCall of kind `permission_prompt` that is never run:
# a person's approval, a session allowance of that token and session, or a remembered grant of
# that token for the exact tool name ends it as `done`. `allow_tool` and modes never apply.


def create_permission_prompt(
    token: ApiToken,
    tool_name: object,
    tool_input: object,
    session_id: str,
    tool_use_id: str | None = None,
    via: str = "mcp",
    cwd: str = "",
) -> ToolCall:
    """Check (`schemas.PromptRequest`) and record a permission prompt (SPEC 13.5, 17.1), from
    `/mcp/_permission` (`via` mcp) or a Claude Code hook (`via` hook, with the agent's `cwd`).
    Decided by the gate (`gate.decide`, as every call is) with neither mode nor allow-list:
    argument rules (14.2) first, matched on the agent's own `tool_name`: a deny ends it
    `skipped` at once, an ask makes it wait whatever else would allow it. Else it is allowed at
    once (status `done`) by an allow rule (decision `rule`), a session allowance (`session`) or
    a grant of this token (`remember`, or `grant` for a time-boxed one); else it is pending."""
    prompt = checked(
        schemas.PromptRequest,
        {"tool_name": tool_name, "input": tool_input, "tool_use_id": tool_use_id, "session_id": session_id},
    )
    now = timezone.now()
    call = ToolCall(
        kind=CallKind.PERMISSION_PROMPT,
        via=via,
        cwd=cwd[:1000],
        session_id=prompt.session_id,
        tool_name=prompt.tool_name,
        server_name="",
        tool=prompt.tool_name,
        arguments=prompt.input,
        token=token,
        requested_by=token.name,
        created_at=now,
    )
    grant_kind = functools.cache(lambda: _prompt_grant(token, prompt.tool_name))
    in_force = rules_in_force()
    decision = gate.decide(
        Mode.CONFIRM,  # modes do not apply to permission prompts, nor does allow_tool (13.5)
        allowed=lambda: False,
        session_allowed=lambda: session_allowed(token, prompt.session_id),
        # The agent names its own tool: a `prompt:...` name must not escape the plain rules.
        rule=lambda: ruling(prompt.tool_name, prompt.input, rules.PLAIN, in_force),
        granted=lambda: bool(grant_kind()),
        limited=lambda: limited(token, prompt.tool_name, prompt.input, rules.PLAIN, in_force),
        repeated=lambda: guards.repeated(token, prompt.tool_name, prompt.input),
    )
    call.rule = decision.rule
    return record(call, decision, token, now, functools.partial(_allow_at_once, grant_kind))


def _allow_at_once(grant_kind, call: ToolCall, reason: str, now: datetime.datetime) -> None:
    """A permission prompt that something allows ends `done` at once, nobody asked. A grant
    says which kind it is: remembered for good, or time-boxed (17.3)."""
    reason = grant_kind() if reason == CallDecision.GRANT else reason
    call.status, call.decision, call.decided_at, call.ended_at = CallStatus.DONE, reason, now, now
    call.decided_by = AUTOMATIC[reason]
    call.result = json.dumps(allow_answer(call))


def permission_answer(call: ToolCall) -> dict:
    """What the agent receives for an ended permission prompt (SPEC 13.5), as the JSON object
    Claude Code's `--permission-prompt-tool` expects; anything but an approval is a deny."""
    if call.status == CallStatus.DONE:
        return allow_answer(call)
    if call.status == CallStatus.ABORTED:
        return {"behavior": "deny", "message": gate.ABORTED, "interrupt": True}
    # skipped and expired carry SPEC 5's texts; cancelled and the rest their own result.
    return {"behavior": "deny", "message": call.result or f"not allowed: {call.status}"}


# Who "decided" a permission prompt that nobody was asked about (its history, a hook's reason).
AUTOMATIC = {"rule": "rule", "remember": "remembered grant", "grant": "grant", "session": "session allowance"}


def _prompt_grant(token: ApiToken, tool_name: str) -> str:
    """`remember` or `grant` when a grant of this token covers a permission prompt, else ""."""
    rows = PermissionGrant.in_force().filter(
        token=token, kind=CallKind.PERMISSION_PROMPT, tool_name=tool_name
    )
    ends = list(rows.values_list("expires_at", flat=True)[:10])
    if not ends:
        return ""
    return "remember" if None in ends else "grant"


def allow_answer(call: ToolCall) -> dict:
    return {"behavior": "allow", "updatedInput": call.arguments}


# --- token revocation (SPEC 12.2) ---------------------------------------------------------------


def revoke_token(token_id: int, by: audit.Actor = audit.BY_SYSTEM) -> tuple[bool, list[str]]:
    """Revoke a token: its next request gets 401, its session allowances and grants end, and
    its pending confirmations end `cancelled` (result `token revoked`). Returns whether this
    revoked it and the ids of the calls it ended (to announce). One `token.revoke` row tells
    of the allowances and grants that ended with it."""
    now = timezone.now()
    with transaction.atomic():
        if not ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(revoked_at=now):
            return False, []
        allowances = SessionAllowance.objects.filter(token_id=token_id, revoked_at__isnull=True).update(
            revoked_at=now
        )
        grants = PermissionGrant.objects.filter(token_id=token_id, revoked_at__isnull=True).update(
            revoked_at=now
        )
        row = ApiToken.objects.get(pk=token_id)
        audit.record(
            AuditAction.TOKEN_REVOKE,
            row.name,
            actor=by,
            before={"id": row.pk, "role": row.role, "revoked": False},
            after={"revoked": True, "allowances_ended": allowances, "grants_ended": grants},
        )
    pending = ToolCall.objects.filter(token_id=token_id, status=CallStatus.PENDING).values_list(
        "id", flat=True
    )
    ended = [str(cid) for cid in pending if finish(cid, CallStatus.CANCELLED, TOKEN_REVOKED, decided_at=now)]
    return True, ended


def app_grant_revoke(
    grant: AppGrant, by: audit.Actor | None = None, reason: str = ""
) -> tuple[bool, list[str]]:
    """Revoke an app's grant (SPEC 21.4), from any door: its token and every access and refresh
    token of it stop working at once on every process, and the calls its token left pending end
    `cancelled` as a revoked token's do (SPEC 12.2). Returns whether this revoked the grant and
    the ids of the calls it ended (to announce). `by`: who revoked it (None: the app itself, as
    when it reused a replaced refresh token); `reason` goes into its audit row."""
    by = by or grants.app_actor(grant)
    _revoked, ended = revoke_token(grant.token_id, by)
    return grants.revoke_grant(grant, by, reason), ended
