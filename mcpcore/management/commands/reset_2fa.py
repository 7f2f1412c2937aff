from allauth.mfa.models import Authenticator
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from mcpcore import audit
from mcpcore.choices import AuditAction

KIND_NAMES = {"totp": "authenticator app", "webauthn": "passkey", "recovery_codes": "recovery codes"}


class Command(BaseCommand):
    help = "Remove a person's second factors (authenticator app, passkeys, recovery codes) (SPEC 22.1)."

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, username, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no such user: {username}")
        found = list(Authenticator.objects.filter(user=user).order_by("type", "pk"))
        if not found:
            self.stdout.write(f"{username} has no second factor; nothing removed.")
            return
        for authenticator in found:
            name = KIND_NAMES.get(authenticator.type, authenticator.type)
            if authenticator.type == Authenticator.Type.WEBAUTHN:
                name += f" {authenticator.wrap().name!r}"
            before = audit.factor(authenticator)
            authenticator.delete()
            audit.record(AuditAction.MFA_REMOVE, username, actor=audit.BY_SYSTEM, before=before)
            self.stdout.write(f"removed {name}")
        self.stdout.write(f"{username} now signs in with a password alone.")
