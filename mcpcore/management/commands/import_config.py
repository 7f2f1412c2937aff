import json

from django.core.management.base import BaseCommand, CommandError

from ... import audit, files, serverconfig


class Command(BaseCommand):
    help = "Import servers from a JSON file (`servers` or `mcpServers` shape) into mcp.json."

    def add_arguments(self, parser):
        parser.add_argument("file")

    def handle(self, file, **options):
        try:
            with open(file, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as exc:
            raise CommandError(f"can't read {file}: {exc.strerror}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise CommandError(f"{file} is not valid JSON: {exc}") from None
        try:
            count = serverconfig.import_all(files.import_shape(data), audit.BY_SYSTEM)
        except files.ConfigFileError as exc:
            raise CommandError(f"{file}: {exc}") from None
        self.stdout.write(f"imported {count} server{'s' if count != 1 else ''} from {file}")
