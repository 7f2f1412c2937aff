import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the user `admin` when no user exists, printing its password once."

    def handle(self, **options):
        User = get_user_model()
        if User.objects.exists():
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "", password)
        # Framed, so it stands out above the console's own output that follows it in `make run`.
        rule = "=" * 72
        self.stdout.write(
            f"{rule}\n"
            "Created the first user. Sign in at http://127.0.0.1:8000/ with\n"
            f"  username: admin\n  password: {password}\n"
            "This password is shown only once; change it with "
            "`.venv/bin/python manage.py changepassword admin`.\n"
            f"{rule}"
        )
