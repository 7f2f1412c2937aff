"""Signing in (SPEC 22.1): allauth's sign-in and second factors, limited by axes, in the
console's terms. Failed attempts count per username (whatever its letter case) and client
address; the client address is `audit.address_of`'s (read from the right of `X-Forwarded-For`
through AGENVOY_TRUSTED_PROXIES); a wrong second-factor code counts as a failed sign-in; a
locked pair gets the sign-in page with 429. AGENVOY_REQUIRE_2FA keeps a person without a second
factor on the Account page. A sign-in through the identity provider (SPEC 23.2, web/sso.py) is
asked for neither; AGENVOY_PASSWORD_SIGNIN=0 refuses a password with 403."""

from allauth.account import views as account_views
from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.forms import LoginForm as AllauthLoginForm
from allauth.core import context
from allauth.mfa.adapter import DefaultMFAAdapter
from allauth.mfa.base.forms import AuthenticateForm as AllauthAuthenticateForm
from allauth.mfa.models import Authenticator
from allauth.mfa.stages import AuthenticateStage
from allauth.usersessions.adapter import DefaultUserSessionsAdapter
from allauth.usersessions.adapter import get_adapter as sessions_adapter
from allauth.usersessions.models import UserSession
from axes.handlers.proxy import AxesProxyHandler
from django import forms
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string

from .. import audit
from ..oauth import upstream
from . import live

SECOND_FACTORS = (Authenticator.Type.TOTP, Authenticator.Type.WEBAUTHN)


def lock_message() -> str:
    return f"Too many failed sign-ins. Try again in {settings.AGENVOY_SIGNIN_LOCK_MINUTES} minutes."


def client_address(request: HttpRequest) -> str:
    """axes' client address: the audit trail's (the peer, or a trusted proxy's client)."""
    return audit.address_of(request)


def username_of(request: HttpRequest, credentials: dict | None) -> str:
    """The username a sign-in is for, as axes counts it: allauth passes `username`; its form
    field is `login`. In lower case: sign-in matches a username whatever its letter case, so
    `Alice` and `ALICE` are the same person's attempts and share one count."""
    credentials = credentials or {}
    name = credentials.get("username") or credentials.get("login")
    if not name and request is not None and request.method == "POST":
        name = request.POST.get("login") or request.POST.get("username")
    return (name or "").lower()


def locked_out(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """axes' answer for a locked pair: the sign-in page with the message, 429."""
    page = render_to_string(
        "account/login.html", {"form": LoginForm(request=request), "locked": lock_message()}, request
    )
    return HttpResponse(page, status=429)


class AccountAdapter(DefaultAccountAdapter):
    """No sign-up: people are made by `make run`'s first admin and `createsuperuser`."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return False

    def get_client_ip(self, request: HttpRequest) -> str:
        return client_address(request) or "0.0.0.0"

    def get_login_stages(self) -> list[str]:
        """allauth's stages, with the second factor's asked only of the console's own sign-in."""
        mfa = f"{AuthenticateStage.__module__}.{AuthenticateStage.__qualname__}"
        ours = f"{SecondFactorStage.__module__}.{SecondFactorStage.__qualname__}"
        return [ours if stage == mfa else stage for stage in super().get_login_stages()]

    def logout(self, request: HttpRequest) -> None:
        """Sign out, and close the session's live sockets (they outlive its requests)."""
        key = request.session.session_key
        super().logout(request)
        live.end_sockets([key] if key else [])


class UserSessionsAdapter(DefaultUserSessionsAdapter):
    """Sessions ended from the Account page (`Sign out` of another browser) close their live
    sockets too."""

    def end_sessions(self, sessions) -> None:
        sessions = list(sessions)
        super().end_sessions(sessions)
        live.end_sockets([s.session_key for s in sessions])


class MFAAdapter(DefaultMFAAdapter):
    """The TOTP key and the recovery codes' seed are kept sealed, as the OAuth tokens are
    (`upstream.seal`, under the secret key), never in clear in the database."""

    def encrypt(self, text: str) -> str:
        return upstream.seal(text)

    def decrypt(self, encrypted_text: str) -> str:
        return upstream.unseal(encrypted_text) or ""


class LoginForm(AllauthLoginForm):
    """allauth's sign-in form; `username` is taken for its `login` field, as the console's
    sign-in always posted it."""

    def __init__(self, *args, **kwargs) -> None:
        data = kwargs.get("data", args[0] if args else None)
        if data is not None and "login" not in data and "username" in data:
            data = data.copy()
            data["login"] = data["username"]
            if args:
                args = (data, *args[1:])
            else:
                kwargs["data"] = data
        super().__init__(*args, **kwargs)


class AuthenticateForm(AllauthAuthenticateForm):
    """The second step of a sign-in: refused while the pair is locked; a wrong code is a
    failed sign-in (axes counts it, and locks the pair at the limit)."""

    def clean_code(self) -> str:
        request = context.request
        credentials = {"username": self.user.get_username()}
        if AxesProxyHandler.is_locked(request, credentials):
            request.axes_locked_out = True
            raise forms.ValidationError(lock_message())
        try:
            return super().clean_code()
        except forms.ValidationError:
            user_login_failed.send(sender=AuthenticateForm, credentials=credentials, request=request)
            raise


class SecondFactorStage(AuthenticateStage):
    """allauth's second-factor step, not asked of a sign-in through the identity provider: the
    provider has its own (SPEC 23.2)."""

    def handle(self) -> tuple:
        if "sociallogin" in (self.login.signal_kwargs or {}):
            return None, True
        return super().handle()


def password_refused(request: HttpRequest) -> HttpResponse:
    """AGENVOY_PASSWORD_SIGNIN=0: the sign-in page, without its form, and 403."""
    message = f"Password sign-in is turned off here: sign in with {settings.AGENVOY_OIDC_NAME}."
    page = render_to_string(
        "account/login.html", {"form": LoginForm(request=request), "refused": message}, request
    )
    return HttpResponse(page, status=403)


def login(request: HttpRequest) -> HttpResponse:
    """allauth's sign-in page; a password posted while AGENVOY_PASSWORD_SIGNIN=0 is refused
    before any password is checked (nor counted by axes)."""
    if request.method == "POST" and not settings.AGENVOY_PASSWORD_SIGNIN:
        return password_refused(request)
    return account_views.login(request)


def end_sessions_of(user) -> None:
    """End every session of a person (deactivated: SPEC 23.1), in the database every process
    reads, their live sockets closed; a request of theirs still on its way is refused by the
    auth backend, which takes no inactive person."""
    sessions_adapter().end_sessions(UserSession.objects.filter(user=user))


def has_second_factor(user) -> bool:
    return Authenticator.objects.filter(user=user, type__in=SECOND_FACTORS).exists()


# Where a person without a second factor may still go under AGENVOY_REQUIRE_2FA.
_OPEN_PREFIXES = ("/account/", "/accounts/", "/logout/", "/login/", "/static/")


class RequireSecondFactor:
    """AGENVOY_REQUIRE_2FA=1: a signed-in person without a second factor reaches only the
    Account page (and allauth's pages that add one) until one is added."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if settings.AGENVOY_REQUIRE_2FA and self._held(request):
            return redirect("account")
        return self.get_response(request)

    @staticmethod
    def _held(request: HttpRequest) -> bool:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated or request.path.startswith(_OPEN_PREFIXES):
            return False
        return not audit.through_provider(request, user) and not has_second_factor(user)
