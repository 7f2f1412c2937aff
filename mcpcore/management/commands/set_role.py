from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ... import audit
from ...calls import people
from ...choices import PersonRole


class Command(BaseCommand):
    help = "Set a person's role (SPEC 23.1), and with --groups their groups exactly."

    def add_arguments(self, parser):
        parser.add_argument("username")
        # Checked here rather than by argparse's choices, so nothing is looked up or changed
        # before both the person and the role are known.
        parser.add_argument("role", help=f"one of {', '.join(PersonRole.values)}")
        parser.add_argument(
            "--groups",
            help="comma-separated group names: the person's groups become exactly these (made as needed)",
        )

    def handle(self, username, role, groups, **options):
        if role not in PersonRole.values:
            raise CommandError(f"unknown role: {role} (use {', '.join(PersonRole.values)})")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"unknown person: {username}")
        names = [n for n in groups.split(",") if n.strip()] if groups is not None else None
        try:
            people.change(user, audit.BY_SYSTEM, role=role, groups=names, over_sso=True)
        except people.PeopleError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"{username} is now {role}")
