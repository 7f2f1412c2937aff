"""Who may decide a pending confirmation (SPEC 24.1): one an `ask[<group>]` line held is for
that group's members (people, and approver tokens in the group) and admins (admin people and
admin tokens); any other is for every approver and admin, as before. Every door's reply, batch,
extension and answer goes through the call layer's one check here (`refusal`), after the door's
own 12.1 refusals and before the 410.
"""

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from ..choices import CallStatus, PersonRole, TokenRole
from ..models import ApiToken, Group, NotificationTarget, ToolCall
from .people import role_of


@dataclass(frozen=True)
class Replier:
    """Who replies to a pending item: a signed-in person (`user_id`), an API token (`token`),
    or a notification target's one-tap link (`target`). `name` is what `decided_by` says."""

    name: str
    user_id: int | None = None
    token: ApiToken | None = None
    target: NotificationTarget | None = None

    @classmethod
    def person(cls, user) -> "Replier":
        return cls(user.get_username(), user_id=user.pk)

    @classmethod
    def of_token(cls, token: ApiToken) -> "Replier":
        return cls(f"token:{token.name}", token=token)

    @classmethod
    def one_tap(cls, target: NotificationTarget) -> "Replier":
        return cls(f"{target.name} (one-tap)", target=target)


def name_of(who: "str | Replier") -> str:
    """What `decided_by` says of a replier."""
    return who.name if isinstance(who, Replier) else who


def _as_replier(who: "str | Replier") -> Replier:
    """A door's replier as given; a bare name (the call layer's own callers, commands) is the
    person of that username, or nobody's member when there is none."""
    if isinstance(who, Replier):
        return who
    user = get_user_model().objects.filter(username=who).first() if "\x00" not in who else None
    return Replier(who, user_id=user.pk if user is not None else None)


def for_text(group: str) -> str:
    # "" only for a target naming groups whose link names a call of none (its groups changed
    # after it was sent one): that call is every approver's.
    return f"this confirmation is for {group or 'every approver'}"


def deciding_groups(replier: "str | Replier") -> frozenset[str] | None:
    """The groups whose confirmations a person or token decides (SPEC 24.1); None for every
    group (an admin person or token)."""
    who = _as_replier(replier)
    if who.token is not None:
        if who.token.role == TokenRole.ADMIN:
            return None
        return frozenset(Group.objects.filter(tokens=who.token.pk).values_list("name", flat=True))
    if who.user_id is None:
        return frozenset()
    if role_of(get_user_model()(pk=who.user_id)) == PersonRole.ADMIN:
        return None
    return frozenset(Group.objects.filter(people=who.user_id).values_list("name", flat=True))


def decides(call: ToolCall, groups: frozenset[str] | None) -> bool:
    """Whether one deciding `groups` (`deciding_groups`) decides `call`: its group's, or the
    group it was escalated to (SPEC 24.3)."""
    if not call.for_group or groups is None:
        return True
    return call.for_group in groups or bool(call.escalated_to and call.escalated_to in groups)


def sent_to(call: ToolCall, target_groups: frozenset[str]) -> bool:
    """Whether a notification target naming `target_groups` is told of `call` (SPEC 24.7): one
    naming none hears of every confirmation, one naming some only of those groups'."""
    if not target_groups or call.for_group in target_groups:
        return True
    return bool(call.escalated_to and call.escalated_to in target_groups)  # its escalation's (24.3)


def escalate_due(tell: Callable[[ToolCall, datetime.datetime], object]) -> list[str]:
    """Escalate the pending confirmations whose group's `escalate_after_minutes` have passed
    since they were asked (SPEC 24.3): each is then also for the group's `escalate_to`. The
    conditional UPDATE that marks one escalated is the claim, so every supervisor's tick may
    run this and each escalation happens once, whichever process (or restart) sees it first;
    `tell(call, now)` writes its notifications in the claim's transaction. The expiry is left
    alone. Returns the call ids escalated."""
    now = timezone.now()
    rows = Group.objects.filter(escalate_to__isnull=False, escalate_after_minutes__isnull=False)
    after = {
        g.name: (g.escalate_to.name, g.escalate_after_minutes or 0)  # type: ignore[union-attr]
        for g in rows.select_related("escalate_to")
    }
    if not after:
        return []
    waiting = ToolCall.objects.filter(status=CallStatus.PENDING, for_group__in=list(after), escalated_to="")
    done = []
    for call in waiting:
        other, minutes = after[call.for_group]
        if call.created_at + datetime.timedelta(minutes=minutes) > now:
            continue
        with transaction.atomic():
            claim = ToolCall.objects.filter(id=call.id, status=CallStatus.PENDING, escalated_to="")
            if claim.update(escalated_to=other, escalated_at=now) != 1:
                continue  # another process escalated it, or it ended meanwhile
            call.escalated_to, call.escalated_at = other, now
            tell(call, now)
        done.append(str(call.id))
    return done


def may_decide(call: ToolCall, replier: "str | Replier") -> bool:
    """Whether `replier` may decide `call` (SPEC 24.1): anyone past 12.1's checks when no group
    holds it (asked nothing more: the call any approver decides costs no query); else the
    group's members and admins. A target's one-tap link decides only what was sent to that
    target (24.7)."""
    if isinstance(replier, Replier) and replier.target is not None:
        return sent_to(call, replier.target.group_names())
    return not call.for_group or decides(call, deciding_groups(replier))


def refusal(call: ToolCall, who: "str | Replier") -> str | None:
    """`this confirmation is for <group>` (a 403) for one who may not decide `call`, else None."""
    return None if may_decide(call, who) else for_text(call.for_group)
