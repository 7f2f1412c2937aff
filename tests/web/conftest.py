"""Fixtures of the pages' tests: a person signed in (and one whose client checks CSRF), and a
connected server `every` with its tools, as rows (no MCP server runs)."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mcpcore.models import Server
from tests.rows import add_tools, write_servers


@pytest.fixture
def user(db) -> User:
    return User.objects.create_user("op")  # no password: force_login, and no slow hashing


@pytest.fixture
def signed_in(client, user) -> Client:
    client.force_login(user)
    return client


@pytest.fixture
def csrf_client(user) -> Client:
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    return c


@pytest.fixture
def every(agenvoy_home) -> Server:
    write_servers(
        agenvoy_home,
        {
            "every": {"command": "node", "args": ["index.js", "stdio"], "env": {"API_KEY": "s3cret-value"}},
            "other": {"url": "https://example.invalid/mcp", "headers": {"Authorization": "Bearer hush"}},
        },
    )
    add_tools("other", ["x"])
    return add_tools("every", ["echo", "get-sum", "add"])
