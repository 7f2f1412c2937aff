"""People and groups (SPEC 23.1, 23.3): a person's role, groups and standing, groups' members and
escalation, each change checked and audited in one transaction. The People page, `/v1/groups`,
`set_role`, `create_token --group` and single sign-on all change them through here.

A person without a `Person` row is an `admin` (the people from before roles). The console always
keeps one active admin: a change that would leave none is refused and rolled back.
"""

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q

from .. import audit, files, rules
from ..choices import AuditAction, PersonRole
from ..models import ApiToken, Group, Person

GROUP_NAME = rules.GROUP_NAME
LAST_ADMIN = "The console needs an active admin."
INVALID_GROUP = "invalid group name"


class PeopleError(ValueError):
    """A change refused, with the message to show (or answer with `status` on `/v1`)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def role_of(user) -> str:
    """A person's role: their `Person` row's, `admin` without one."""
    role = Person.objects.filter(user_id=user.pk).values_list("role", flat=True).first()
    return role or PersonRole.ADMIN


def _active_admins() -> int:
    users = get_user_model().objects.filter(is_active=True)
    return users.filter(Q(person__isnull=True) | Q(person__role=PersonRole.ADMIN)).count()


def groups_of(user) -> list[str]:
    return sorted(Group.objects.filter(people=user).values_list("name", flat=True))


def standing(user) -> dict:
    """What `person.edit` rows compare: role, groups, active."""
    return {"role": role_of(user), "groups": groups_of(user), "active": user.is_active}


def group_names(raw: Iterable[str]) -> list[str]:
    """Names as given, checked (`invalid group name: <name>`), without repeats, in order."""
    out: list[str] = []
    for name in raw:
        name = name.strip()
        if not GROUP_NAME.match(name):
            raise PeopleError(f"{INVALID_GROUP}: {name}")
        if name not in out:
            out.append(name)
    return out


def _groups_made(names: list[str], by: audit.Actor) -> list[Group]:
    """The groups named, made (and audited as `group.add`) where missing."""
    found = {g.name: g for g in Group.objects.filter(name__in=names)}
    for name in names:
        if name not in found:
            found[name] = Group.objects.create(name=name)
            audit.record(AuditAction.GROUP_ADD, name, actor=by, after=group_dict(found[name]))
    return [found[n] for n in names]


def change(
    user,
    by: audit.Actor,
    *,
    role: str | None = None,
    groups: list[str] | None = None,
    active: bool | None = None,
    over_sso: bool = False,
) -> dict:
    """Set what is given of a person's role, groups (exactly these, made as needed) and
    standing; one `person.edit` row with what changed before and after. Role and groups that
    the identity provider sets (`Person.from_sso`) are not the People page's to change: only
    the provider's sign-in and the operator's `set_role` pass `over_sso`."""
    if role is not None and role not in PersonRole.values:
        raise PeopleError(f"unknown role: {role}")
    names = group_names(groups) if groups is not None else None
    with transaction.atomic():
        person = Person.objects.filter(user_id=user.pk).first()
        if (
            person is not None
            and person.from_sso
            and not over_sso
            and (role is not None or names is not None)
        ):
            raise PeopleError(f"{user.get_username()}'s role and groups come from SSO")
        before = standing(user)
        if role is not None and role != before["role"]:
            Person.objects.update_or_create(user=user, defaults={"role": role})
        if names is not None and names != before["groups"]:
            user.console_groups.set(_groups_made(names, by))
        if active is not None and active != user.is_active:
            user.is_active = active
            user.save(update_fields=["is_active"])
        if _active_admins() == 0:
            raise PeopleError(LAST_ADMIN)
        after = standing(user)
        if after != before:
            changed = [k for k in after if after[k] != before[k]]
            audit.record(
                AuditAction.PERSON_EDIT,
                user.get_username(),
                actor=by,
                before={k: before[k] for k in changed},
                after={k: after[k] for k in changed},
            )
    return after


def add(username: str, email: str, role: str, groups: list[str], by: audit.Actor):
    """A new person who signs in with a password they set from a one-time link (made by the
    caller): no usable password until then."""
    if role not in PersonRole.values:
        raise PeopleError(f"unknown role: {role}")
    names = group_names(groups)
    User = get_user_model()
    with transaction.atomic():
        if User.objects.filter(username__iexact=username).exists():
            raise PeopleError(f"{username} already exists")
        user = User(username=username, email=email)
        user.set_unusable_password()
        user.save()
        Person.objects.create(user=user, role=role)
        user.console_groups.set(_groups_made(names, by))
        audit.record(
            AuditAction.PERSON_ADD,
            username,
            actor=by,
            after={"email": email, "role": role, "groups": names, "active": True},
        )
    return user


# --- groups (SPEC 23.3) ---------------------------------------------------------------------------


def group_dict(group: Group) -> dict:
    """A group as `GET /v1/groups` lists it."""
    return {
        "name": group.name,
        "people": sorted(u.get_username() for u in group.people.all()),
        "tokens": sorted(t.name for t in group.tokens.all()),
        "escalate_to": group.escalate_to.name if group.escalate_to_id else None,  # type: ignore[union-attr]
        "escalate_after_minutes": group.escalate_after_minutes,
    }


def all_groups() -> list[dict]:
    found = Group.objects.select_related("escalate_to").prefetch_related("people", "tokens")
    return [group_dict(g) for g in found.order_by("name")]


def save_group(
    name: str,
    people: list[str],
    by: audit.Actor,
    *,
    escalate_to: str | None = None,
    escalate_after_minutes: int | None = None,
) -> Group:
    """Make a group, or replace its people and escalation (`group.add` / `group.edit`)."""
    if not GROUP_NAME.match(name):
        raise PeopleError(INVALID_GROUP)
    User = get_user_model()
    members = []
    for username in people:
        # A NUL can't be in a username, and PostgreSQL refuses it in a query.
        user = User.objects.filter(username=username).first() if "\x00" not in username else None
        if user is None:
            raise PeopleError(f"unknown person: {username}")
        members.append(user)
    with transaction.atomic():
        target = None
        if escalate_to is not None:
            target = Group.objects.filter(name=escalate_to).first() if GROUP_NAME.match(escalate_to) else None
            if target is None or escalate_to == name:
                raise PeopleError(f"unknown group: {escalate_to}")
        group, made = Group.objects.get_or_create(name=name)
        before = None if made else group_dict(group)
        group.escalate_to = target
        group.escalate_after_minutes = escalate_after_minutes
        group.save()
        group.people.set(members)
        after = group_dict(group)
        if made:
            audit.record(AuditAction.GROUP_ADD, name, actor=by, after=after)
        elif after != before:
            audit.record(AuditAction.GROUP_EDIT, name, actor=by, before=before, after=after)
    return group


def _named_by_rules() -> set[str]:
    """The groups the `rules` file names, and those the rules in force name (the file may
    have a bad line: the last good rules still route to their groups)."""
    try:
        text = files.read_rules_text()
    except files.ConfigFileError:
        text = ""
    in_force = "\n".join(r.text for r in files.mirrored_rules())
    return rules.groups_named(text) | rules.groups_named(in_force)


def remove_group(name: str, by: audit.Actor) -> None:
    """Remove a group no rule names (404 `group not found`; 400 while a rule names it)."""
    with transaction.atomic():
        group = Group.objects.filter(name=name).first() if GROUP_NAME.match(name) else None
        if group is None:
            raise PeopleError("group not found", 404)
        if name in _named_by_rules():
            raise PeopleError(f"group {name} is used by rules")
        if group.escalated_from.exists():
            raise PeopleError(f"group {name} is escalated to from another group")
        if group.targets.exists():  # the target would then hear of every group's (SPEC 24.7)
            raise PeopleError(f"group {name} is named by a notification target")
        before = group_dict(group)
        group.delete()
        audit.record(AuditAction.GROUP_REMOVE, name, actor=by, before=before)


def token_groups(token: ApiToken, names: list[str], by: audit.Actor) -> None:
    """Put an approver token in these groups (made as needed): `create_token --group`."""
    with transaction.atomic():
        for group in _groups_made(group_names(names), by):
            before = group_dict(group)
            group.tokens.add(token)
            audit.record(AuditAction.GROUP_EDIT, group.name, actor=by, before=before, after=group_dict(group))
