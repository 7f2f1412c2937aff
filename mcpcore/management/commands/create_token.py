from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from ... import audit, bearer, toolviewstore
from ...calls import people
from ...choices import TokenRole


class Command(BaseCommand):
    help = "Create an API token for /v1 and print it once (only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--role",
            choices=TokenRole.values,
            default=TokenRole.AGENT,
            help="what the token may do (SPEC 12); fixed for the token's life (default: agent)",
        )
        parser.add_argument("--no-auto", action="store_true", help="the token may not use auto mode")
        parser.add_argument(
            "--view",
            action="append",
            dest="views",
            metavar="VIEW",
            help="limit the token to this view's tools (SPEC 19); repeat for several",
        )
        parser.add_argument(
            "--group",
            action="append",
            dest="groups",
            metavar="GROUP",
            help="an approver token's group (SPEC 23.3), made if needed; repeat for several",
        )

    def handle(self, name, role, no_auto, views, groups, **options):
        if groups and role != TokenRole.APPROVER:
            raise CommandError(f"--group is for approver tokens (--role approver), not {role}")
        try:
            groups = people.group_names(groups or [])
        except people.PeopleError as exc:
            raise CommandError(exc.message) from None
        limited = None
        if views is not None:
            limited, unknown = toolviewstore.known_toolviews(views)
            if unknown:
                raise CommandError(f"unknown view: {', '.join(unknown)}")
        with transaction.atomic():
            row, token = bearer.issue(name, not no_auto, role, limited, by=audit.BY_SYSTEM)
            people.token_groups(row, groups, audit.BY_SYSTEM)
        self.stdout.write(token)
