from django.core.management.base import BaseCommand, CommandError

from ... import audit, bearer, toolviewstore
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

    def handle(self, name, role, no_auto, views, **options):
        limited = None
        if views is not None:
            limited, unknown = toolviewstore.known_toolviews(views)
            if unknown:
                raise CommandError(f"unknown view: {', '.join(unknown)}")
        _, token = bearer.issue(name, not no_auto, role, limited, by=audit.BY_SYSTEM)
        self.stdout.write(token)
