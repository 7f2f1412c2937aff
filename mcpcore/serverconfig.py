"""Adding, changing and removing servers in `mcp.json`: one set of rules for `/v1`, the pages
and imports. Writes go through the locked writer; the supervisors are told afterwards."""

import sys
from pathlib import Path

from . import audit, control, files, schemas
from .models import SecretsMustBeReentered, unmask_config

KNOWN_KEYS = frozenset(schemas.ServerConfig.model_fields)  # the keys this console writes
EXAMPLE_NAME = "time"  # the example server of an empty Servers page (PyPI mcp-server-time)


class ServerConfigError(ValueError):
    """A server config that can't be used; the message is the API's error text."""


def clean_config(config: dict) -> dict:
    """A server config from the API, a form or an import, checked by the contract's
    `ServerConfig` (SPEC 7's messages) and as it is written (`schemas.server_config`)."""
    try:
        return schemas.server_config(config)
    except schemas.InputError as exc:
        raise ServerConfigError(exc.message) from None


def save(name: str, config: dict, creating: bool | None = None, by: audit.Actor = audit.BY_SYSTEM) -> None:
    """Write one server: posted `********` values keep the stored secret (while its command,
    args and url stay the same: ServerConfigError otherwise), keys written by others on that server
    survive. `creating` True/False insists the server is new/exists. Audited as `by`'s."""

    def mutate(servers: dict) -> None:
        old = servers.get(name)
        if creating is True and old is not None:
            raise files.ConfigFileError(f"a server named {name} already exists")
        if creating is False and old is None:
            raise files.ConfigFileError(f"server {name} is no longer in mcp.json")
        try:
            merged = unmask_config(config, old)
        except SecretsMustBeReentered as exc:
            raise ServerConfigError(str(exc)) from None  # raised under the lock: nothing written
        if isinstance(old, dict):
            merged = {**{k: v for k, v in old.items() if k not in KNOWN_KEYS}, **merged}
        servers[name] = merged

    files.update_servers(mutate, by)
    control.config_changed()


def example_command() -> Path:
    """Where the console's own environment has `mcp-server-time` (requirements.txt pins it):
    beside this interpreter, whatever the folder the console runs from."""
    return Path(sys.executable).with_name("mcp-server-time")


def example_installed() -> bool:
    return example_command().is_file()


def add_example(by: audit.Actor = audit.BY_SYSTEM) -> None:
    """Add the example server as `time`, enabled, so the supervisors connect it at once.
    ConfigFileError when a server of that name exists or mcp.json can't be written."""
    save(EXAMPLE_NAME, {"command": str(example_command()), "args": []}, creating=True, by=by)


def remove(name: str, by: audit.Actor = audit.BY_SYSTEM) -> bool:
    """Remove a server; False when there was none of that name."""
    found = files.update_servers(lambda servers: servers.pop(name, None) is not None, by)
    if found:
        control.config_changed()
    return bool(found)


def set_enabled(name: str, enabled: bool, by: audit.Actor = audit.BY_SYSTEM) -> None:
    def mutate(servers: dict) -> None:
        config = servers.get(name)
        if isinstance(config, dict):
            if enabled:
                config.pop("disabled", None)
            else:
                config["disabled"] = True

    files.update_servers(mutate, by)
    control.config_changed()


def import_all(found: dict[str, dict], by: audit.Actor = audit.BY_SYSTEM) -> int:
    """Add or replace the imported servers in one locked write; returns how many."""
    count = files.import_servers(found, by)
    control.config_changed()
    return count
