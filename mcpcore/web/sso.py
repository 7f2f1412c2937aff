"""Single sign-on (SPEC 23.2): allauth's `openid_connect` provider (id `sso`) in the console's
terms. The protocol (discovery, the code flow with PKCE and state, the ID token's checks) is
allauth's; this adapter decides who the signed-in identity is in the console:

- a provider identity (its `sub`) is one person: the first sign-in makes a new person (username
  `preferred_username`, else the email's local part, made unique), never one found by email;
- with AGENVOY_OIDC_ROLES, each sign-in sets the role (the highest whose groups meet the
  claim's values) and the groups (exactly the claim's values), or is refused when no role
  matches; without it the first sign-in makes a `viewer` and later ones change nothing;
- a deactivated person, and connecting an identity to a person already signed in, are refused.
"""

from allauth.account.adapter import get_adapter as get_account_adapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialLogin
from allauth.socialaccount.providers.base import AuthProcess
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from .. import audit
from ..calls import people
from ..choices import AuditAction, PersonRole
from ..models import Group, Person
from .signin import LoginForm

GROUP_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def claims(sociallogin: SocialLogin) -> dict:
    """The identity's claims: the ID token's, with the userinfo answer's over them (allauth
    keeps both; Entra ID, for one, puts `groups` in the ID token only)."""
    data = sociallogin.account.extra_data or {}
    return {**(data.get("id_token") or {}), **(data.get("userinfo") or {})}


def claimed_groups(values: dict) -> list[str]:
    """The groups claim's values: a list of strings, or one string."""
    raw = values.get(settings.AGENVOY_OIDC_GROUPS_CLAIM)
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return [v for v in raw if isinstance(v, str) and v]


def role_for(groups: list[str]) -> str | None:
    """The highest role of AGENVOY_OIDC_ROLES whose groups meet `groups` (`*`: anyone)."""
    have = set(groups)
    for role, wanted in settings.AGENVOY_OIDC_ROLES:
        if "*" in wanted or wanted & have:
            return role
    return None


def group_names(groups: list[str]) -> list[str]:
    """The claim's values that are group names (SPEC 23.3: `[a-z0-9_-]`, 1-64 characters);
    others (a Keycloak full path `/team/ops`, a display name) are not made into groups."""
    return sorted({g for g in groups if len(g) <= 64 and set(g) <= GROUP_NAME_CHARS})


def decided_role(values: dict) -> str | None:
    """The role the claim gives, or None when AGENVOY_OIDC_ROLES is unset."""
    return role_for(claimed_groups(values)) if settings.AGENVOY_OIDC_ROLES else None


def who(values: dict) -> str:
    return str(values.get("email") or values.get("preferred_username") or values.get("sub") or "")


def refused(request: HttpRequest, message: str, values: dict, reason: str) -> ImmediateHttpResponse:
    """The sign-in page with `message`, 403, and the `signin.failed` audit row."""
    name = who(values)
    audit.record(
        AuditAction.SIGNIN_FAILED,
        name,
        actor=name,
        address=audit.address_of(request),
        after={"via": "sso", "reason": reason},
    )
    page = render_to_string(
        "account/login.html", {"form": LoginForm(request=request), "refused": message}, request
    )
    return ImmediateHttpResponse(HttpResponse(page, status=403))


def apply_claims(user, role: str | None, groups: list[str], first: bool, by: audit.Actor) -> None:
    """The person's role and groups after a sign-in: from the claim with AGENVOY_OIDC_ROLES
    (`role` is then the matched one), else `viewer` on the first sign-in and nothing after.
    An account without a Person row is an admin (models.Person): the row is written in the
    same transaction as the account. A known person's change is `people.change`'s: audited as
    `person.edit` and refused (PeopleError) when it would leave no active admin."""
    if role is None:
        if first:
            Person.objects.update_or_create(
                user=user, defaults={"role": PersonRole.VIEWER, "from_sso": False}
            )
        return
    if first:
        Person.objects.update_or_create(user=user, defaults={"role": role, "from_sso": True})
        user.console_groups.set([Group.objects.get_or_create(name=n)[0] for n in group_names(groups)])
        return
    people.change(user, by, role=role, groups=group_names(groups), over_sso=True)
    Person.objects.filter(user=user).update(from_sso=True)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    """Who a provider identity is in the console (the module's docstring)."""

    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        # The console's own sign-up stays closed (signin.AccountAdapter); the provider's people
        # are made at their first sign-in.
        return True

    def is_auto_signup_allowed(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        return True  # never allauth's sign-up form

    def populate_user(self, request: HttpRequest, sociallogin: SocialLogin, data: dict):
        user = super().populate_user(request, sociallogin, data)
        email = data.get("email") or ""
        base = data.get("username") or email.partition("@")[0]
        user.username = get_account_adapter(request).generate_unique_username([base, "user"])
        return user

    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        """Refuse before anything is made or signed in: connecting the identity to the person
        signed in (it would join it to an existing person), a deactivated person, no role.
        For a person already known, role and groups are set here from the claim."""
        values = claims(sociallogin)
        if sociallogin.state.get("process") == AuthProcess.CONNECT:
            raise refused(
                request, "A provider identity is not joined to an existing person.", values, "connect"
            )
        if sociallogin.is_existing and not sociallogin.user.is_active:
            raise refused(request, f"{who(values)} is deactivated in this console.", values, "deactivated")
        role = decided_role(values)
        if settings.AGENVOY_OIDC_ROLES and role is None:
            raise refused(request, f"{who(values)} has no role in this console.", values, "no role")
        if sociallogin.is_existing:
            user = sociallogin.user
            by = audit.Actor(user.get_username(), audit.address_of(request))
            try:
                with transaction.atomic():
                    apply_claims(user, role, claimed_groups(values), first=False, by=by)
            except people.PeopleError as exc:
                raise refused(request, exc.message, values, "last admin") from None

    def save_user(self, request: HttpRequest, sociallogin: SocialLogin, form=None):
        """A new person, with their Person row in the same transaction."""
        with transaction.atomic():
            user = super().save_user(request, sociallogin, form)
            values = claims(sociallogin)
            by = audit.Actor(user.get_username(), audit.address_of(request))
            apply_claims(user, decided_role(values), claimed_groups(values), first=True, by=by)
        return user
